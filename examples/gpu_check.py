"""The GPU check's training figures: words per second of fairseq-train for three presets and for
fairseq's own model of the same size (``lstm`` for the GRU presets, ``transformer`` for the
Transformer's), each run as its own fairseq-train process on Copy (prepared on first use), in the
order preset, reference, so the ratio compares two runs on the same machine minutes apart.

    python examples/gpu_check.py --out work/gpu_check/training.tsv

fairseq-train trains on the GPU where torch sees one; without one this refuses to run unless
``--cpu`` is given (which the tests use, with few updates, to check the figures are made).
"""

import argparse
import sys
from pathlib import Path

import torch

from monoattn_lab.benchmarking import ensure_copy_data, reference_args, train_once

PRESETS = ("gru_onestep", "gru_mix_monoattn", "transformer_monoattn_recency")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the tab-separated figures to write")
    parser.add_argument("--work", type=Path, default=Path("work/gpu_check"), help="where the Copy data is prepared")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), help="the presets to time")
    parser.add_argument("--updates", type=int, default=300, help="updates a run (default 300)")
    parser.add_argument("--interval", type=int, default=50, help="updates between logged figures (default 50)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (where torch sees no GPU)")
    args = parser.parse_args(argv)
    if args.updates < 2 * args.interval:
        parser.error(f"--updates {args.updates}: at least twice --interval ({args.interval}), to time two intervals")
    if not args.cpu and not torch.cuda.is_available():
        parser.error("torch sees no CUDA device here; pass --cpu to time on the CPU")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    data = ensure_copy_data(args.work)
    device = ["--cpu"] if args.cpu else []
    rows = ["preset\twps\treference\treference wps\tratio"]
    for preset in args.presets:
        model_wps, _ = train_once(data, ["--arch", preset, *device], args.updates, args.interval)
        reference = reference_args(preset)
        reference_wps, _ = train_once(data, [*reference, *device], args.updates, args.interval)
        rows.append(f"{preset}\t{model_wps:.0f}\t{reference[1]}\t{reference_wps:.0f}\t{model_wps / reference_wps:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
