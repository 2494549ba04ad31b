"""fairseq-monoattn-score: greedy exact-match accuracy, edit distance, direction gate and
attention peak of a checkpoint on whole test splits, every example counted."""

import sys
from pathlib import Path
from typing import List, Optional

from ..limits import SCORING_BATCH_SIZE
from .common import Parser, add_user_dir


def build_parser() -> Parser:
    parser = Parser(prog="fairseq-monoattn-score", description=__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True, metavar="FILE", help="a fairseq checkpoint")
    parser.add_argument(
        "--data",
        type=Path,
        required=True,
        metavar="DIR",
        help="the fairseq-binarized data folder (DIR/bin of fairseq-monoattn-prepare)",
    )
    parser.add_argument(
        "--splits", nargs="+", required=True, metavar="SPLIT", help="splits to score, e.g. test15 test30 test100"
    )
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="JSON file to write")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=SCORING_BATCH_SIZE,
        metavar="N",
        help="examples decoded at once (no score depends on it)",
    )
    parser.add_argument(
        "--max-output-len",
        type=int,
        default=None,
        metavar="N",
        help="output length limit (default: 2 x the split's longest target + 10)",
    )
    parser.add_argument(
        "--precision",
        choices=("float64", "float32"),
        default="float64",
        help="the model's float type while decoding: float64 makes every output independent of the "
        "batch it is decoded in; float32 decodes as the model trains",
    )
    parser.add_argument("--predictions", action="store_true", help="also write OUT's stem + .<split>.txt hypotheses")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    add_user_dir(parser)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f"--batch-size must be positive, got {args.batch_size}")
    from ..fairseq_compat import apply_fixes
    from ..scoring import CheckpointError, check_score_inputs, score, table

    apply_fixes()  # the plugin's fixes to fairseq, as its task applies them
    try:
        check_score_inputs(args.checkpoint, args.data, args.splits, args.out, args.force, args.user_dir)
        results = score(
            args.checkpoint,
            args.data,
            args.splits,
            args.out,
            args.batch_size,
            args.max_output_len,
            args.predictions,
            args.force,
            user_dir=args.user_dir,
            precision=args.precision,
        )
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if error.usage else 1
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
