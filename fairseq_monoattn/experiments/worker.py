"""One run in its own process (what the local launcher starts):

python -m fairseq_monoattn.experiments.worker SPEC_JSON WORK RESULTS
"""

import sys
from pathlib import Path

from .launch import spec_from_json
from .runs import BUSY_EXIT, RunBusy, RunError, run


def main(argv=None) -> int:
    spec_json, work, results = argv if argv is not None else sys.argv[1:]
    try:
        run(spec_from_json(spec_json), Path(work), Path(results), log=lambda line: print(line, flush=True))
    except RunBusy as busy:
        print(f"skipped: {busy}", file=sys.stderr)
        return BUSY_EXIT
    except RunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
