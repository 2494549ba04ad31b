"""fairseq-monoattn-lookup-tables: generate a new set of lookup tables and their splits."""

import sys

from ..data.lookup import main

if __name__ == "__main__":
    sys.exit(main())
