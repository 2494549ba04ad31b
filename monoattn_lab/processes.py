"""Child processes of the lab: ones that do not outlive their parent, and the one fork server.

A run's worker stops when its launcher dies (killed, even with SIGKILL), and fairseq-train stops
when its worker dies, so stopping a sweep never leaves trainings running on; an interrupted run
resumes from its last checkpoint.

:class:`CommandServer` runs console scripts without paying Python's and fairseq's start-up
(3-5 CPU-seconds) for each: a process forked from one that has imported what the commands import
and done no tensor work yet (a process forked after torch has started its OpenMP threads hangs in
its first parallel operation) forks one child per command, which runs the script's own entry
point as a new process would: its arguments, folder, environment and a console script's module
search path, its output in files, its exit code as the script's.  The local worker trains its run
through one (fairseq-train without importing torch and fairseq a second time); the tests start
their commands through one (tests/forked_commands.py).
"""

import atexit
import ctypes
import importlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_NAME = 15  # linux/prctl.h: the name ps and top show


_PRCTL = None
# this process's ends of the pipes of the command servers it created and has not closed: a server
# forked later closes its copies, else an earlier server would never see the end of its requests
_CREATOR_ENDS: set = set()


def _prctl():
    """The C library's prctl (Linux), looked up once."""
    global _PRCTL
    if _PRCTL is None:
        _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
    return _PRCTL


