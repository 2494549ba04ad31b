"""Prepare one task's data: raw text, fairseq binaries and a manifest.

    python preprocess/prepare.py TASK --out DIR [--seed N] [--data-dir PATH] [--force]

The same command is installed as ``fairseq-monoattn-prepare``; the code is
``fairseq_monoattn.data.prepare``.
"""
import sys

from fairseq_monoattn.data.prepare import main

if __name__ == "__main__":
    sys.exit(main())
