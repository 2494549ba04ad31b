"""Speed and memory of every preset against fairseq's own models of the same size.

    python examples/benchmark.py [--updates 300] [--repeats 3] [--arch gru_content gru_onestep ...]
        [--epoch inv_recopy gru_monoattn]
    python examples/benchmark.py --skip-training --decode-sentences 8 --arch gru_content gru_onestep
    python examples/benchmark.py --skip-training --skip-decoding --release /path/to/MonotonicLocationAttention \\
        --release-python /path/to/release-venv/bin/python

Run it from the repository root: data is prepared under ``runs/benchmark`` (``--data``).  The code
is ``monoattn_lab.benchmarking``.  With ``--release``, the authors' release (a checkout, run by
``examples/release_equivalence/run_release.py`` in its own interpreter) and the plugin each train
three epochs of OneStep and MonoAttn on the same Inv ReCopy data, the plugin with the paper's recipe
(greedy validation), the release with its own (teacher-forced validation), one thread each, in
``--release-repeats`` pairs of runs (3); an epoch is timed from its start to the next one's,
validation and checkpoints included, and epochs 2 and 3 of a run are averaged.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from monoattn_lab.benchmarking import epoch_seconds, later_epochs, main
from monoattn_lab.release import check_release_checkout

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
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise SystemExit(f"the release's {model} run failed ({' '.join(command)}), exit {done.returncode}:\n{tail}")
        (path,) = Path(work, "results").glob("*/*/seed0.json")
        record = json.loads(path.read_text())
        return [{"epoch": e, "validation": v} for e, v in zip(record["epoch_seconds"], record["validation_seconds"])]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False, usage="the comparison with the authors' release:")
    parser.add_argument("--release", type=Path, default=None, help="a checkout of the authors' release")
    parser.add_argument("--release-python", default=sys.executable, help="the interpreter that runs the release")
    parser.add_argument("--release-repeats", type=int, default=3, help="pairs of runs (plugin, release) a model")
    parser.add_argument("--data", type=Path, default=Path("runs") / "benchmark", help=argparse.SUPPRESS)
    extra, rest = parser.parse_known_args()
    if {"-h", "--help"} & set(rest):
        parser.print_help()
        print()
    if extra.release_repeats < 1:
        raise SystemExit(f"--release-repeats must be at least 1, not {extra.release_repeats}")
    if extra.release is not None:
        try:  # before the plugin's measurements, which take minutes
            extra.release = check_release_checkout(extra.release)
        except ValueError as error:
            raise SystemExit(f"benchmark.py: {error}") from None
    main(rest + ["--data", str(extra.data)])
    if extra.release is not None:
        # each pair: the plugin's run, then the release's, one process at a time, 3 epochs each;
        # an epoch figure is the mean of epochs 2 and 3, the ratio the median over the pairs
        print(f"\nepochs 2-3 of each run, {extra.release_repeats} pairs of runs a model (medians; the ratio's range)")
        print("| model | plugin: epoch, s | of which validating | the release: epoch, s | of which validating "
              "| plugin / release | (range over the pairs) |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for release_model, arch in MODELS:
            pairs = []
            for _ in range(extra.release_repeats):
                ours = later_epochs(epoch_seconds("inv_recopy", arch, extra.data, epochs=3))
                release_run = release_epoch_seconds(extra.release, extra.release_python, release_model, epochs=3)
                theirs = later_epochs(release_run)
                pairs.append((ours, theirs, ours["epoch"] / theirs["epoch"]))
                print(f"  {arch}: plugin {ours['epoch']:.2f} s, release {theirs['epoch']:.2f} s, "
                      f"{pairs[-1][2]:.3f}", flush=True)  # fmt: skip
            ratios = [pair[2] for pair in pairs]
            keys = ("epoch", "validation")
            ours, theirs = ({k: statistics.median(pair[side][k] for pair in pairs) for k in keys} for side in (0, 1))
            print(f"| {arch} | {ours['epoch']:.2f} | {ours['validation']:.2f} | {theirs['epoch']:.2f} | "
                  f"{theirs['validation']:.2f} | {statistics.median(ratios):.3f} | "
                  f"{min(ratios):.3f}-{max(ratios):.3f} |", flush=True)  # fmt: skip
