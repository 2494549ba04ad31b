"""Console scripts run without paying Python's and fairseq's start-up for each one.

Most of the suite's commands fail fast on purpose (a damaged checkpoint, another dictionary)
or train for a second, yet each new process spends 3-5 CPU-seconds importing torch and fairseq
first: a hundred of them were half of the suite's CPU time.  The lab's command server
(monoattn_lab.processes.CommandServer, the one the local worker trains through), forked from
this test process before any test ran, imports torch and fairseq once; each command is then a
child forked from the server, which runs the console script's own entry point with the given
arguments, folder and environment and a new process's module search path, its standard output
and error in files, and exits with the code the script would.  Each child starts from the
server's state, never from a test's: the plugin and the commands' own modules are imported by
the child, as by a new process.

What a child shares with the server and a new process would not: torch and fairseq imported
already (their import-time output is not seen) and start-up-only settings (``OMP_NUM_THREADS``,
``PYTHONPATH``, ``LD_PRELOAD``): the tests of those start real processes.  Without ``os.fork``
the commands run as processes.

The plugin's and the lab's own commands are run as the checkout's setup.py declares them (its
``console_scripts``), not as the installed wrappers say: a checkout whose commands moved since
``make install`` runs its own.
"""

import ast
import atexit
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from monoattn_lab.processes import CommandServer, console_scripts

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
# What every forked command gets (the same as tests/test_faults.py's commands): one thread,
# Python's warnings off so that a command's error is its only line.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}

# torch._dynamo: torch's compiler, which every torch optimizer imports when it is built (a second
# of each training's start-up otherwise)
FAIRSEQ_LIBRARIES = (
    "fairseq",
    "fairseq.checkpoint_utils",
    "fairseq.trainer",
    "fairseq.sequence_generator",
    "torch._dynamo",
)

_server: Optional["CommandServer"] = None


def start_server() -> None:
    """Fork the command server (once per test process; call before any tensor operation)."""
    global _server
    if _server is None and hasattr(os, "fork") and "fairseq" not in sys.modules:
        # fairseq and the libraries its commands import; not the commands' modules (their import
        # sets up logging, as each command's own does) and not the plugin (a command imports it
        # as a new process would: from --user-dir, or as its own package)
        scripts = {**console_scripts(), **project_scripts()}
        _server = CommandServer(scripts, imports=FAIRSEQ_LIBRARIES, quiet=True)
        atexit.register(_server.close)


def command(name: str, *argv, cwd=None, env=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``subprocess.run([BIN/name, *argv], capture_output=True, text=True)``, forked from the
    command server when there is one; ``env`` is added to this process's environment and
    THREAD_ENV."""
    if not server_running():
        return new_process(name, *argv, cwd=cwd, env=env, timeout=timeout)
    environment = dict(os.environ, **THREAD_ENV, **(env or {}))
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        child = _server.start([str(BIN / name), *map(str, argv)], str(out), str(err), cwd=cwd, env=environment)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(60)
            raise subprocess.TimeoutExpired([name, *argv], timeout) from None
        return subprocess.CompletedProcess([name, *argv], code, out.read_text(), err.read_text())


def project_scripts() -> Dict[str, str]:
    """{command: "module:function"}: the console scripts this checkout's setup.py declares."""
    for node in ast.walk(ast.parse((REPO / "setup.py").read_text())):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            entries = ast.literal_eval(node.value)["console_scripts"]
            return dict((part.strip() for part in entry.split("=", 1)) for entry in entries)
    raise RuntimeError(f"{REPO / 'setup.py'} declares no entry_points")


def script_argv(name: str) -> List[str]:
    """The command line of console script ``name``: for the checkout's own commands, its entry
    point run as the installed wrapper runs it; any other, the installed script."""
    target = project_scripts().get(name)
    if target is None:
        return [str(BIN / name)]
    module, function = target.split(":")
    code = f"import sys; from {module} import {function}; sys.argv[0] = {str(BIN / name)!r}; sys.exit({function}())"
    return [sys.executable, "-c", code]


def new_process(name: str, *argv, cwd=None, env=None, timeout: Optional[float] = 600) -> subprocess.CompletedProcess:
    """:func:`command` as a new process, always."""
    return subprocess.run(
        [*script_argv(name), *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, **THREAD_ENV, **(env or {})),
        timeout=timeout,
    )


def server_running() -> bool:
    return _server is not None and _server.alive()


def training_server() -> Optional["CommandServer"]:
    """The command server, for ``monoattn_lab.runs.run(..., forked=training_server())``: the run's
    fairseq-train is forked from it, as the lab's worker forks its own, instead of a new process
    that imports torch and fairseq again; None without one (the run starts a process)."""
    return _server if server_running() else None
