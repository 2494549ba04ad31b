"""Data preparation for the monotonic location attention experiments.

``python preprocess/prepare.py TASK --out DIR`` writes ``DIR/raw/``, the fairseq-binarized
``DIR/bin/`` and ``DIR/manifest.json`` for one task (see ``preprocess/README.md``).
Task definitions live in ``digits.py``, ``lookup.py``, ``scan.py`` and ``cfq.py``; the
registry is ``tasks.py``; the single writer shared by every task is ``writer.py``.
"""
