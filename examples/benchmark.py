"""Speed and memory of every preset against fairseq's own models of the same size.

    python examples/benchmark.py [--updates 300] [--repeats 3] [--arch gru_content gru_onestep ...]
        [--epoch inv_recopy gru_monoattn]
    python examples/benchmark.py --skip-training --decode-sentences 8 --arch gru_content gru_onestep
    python examples/benchmark.py --skip-training --skip-decoding --release /path/to/MonotonicLocationAttention \\
        --release-python /path/to/release-venv/bin/python

Run it from the repository root: data is prepared under ``runs/benchmark`` (``--data``).  The code
is ``fairseq_monoattn.benchmarking``.  With ``--release``, the authors' release (a checkout, run by
``examples/release_equivalence/run_release.py`` in its own interpreter) and the plugin each train
two epochs of OneStep and MonoAttn on the same Inv ReCopy data, the plugin with the paper's recipe
(greedy validation), the release with its own (teacher-forced validation), one thread each; an
epoch is timed from its start to the next one's, validation and checkpoints included.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from fairseq_monoattn.benchmarking import epoch_seconds, main

RUN_RELEASE = Path(__file__).resolve().parent / "release_equivalence" / "run_release.py"
MODELS = (("BiGRU_OneStep", "gru_onestep"), ("BiGRU_MonoAttn", "gru_monoattn"))


def release_epoch_seconds(release: Path, python: str, model: str, task: str = "inv_recopy", epochs: int = 2) -> list:
    """Per epoch of the first ``epochs`` of the release's ``model`` on the plugin's ``task`` data
    (seed 1), {"epoch": seconds, "validation": seconds}: from its "Training Epoch # N" to the next,
    its validation (from "Validating Epoch # N") and checkpoints included, as ``run_release.py``
    times them inside the release's process."""
    with tempfile.TemporaryDirectory() as work:
        command = [sys.executable, str(RUN_RELEASE), "--release", str(release), "--python", python, "--task", task,
                   "--model", model, "--seeds", "0", "--epochs", str(epochs), "--data-seed", "1", "--work", work,
                   "--results", f"{work}/results"]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, text=True)
        (path,) = Path(work, "results").glob("*/*/seed0.json")
        record = json.loads(path.read_text())
        return [{"epoch": e, "validation": v} for e, v in zip(record["epoch_seconds"], record["validation_seconds"])]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--release", type=Path, default=None)
    parser.add_argument("--release-python", default=sys.executable)
    parser.add_argument("--data", type=Path, default=Path("runs") / "benchmark")
    extra, rest = parser.parse_known_args()
    main(rest + ["--data", str(extra.data)])
    if extra.release is not None:
        # the second epoch of each (the first also warms up allocators and caches), one process at a time
        print("\n| model | plugin: epoch 2, s | of which validating | the release: epoch 2, s | of which validating "
              "| plugin / release |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for release_model, arch in MODELS:
            ours = epoch_seconds("inv_recopy", arch, extra.data, epochs=2)[1]
            theirs = release_epoch_seconds(extra.release, extra.release_python, release_model, epochs=2)[1]
            print(f"| {arch} | {ours['epoch']:.1f} | {ours['validation']:.1f} | {theirs['epoch']:.1f} | "
                  f"{theirs['validation']:.1f} | {ours['epoch'] / theirs['epoch']:.2f} |", flush=True)  # fmt: skip
