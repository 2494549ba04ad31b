"""Train one preset under two (or more) option sets with the same data, seeds and budget, and
print per-seed test accuracy at 15 / 30 / 100 side by side.

    python examples/compare_options.py inv_recopy --arch gru_monoattn --seeds 1 2 3 4 5 \\
        --max-epoch 25 --option-set plugin="" --option-set release="--location-projection True" --jobs 2

Installed as ``fairseq-monoattn-compare``; the code is ``fairseq_monoattn.experiments.compare``.
"""
from fairseq_monoattn.cli import compare_main

if __name__ == "__main__":
    compare_main()
