"""Whether a trained GRU encoder's states settle (monoattn_lab.encoder_settling): one source
repeated, the drift of the encodings from one copy to the next, and the direction gate's logit
by the number of copies.

    python examples/encoder_settling.py --checkpoint CK/checkpoint_best.pt --data DATA/bin \
        --source "3 3 3 8 1 1 1 1 1 6" --copies 8
"""

import argparse
import sys

from fairseq_monoattn.attention_maps import AttentionMapError, load_checkpoint
from monoattn_lab.encoder_settling import settling


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a checkpoint of a GRU preset")
    parser.add_argument("--data", required=True, help="the binarised data directory it was trained on")
    parser.add_argument("--source", required=True, help="one source, space-separated tokens")
    parser.add_argument("--copies", type=int, default=8, help="copies of the source (at least 2)")
    args = parser.parse_args(argv)
    if args.copies < 2:
        parser.error(f"--copies must be at least 2, got {args.copies}")
    try:
        loaded = load_checkpoint(args.checkpoint, args.data)
    except AttentionMapError as error:
        sys.exit(f"error: {error}")
    report = settling(loaded.model, loaded.task.source_dictionary, args.source, args.copies)
    print(f"{args.checkpoint}: {report.copy_length} tokens a copy, {report.copies} copies")
    print("copy k   forward drift   backward drift   gate logit (k + 1 copies)")
    for k in range(report.copies - 1):
        logit = "" if report.gate_logits is None else f"{report.gate_logits[k]:.3f}"
        print(f"{k:6d}   {report.forward_drift[k]:13.4f}   {report.backward_drift[k]:14.4f}   {logit}")
    print("settled" if report.settled() else "not settled: the encodings change from copy to copy")


if __name__ == "__main__":
    main()
