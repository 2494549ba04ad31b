"""Child processes that do not outlive their parent: a run's worker stops when its launcher
dies (killed, even with SIGKILL), and fairseq-train stops when its worker dies, so stopping a
sweep never leaves trainings running on; an interrupted run resumes from its last checkpoint."""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from typing import Callable, List, Optional

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` for subprocess that makes the child get SIGTERM when this process ends
    (Linux; elsewhere None, and children behave as the platform makes them)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def set_death_signal():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent ended before the death signal was set
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal


PR_SET_NAME = 15  # linux/prctl.h: the name ps and top show
# what fairseq-train imports that takes its start-up time (torch, fairseq's tasks, models, criterions)
FAIRSEQ_TRAIN_MODULES = (
    "fairseq.options",
    "fairseq.tasks",
    "fairseq.models",
    "fairseq.criterions",
    "fairseq.trainer",
    "fairseq.checkpoint_utils",
)


class ForkedTraining:
    """fairseq-train as a child forked from a process that has imported what fairseq-train
    imports and done nothing else yet, so a run does not pay fairseq's start-up (3-5 CPU-seconds)
    twice, once for its worker and once for its training.

    The child is forked when this object is made, before the worker does any work (no tensor
    operation yet: a process forked after torch has started its OpenMP threads hangs in its first
    parallel operation), and waits on a pipe; :meth:`start` sends it the command line and the log
    file, and it runs fairseq-train's own entry point (``fairseq_cli.train.cli_main``) on them, as
    the console script would, with its output in the log file and its name ``fairseq-train``.
    It gets SIGTERM when the worker ends, as a child started with :func:`die_with_parent` does.
    One use: a second command, or another program, is not served (:meth:`serves`)."""

    def __init__(self, program: str):
        self.program = program
        read, self._pipe = os.pipe()
        set_death_signal = die_with_parent()  # made here: it names this process as the parent
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            os.close(self._pipe)
            _serve_training(read, set_death_signal)
        os.close(read)
        self.started = False

    def serves(self, command: List[str]) -> bool:
        return not self.started and bool(command) and command[0] == self.program

    def start(self, command: List[str], log_path: str) -> "ForkedProcess":
        if not self.serves(command):
            raise ValueError(f"this forked fairseq-train does not serve {command[:1]} (used, or another program)")
        message = json.dumps({"argv": list(command), "log": str(log_path)}).encode()
        os.write(self._pipe, message)  # a pipe takes 64 KiB unread: a command line is far less
        os.close(self._pipe)
        self.started = True
        return ForkedProcess(self.pid)

    def close(self) -> None:
        """Let an unused child go (it exits when the pipe closes without a command)."""
        if not self.started:
            os.close(self._pipe)
            self.started = True
            os.waitpid(self.pid, 0)


class ForkedProcess:
    """The part of ``subprocess.Popen`` a run uses: ``wait(timeout)``, the exit code (negative:
    the signal that ended it)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: Optional[int] = None

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("fairseq-train", timeout)
            else:
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return self.returncode


def _serve_training(read: int, set_death_signal: Optional[Callable[[], None]]) -> None:
    """The forked child: wait for the command, run fairseq-train on it, exit with its code."""
    code = 1
    try:
        if set_death_signal is not None:
            set_death_signal()
        chunks = []
        while True:
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(read)
        if not chunks:  # no training for this run
            os._exit(0)
        message = json.loads(b"".join(chunks))
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, b"fairseq-train")
        log = os.open(message["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.environ["PYTHONWARNINGS"] = "ignore"  # as the worker's fairseq-train command gets it
        warnings.simplefilter("ignore")
        sys.argv = message["argv"]
        from fairseq_cli.train import cli_main  # the console script's entry point

        cli_main()
        code = 0
    except KeyboardInterrupt:  # Ctrl-C: the worker says so; the run resumes from its last checkpoint
        code = 130
    except SystemExit as exit:  # argparse errors, fairseq's own exits
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        if not isinstance(exit.code, (int, type(None))):
            print(exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def preload_fairseq_train() -> None:
    """Import what fairseq-train imports, without the logging set-up of its script."""
    import importlib

    for name in FAIRSEQ_TRAIN_MODULES:
        importlib.import_module(name)
