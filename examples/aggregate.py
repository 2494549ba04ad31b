"""The paper's tables from run records, with the paper's values beside ours.

    python examples/aggregate.py results/paper
    python examples/aggregate.py results/paper --update RESULTS.md --plots docs/figures

Installed as ``fairseq-monoattn-aggregate``; the code is ``fairseq_monoattn.experiments.aggregate``.
"""
from fairseq_monoattn.cli import aggregate_main

if __name__ == "__main__":
    aggregate_main()
