"""fairseq-monoattn-user-dir: print the installed plugin's folder, for fairseq's --user-dir
from any folder:

    fairseq-train DATA --user-dir "$(fairseq-monoattn-user-dir)" --arch gru_onestep ...
"""

import sys
from pathlib import Path


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv:
        print(f"fairseq-monoattn-user-dir: error: takes no arguments, got {' '.join(argv)}", file=sys.stderr)
        return 2
    print(Path(__file__).resolve().parents[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
