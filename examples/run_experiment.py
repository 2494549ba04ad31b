"""Train presets on one task with the paper's recipe, score every test split, record, tabulate.

    python examples/run_experiment.py recopy --arch gru_onestep gru_relative --seeds 1 2 3 --max-epoch 25
    python examples/run_experiment.py scan --arch gru_mix_onestep --variant lr5e-4 -- --lr 5e-4

Installed as ``fairseq-monoattn-run``; the code is ``fairseq_monoattn.experiments``.
"""
from fairseq_monoattn.cli import run_main

if __name__ == "__main__":
    run_main()
