"""fairseq-monoattn-plot-attention: draw a trained model's cross-attention for one input as a
PNG heat map (rows: output tokens; columns: START, source tokens, </s>, END); several
checkpoints give a grid on one colour scale.

    fairseq-monoattn-plot-attention --checkpoint CK.pt --data DIR/bin --source "4 7 9 8" --out attention.png
    fairseq-monoattn-plot-attention --checkpoint A.pt B.pt --labels OneStep Content --data DIR/bin \\
        --source "4 7 9 8" --out grid.png

Each model decodes the source greedily (beam 1) unless --target forces an output.  An existing
--out is never replaced without --force."""

import sys
from pathlib import Path
from typing import List, Optional

from .common import Parser, add_user_dir


def build_parser() -> Parser:
    parser = Parser(prog="fairseq-monoattn-plot-attention", description=__doc__)
    parser.add_argument(
        "--checkpoint",
        nargs="+",
        required=True,
        type=Path,
        metavar="FILE",
        help="one checkpoint, or several for a grid (one panel each)",
    )
    parser.add_argument(
        "--data",
        nargs="+",
        required=True,
        type=Path,
        metavar="DIR",
        help="binarized data folder (DIR/bin) with the dictionaries; one, or one per checkpoint",
    )
    parser.add_argument("--source", required=True, help='source tokens, space-separated, e.g. "4 7 9 8"')
    parser.add_argument("--target", help="force this output instead of the greedy hypothesis")
    parser.add_argument("--labels", nargs="+", help="panel titles, one per checkpoint (default: architecture)")
    parser.add_argument("--title", help="figure title")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE", help="PNG file to write")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.add_argument(
        "--max-len-a", type=float, default=5.0, help="greedy output length limit a*(n+1)+b, n source tokens"
    )
    parser.add_argument("--max-len-b", type=int, default=10, help="see --max-len-a")
    add_user_dir(parser)
    return parser


def check_args(parser: Parser, args) -> None:
    """What argparse cannot check alone: counts that must agree, paths that must (not) exist."""
    count = len(args.checkpoint)
    if args.labels is not None and len(args.labels) != count:
        parser.error(f"--labels: {len(args.labels)} given for {count} checkpoint(s)")
    if len(args.data) not in (1, count):
        parser.error(f"--data: give one folder or one per checkpoint ({count}), not {len(args.data)}")
    if args.out.suffix.lower() != ".png":
        parser.error(f"--out must end in .png: {args.out}")
    if args.out.exists() and not args.force:
        parser.error(f"--out exists, not overwriting it (pass --force): {args.out}")
    for path in args.checkpoint:
        if not path.is_file():
            parser.error(f"checkpoint not found: {path}")
    for path in args.data:
        if not path.is_dir():
            parser.error(f"data folder not found: {path} (pass the binarized folder, e.g. DIR/bin)")


def plot(argv: Optional[List[str]] = None):
    """The command's work; returns the AttentionMap of each checkpoint (for tests and scripts)."""
    parser = build_parser()  # first: it quiets fairseq's logging before fairseq is imported
    args = parser.parse_args(argv)
    check_args(parser, args)
    from ..attention_maps import AttentionMapError, attention_map, load_checkpoint
    from ..attention_plots import render
    from ..fairseq_compat import apply_fixes

    apply_fixes()  # the plugin's fixes to fairseq, as its task applies them
    folders = args.data * len(args.checkpoint) if len(args.data) == 1 else args.data
    results = []
    try:
        for checkpoint, data in zip(args.checkpoint, folders):
            loaded = load_checkpoint(checkpoint, data, args.user_dir)
            results.append(attention_map(loaded, args.source, args.target, args.max_len_a, args.max_len_b))
    except AttentionMapError as error:
        parser.error(str(error))
    labels = args.labels or [None] * len(results)
    render(results, labels, args.out, args.title)
    for result, label in zip(results, labels):
        kind = "target" if result.forced else "greedy"
        print(f"{label or result.architecture}: {kind} output: {result.hypothesis}")
    print(f"wrote {args.out}")
    return results


def main(argv: Optional[List[str]] = None) -> int:
    plot(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
