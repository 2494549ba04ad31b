"""Data preparation for the monotonic location attention experiments.

``fairseq-monoattn-prepare TASK --out DIR`` (or ``python preprocess/prepare.py``) writes
``DIR/raw/``, the fairseq-binarized ``DIR/bin/`` and ``DIR/manifest.json`` for one task (see
``docs/data.md``).  Task definitions live in ``digits.py``, ``chomsky.py`` (the tasks of
Delétang et al., ICLR 2023), ``lookup.py``, ``scan.py`` (with the length cutoffs of Newman et al.,
2020) and ``cfq.py``; the generated tasks share the seeded split generator of ``generated.py``;
the tasks are listed in ``fairseq_monoattn/catalog.py``; the single writer shared by every task is
``writer.py``; the data files shipped with the package (SCAN, the paper's lookup tables, with
their licences) are under ``files/``.
"""
