"""Run, resume or inspect a named sweep of the paper's experiments (table2, table3-scan,
table5, table6, smoke).

    python examples/sweep.py run table2 --jobs 2 --commit
    python examples/sweep.py status table2

Installed as ``fairseq-monoattn-sweep``; the code is ``fairseq_monoattn.experiments.sweeps``.
"""
from fairseq_monoattn.cli import sweep_main

if __name__ == "__main__":
    sweep_main()
