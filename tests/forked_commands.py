"""Console scripts run without paying Python's and fairseq's start-up for each one.

Most of the suite's commands fail fast on purpose (a damaged checkpoint, another dictionary)
or train for a second, yet each new process spends 3-5 CPU-seconds importing torch and fairseq
first: a hundred of them were half of the suite's CPU time.  A *command server*, forked from
this test process before any test ran, imports torch and fairseq once; each command is then a
child forked from the server, which runs the console script's own entry
point (the ``console_scripts`` entry of the installed package) with the given arguments, folder
and environment and a new process's module search path, its standard output and error in
files, and exits with the code the script would.  The server has done no tensor work (a
process forked after torch started OpenMP threads can hang), and each child starts from the
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
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
# What every forked command gets (the same as tests/test_faults.py's commands): one thread,
# Python's warnings off so that a command's error is its only line.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}

FAIRSEQ_LIBRARIES = ("fairseq", "fairseq.checkpoint_utils", "fairseq.trainer", "fairseq.sequence_generator")

_server: Optional["CommandServer"] = None


def start_server() -> None:
    """Fork the command server (once per test process; call before any tensor operation)."""
    global _server
    if _server is None and hasattr(os, "fork") and "fairseq" not in sys.modules:
        _server = CommandServer()


def command(name: str, *argv, cwd=None, env=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``subprocess.run([BIN/name, *argv], capture_output=True, text=True)``, forked from the
    command server when there is one; ``env`` is added to this process's environment and
    THREAD_ENV."""
    if not server_running():
        return new_process(name, *argv, cwd=cwd, env=env, timeout=timeout)
    environment = dict(os.environ, **THREAD_ENV, **(env or {}))
    return _server.run(name, [str(a) for a in argv], cwd=cwd, env=environment, timeout=timeout)


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


class CommandServer:
    """The test process's end of the server: requests go down one pipe, replies come up another."""

    def __init__(self):
        request_read, self._requests = os.pipe()
        self._replies, reply_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the server: never returns
            os.close(self._requests)
            os.close(self._replies)
            _serve(request_read, reply_write)
        os.close(request_read)
        os.close(reply_write)
        self._buffer = b""
        atexit.register(self.close)

    def alive(self) -> bool:
        return self.pid is not None

    def run(self, name, argv, cwd, env, timeout) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"name": name, "argv": argv, "cwd": str(cwd or os.getcwd()), "env": env,
                       "stdout": str(out), "stderr": str(err)}  # fmt: skip
            os.write(self._requests, json.dumps(request).encode() + b"\n")
            child = int(self._line(time.monotonic() + 60))
            try:
                code = int(self._line(time.monotonic() + timeout))
            except subprocess.TimeoutExpired:
                os.kill(child, signal.SIGKILL)
                self._line(time.monotonic() + 60)
                raise subprocess.TimeoutExpired([name, *argv], timeout) from None
            return subprocess.CompletedProcess([name, *argv], code, out.read_text(), err.read_text())

    def _line(self, deadline: float) -> str:
        """The server's next reply line, waiting at most until ``deadline``."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise subprocess.TimeoutExpired("command server", 0)
            chunk = os.read(self._replies, 4096)
            if not chunk:
                self.pid = None
                raise RuntimeError("the command server has ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        if self.pid is not None:
            os.close(self._requests)  # the server ends on end of file
            os.waitpid(self.pid, 0)
            self.pid = None


def _serve(requests: int, replies: int) -> None:
    """The server: import what the commands import, then fork one child per request line and
    write back the child's pid, then its exit code (negative: the signal that ended it)."""
    try:
        atexit._clear()  # the test process's exit handlers are not the server's
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the tests; EOF ends the server
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        quiet = os.open(os.devnull, os.O_WRONLY)  # fairseq's import-time notes: not the tests' output
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        # output to the file descriptors, which each child points at its own files
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        import importlib.metadata

        # fairseq and the libraries its commands import; not the commands' modules (their import
        # sets up logging, as each command's own does) and not the plugin (a command imports it
        # as a new process would: from --user-dir, or as its own package)
        for module in FAIRSEQ_LIBRARIES:
            importlib.import_module(module)
        scripts = {entry.name: entry for entry in importlib.metadata.entry_points(group="console_scripts")}
        for name, target in project_scripts().items():  # the checkout's, as setup.py declares them
            scripts[name] = importlib.metadata.EntryPoint(name, target, "console_scripts")
        # a console script's module search path: its own folder, then the interpreter's (not the
        # folders pytest put first)
        fresh = subprocess.run(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
            capture_output=True,
            text=True,
            check=True,
        )
        search_path = [str(BIN), *json.loads(fresh.stdout)]
        pending = b""
        while True:
            chunk = os.read(requests, 65536)
            if not chunk:
                os._exit(0)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                child = os.fork()
                if child == 0:
                    os.close(requests)
                    os.close(replies)
                    sys.path[:] = search_path
                    _run_command(request, scripts.get(request["name"]))
                os.write(replies, f"{child}\n".encode())
                _, status = os.waitpid(child, 0)
                os.write(replies, f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(1)


def _run_command(request: dict, entry) -> None:
    """A forked child: the console script ``entry`` as a new process would run it."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        warnings.resetwarnings()
        if os.environ.get("PYTHONWARNINGS") == "ignore":
            warnings.simplefilter("ignore")
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            os.dup2(opened, fd)
            os.close(opened)
        if entry is None:
            print(f"{request['name']}: not an installed console script", file=sys.stderr)
            os._exit(127)
        sys.argv = [str(BIN / request["name"]), *request["argv"]]
        code = _exit_code(entry.load()())
    except SystemExit as exit:
        code = _exit_code(exit.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # the plugin's one-line errors, or a traceback
    try:
        atexit._run_exitfuncs()
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _exit_code(value) -> int:
    """The exit status Python gives ``sys.exit(value)``."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1
