"""Prepare one task's data: raw text, fairseq binaries and a manifest.

    python preprocess/prepare.py TASK --out DIR [--seed N] [--data-dir PATH] [--test-lengths N ...] [--force]

The same command is installed as ``fairseq-monoattn-prepare``; the code is
``fairseq_monoattn.cli.prepare`` over ``fairseq_monoattn.data``.
"""

import sys

from fairseq_monoattn.cli.prepare import main

if __name__ == "__main__":
    sys.exit(main())
