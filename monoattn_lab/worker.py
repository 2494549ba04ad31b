"""One run in its own process (what the local launcher starts):

python -m monoattn_lab.worker SPEC_JSON WORK RESULTS [NICE]

A run whose folder another process holds now (a second sweep over the same work folder) is skipped
at once.  Otherwise, before anything else, the worker imports what fairseq-train needs and forks
the command server that will start its training (:class:`~.processes.CommandServer`), so the run's
training starts without importing torch and fairseq a second time.
"""

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from .launch import spec_from_json
from .processes import FAIRSEQ_TRAIN, CommandServer, preload_fairseq_train
from .runs import check_not_busy, run
from .spec import BUSY_EXIT, INTERRUPTED_EXIT, RunBusy, RunError


@contextmanager
def forked_training():
    """A :class:`CommandServer` of fairseq-train, where processes fork (else None)."""
    if not sys.platform.startswith("linux"):
        yield None
        return
    preload_fairseq_train()
    server = CommandServer(FAIRSEQ_TRAIN)
    try:
        yield server
    finally:
        server.close()


AUTOGROUP_SWITCH = "/proc/sys/kernel/sched_autogroup_enabled"


def lower_priority(nice: int) -> str:
    """This process (and what it starts) at nice value ``nice``, and, where Linux shares the CPU
    between sessions first (autogroup), its session's share too: the launcher starts each worker in
    a session of its own, and between sessions a process's own nice value counts for nothing.
    Returns what it set, as read back, for the worker's log."""
    nice = max(nice, os.getpriority(os.PRIO_PROCESS, 0))  # never above what it was started at
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    said = f"nice {os.getpriority(os.PRIO_PROCESS, 0)}"
    try:
        with open(AUTOGROUP_SWITCH) as switch:
            grouped = switch.read().strip() == "1"
    except OSError:  # no such scheduler setting here
        grouped = False
    if grouped and os.getsid(0) == os.getpid():  # the session's own leader: its group is this worker's
        try:
            with open("/proc/self/autogroup", "w") as group:
                group.write(str(nice))
            with open("/proc/self/autogroup") as group:
                said += f", its session's group at {group.read().split()[-1]}"
        except OSError as error:
            said += f"; its session's group could not be set ({error.strerror})"
    return said


def main(argv=None) -> int:
    spec_json, work, results, *nice = argv if argv is not None else sys.argv[1:]
    spec = spec_from_json(spec_json)
    if nice:
        print(f"priority: {lower_priority(int(nice[0]))}", flush=True)
    try:
        check_not_busy(spec, Path(work), Path(results))  # before importing fairseq for a run it would skip
        with forked_training() as forked:
            run(spec, Path(work), Path(results), log=lambda line: print(line, flush=True), forked=forked)
    except RunBusy as busy:
        print(f"skipped: {busy}", file=sys.stderr)
        return BUSY_EXIT
    except RunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a file of the run that cannot be written (a full disk) or read
        print(f"error: {spec.key}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C, or the launcher passing on its own
        print(f"interrupted: {spec.key} stopped; the same command resumes it from its last checkpoint", file=sys.stderr)
        return INTERRUPTED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
