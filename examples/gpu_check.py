"""The GPU check's Python half: the device tests on the GPU, then the training figures.

1. ``--tests FILE``: runs the tests that take a device (``tests/test_devices.py``) on the device
   of this run, the ones whose id names it (``-k cuda``: each preset in float32, bfloat16 and
   float16 there), and writes their summary to FILE.  Selecting no test is an error: on a GPU that
   means torch saw none when the tests were collected, and the check stops there.
2. Words per second of fairseq-train for three presets and for fairseq's own model of the same
   size (``lstm`` for the GRU presets, ``transformer`` for the Transformer's), each run as its own
   fairseq-train process on Copy (prepared on first use), in the order preset, reference, so the
   ratio compares two runs on the same machine minutes apart; written to ``--out``.

    python examples/gpu_check.py --tests work/gpu_check/tests.txt --out work/gpu_check/training.tsv

fairseq-train trains on the GPU where torch sees one; without one this refuses to run unless
``--cpu`` is given (which the tests use, with few updates, to check the figures are made).  The
exit status is 1 when a device test failed or did not finish (the figures are still made).
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

# torch and the benchmark (which imports fairseq) are imported where they are used: a usage error,
# a --cpu run's options and the device tests' verdict need neither (seconds of imports for nothing)

PRESETS = ("gru_onestep", "gru_mix_monoattn", "transformer_monoattn_recency")
REPO = Path(__file__).resolve().parents[1]
DEVICE_TESTS = REPO / "tests" / "test_devices.py"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the tab-separated figures to write")
    parser.add_argument("--work", type=Path, default=Path("work/gpu_check"), help="where the Copy data is prepared")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), help="the presets to time")
    parser.add_argument("--updates", type=int, default=300, help="updates a run (default 300)")
    parser.add_argument("--interval", type=int, default=50, help="updates between logged figures (default 50)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (where torch sees no GPU)")
    parser.add_argument("--tests", type=Path, help="first run the device tests on this run's device; their summary")
    parser.add_argument(
        "--select",
        help="the device tests to run, a pytest -k expression (default: the run's device, cuda or cpu)",
    )
    parser.add_argument("--tests-timeout", type=float, default=220.0, help="seconds the tests may take (default 220)")
    args = parser.parse_args(argv)
    if args.updates < 2 * args.interval:
        parser.error(f"--updates {args.updates}: at least twice --interval ({args.interval}), to time two intervals")
    if not args.cpu and not cuda_available():
        parser.error("torch sees no CUDA device here; pass --cpu to time on the CPU")
    if args.select is not None and args.tests is None:
        parser.error("--select chooses among the device tests: it needs --tests")
    return args


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def run_device_tests(summary: Path, select: str, timeout: float) -> bool:
    """Run the device tests that ``select`` (pytest -k) picks; write pytest's summary lines and one
    line of counts to ``summary``; whether they all passed (not when stopped after ``timeout``
    seconds).  None selected raises SystemExit: the run would check nothing."""
    # pytest with fairseq imported before it: the suite's command server (tests/forked_commands.py),
    # a process that imports fairseq again for the commands tests start, then stays unstarted; the
    # device tests start no command
    runner = "import sys, fairseq, pytest; sys.exit(pytest.main(sys.argv[1:]))"
    command = [sys.executable, "-c", runner, "-q", "-p", "no:cacheprovider", "-rfE", "-k", select, str(DEVICE_TESTS)]
    summary.parent.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        verdict = f"device tests ({select}): stopped after {timeout:.0f} s, unfinished"
        summary.write_text(verdict + "\n")
        print(verdict)
        return False
    lines = done.stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed)", last)}
    passed, failed = counts.get("passed", 0), counts.get("failed", 0)
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    verdict = f"device tests ({select}): {passed} passed, {failed} failed"
    summary.write_text("\n".join([verdict, *failures, last]) + "\n")
    if passed + failed == 0:
        raise SystemExit(f"gpu_check: no device test ran for -k {select} (pytest exit {done.returncode}: {last})")
    print(verdict)
    return done.returncode == 0


def main(argv=None) -> int:
    args = parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    tests_passed = run_device_tests(args.tests, args.select or device, args.tests_timeout) if args.tests else True
    from monoattn_lab.benchmarking import PLUGIN_TASK, ensure_copy_data, reference_args, train_once

    data = ensure_copy_data(args.work)
    device_args = ["--cpu"] if args.cpu else []
    rows = ["preset\twps\treference\treference wps\tratio"]
    for preset in args.presets:
        # both in the plugin's task: the same batches and the same fairseq around the preset and its reference
        model_wps, _ = train_once(data, ["--arch", preset, *PLUGIN_TASK, *device_args], args.updates, args.interval)
        reference = reference_args(preset)
        reference_wps, _ = train_once(data, [*reference, *PLUGIN_TASK, *device_args], args.updates, args.interval)
        rows.append(f"{preset}\t{model_wps:.0f}\t{reference[1]}\t{reference_wps:.0f}\t{model_wps / reference_wps:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0 if tests_passed else 1


if __name__ == "__main__":
    sys.exit(main())
