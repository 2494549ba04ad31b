"""One run in its own process (what the local launcher starts):

python -m monoattn_lab.worker SPEC_JSON WORK RESULTS

A run whose folder another process holds now (a second sweep over the same work folder) is skipped
at once.  Otherwise, before anything else, the worker imports what fairseq-train needs and forks
the command server that will start its training (:class:`~.processes.CommandServer`), so the run's
training starts without importing torch and fairseq a second time.
"""

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


def main(argv=None) -> int:
    spec_json, work, results = argv if argv is not None else sys.argv[1:]
    spec = spec_from_json(spec_json)
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
