"""Speed and memory of every preset against fairseq's own ``lstm`` of the same size.

    python examples/benchmark.py [--updates 300] [--repeats 3] [--arch gru_content gru_onestep ...]
        [--epoch inv_recopy gru_monoattn]
    python examples/benchmark.py --skip-training --decode-sentences 8 --arch gru_content gru_onestep

Run it from the repository root: Copy data is prepared under ``runs/benchmark`` (``--data``).
The code is ``fairseq_monoattn.benchmarking``.
"""

from fairseq_monoattn.benchmarking import main

if __name__ == "__main__":
    main()