def die_with_parent() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` for subprocess that makes the child get SIGTERM when this process ends
    (Linux; elsewhere None, and children behave as the platform makes them)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    # looked up here, in the parent: the child of a fork in a process with threads (the launcher's
    # pool) must not open a library, whose loader lock another thread may have held at the fork
    prctl = _prctl()

    def set_death_signal():
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent ended before the death signal was set
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal


# what fairseq-train imports that takes its start-up time (torch, fairseq's tasks, models, criterions,
# and torch's compiler, which a torch optimizer imports when it is built)
FAIRSEQ_TRAIN_MODULES = (
    "fairseq.options",
    "fairseq.tasks",
    "fairseq.models",
    "fairseq.criterions",
    "fairseq.trainer",
    "fairseq.checkpoint_utils",
    "torch._dynamo",
)
FAIRSEQ_TRAIN = {"fairseq-train": "fairseq_cli.train:cli_main"}  # fairseq's console script and its entry point


def preload_fairseq_train() -> None:
    """Import what fairseq-train imports, without the logging set-up of its script."""
    for name in FAIRSEQ_TRAIN_MODULES:
        importlib.import_module(name)


def console_scripts() -> Dict[str, str]:
    """{name: "module:function"} of this environment's installed console scripts."""
    import importlib.metadata

    return {entry.name: entry.value for entry in importlib.metadata.entry_points(group="console_scripts")}


class CommandServer:
    """The creator's end of a fork server: commands go down one pipe, each child's pid and then
    its exit code come up another.  The server runs one command at a time, ends when the pipe is
    closed (:meth:`close`) and, on Linux, with its creator (its children with it).

    ``scripts``: {console script name: "module:function"}, the commands it runs, found by the
    name of a command's program (its first word's last part).  ``imports``: modules the server
    imports after the fork (its creator stays without them); ``quiet``: the server's own output
    (import-time notes) goes nowhere (a command's goes to its files either way)."""

    def __init__(self, scripts: Mapping[str, str], imports: Sequence[str] = (), quiet: bool = False):
        self.scripts = dict(scripts)
        request_read, self._requests = os.pipe()
        self._replies, reply_write = os.pipe()
        set_death_signal = die_with_parent()  # made here: it names this process as the parent
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid: Optional[int] = os.fork()
        if self.pid == 0:  # the server: never returns
            for end in (self._requests, self._replies, *_CREATOR_ENDS):  # its own, and earlier servers'
                os.close(end)
            _CREATOR_ENDS.clear()
            _serve(request_read, reply_write, self.scripts, imports, quiet, set_death_signal)
        os.close(request_read)
        os.close(reply_write)
        _CREATOR_ENDS.update((self._requests, self._replies))
        self._buffer = b""
        self._running: Optional[ForkedProcess] = None

    def alive(self) -> bool:
        return self.pid is not None

    def serves(self, command: Sequence[str]) -> bool:
        return self.alive() and bool(command) and Path(command[0]).name in self.scripts

    def start(
        self,
        command: Sequence[str],
        stdout: str,
        stderr: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        append: bool = False,
    ) -> "ForkedProcess":
        """Run ``command`` (its program a console script this server serves) in a child: its
        output into the file ``stdout`` (``stderr`` into its own file, or the same one; ``append``:
        after what the files hold), in folder ``cwd`` with environment ``env`` (default: the
        creator's now).  Returns at once; the child's end comes with :meth:`ForkedProcess.wait`."""
        if not self.serves(command):
            raise ValueError(f"this command server does not run {list(command[:1])} (not a script it serves, or ended)")
        if self._running is not None and self._running.returncode is None:
            raise RuntimeError(f"the command server is still running {self._running.pid}: one command at a time")
        request = {
            "argv": [str(word) for word in command],
            "stdout": str(stdout),
            "stderr": str(stderr if stderr is not None else stdout),
            "cwd": str(cwd or os.getcwd()),
            "env": dict(os.environ if env is None else env),
            "append": append,
        }
        os.write(self._requests, json.dumps(request).encode() + b"\n")
        self._running = ForkedProcess(self, int(self._line(time.monotonic() + 60)))
        return self._running

    def _line(self, deadline: Optional[float]) -> str:
        """The server's next reply line, waiting at most until ``deadline`` (None: no limit)."""
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and (left <= 0 or not select.select([self._replies], [], [], left)[0]):
                raise subprocess.TimeoutExpired("command server", 0)
            chunk = os.read(self._replies, 4096)
            if not chunk:
                self.pid = None
                raise RuntimeError("the command server has ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        """End the server: at once where no command runs, else once the running one has ended
        (or with this process)."""
        if self.pid is not None:
            os.close(self._requests)  # the server ends on end of file
            _CREATOR_ENDS.discard(self._requests)
            if self._running is None or self._running.returncode is not None:
                os.waitpid(self.pid, 0)
                os.close(self._replies)  # else kept for the running command's exit code
                _CREATOR_ENDS.discard(self._replies)
            self.pid = None


class ForkedProcess:
    """The part of ``subprocess.Popen`` a forked command is used by: its pid, ``wait(timeout)``,
    ``kill()``, the exit code (negative: the signal that ended it)."""

    def __init__(self, server: CommandServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: Optional[int] = None

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            try:
                line = self.server._line(None if timeout is None else time.monotonic() + timeout)
            except subprocess.TimeoutExpired:
                raise subprocess.TimeoutExpired(f"forked command {self.pid}", timeout) from None
            self.returncode = int(line)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _serve(requests: int, replies: int, scripts, imports, quiet, set_death_signal) -> None:
    """The server: import ``imports``, then fork one child per request line and write back the
    child's pid, then its exit code."""
    try:
        if set_death_signal is not None:
            set_death_signal()
        atexit._clear()  # the creator's exit handlers are not the server's
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the creator and the command; EOF ends this
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        if quiet:
            nowhere = os.open(os.devnull, os.O_WRONLY)
            os.dup2(nowhere, 1)
            os.dup2(nowhere, 2)
        # output to the file descriptors, which each child points at its own files
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        for module in imports:
            importlib.import_module(module)
        # a console script's module search path after its own folder: the interpreter's, as a new
        # process has it (not the folders a caller such as pytest put first)
        fresh = subprocess.run(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
            capture_output=True,
            text=True,
            check=True,
        )
        search_path = json.loads(fresh.stdout)
        pending = b""
        while True:
            chunk = os.read(requests, 65536)
            if not chunk:
                os._exit(0)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                child_death_signal = die_with_parent()
                child = os.fork()
                if child == 0:
                    os.close(requests)
                    os.close(replies)
                    entry = scripts[Path(request["argv"][0]).name]
                    _run_command(request, entry, [str(Path(request["argv"][0]).parent), *search_path],
                                 child_death_signal)  # fmt: skip
                os.write(replies, f"{child}\n".encode())
                _, status = os.waitpid(child, 0)
                os.write(replies, f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(1)


def _run_command(request: dict, entry: str, search_path: List[str], set_death_signal) -> None:
    """A forked child: the console script whose entry point is ``entry`` ("module:function"), as a
    new process would run it."""
    code = 1
    try:
        if set_death_signal is not None:
            set_death_signal()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if sys.platform.startswith("linux"):
            _prctl()(PR_SET_NAME, Path(request["argv"][0]).name.encode()[:15])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        warnings.resetwarnings()
        if os.environ.get("PYTHONWARNINGS") == "ignore":
            warnings.simplefilter("ignore")
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if request["append"] else os.O_TRUNC)
        files = {request["stdout"]: [1], request["stderr"]: [2]} if request["stderr"] != request["stdout"] else {}
        for path, fds in (files or {request["stdout"]: [1, 2]}).items():  # one file: one descriptor for both
            opened = os.open(path, flags, 0o666)
            for fd in fds:
                os.dup2(opened, fd)
            os.close(opened)
        sys.path[:] = search_path
        sys.argv = list(request["argv"])
        module, _, function = entry.partition(":")
        code = _exit_code(getattr(importlib.import_module(module), function)())
    except SystemExit as exit:
        code = _exit_code(exit.code)
    except KeyboardInterrupt:  # Ctrl-C: the caller says so (a run resumes from its last checkpoint)
        code = 130
    except BaseException:
        sys.excepthook(*sys.exc_info())  # the plugin's one-line errors, or a traceback
    try:
        atexit._run_exitfuncs()
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
