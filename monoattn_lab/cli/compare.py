"""fairseq-monoattn-compare: one preset under two or more variants (named sets of extra
fairseq-train options) with the same data, seeds and budget; per-seed test accuracy side by side,
then a summary per variant.  Runs with a record are not trained again."""

import sys
from typing import List, Optional

from .common import (
    INTERRUPTED_EXIT,
    Parser,
    add_arch,
    add_run_options,
    add_variants,
    check_run_inputs,
    interruptible,
    variants_from,
)


def build_parser() -> Parser:
    parser = Parser(prog="fairseq-monoattn-compare", description=__doc__)
    parser.add_argument("task", help="a task (fairseq-monoattn-prepare --help lists them)")
    add_arch(parser, several=False, help="the preset to train")
    add_variants(parser, several=True)
    add_run_options(parser)
    return parser


@interruptible
def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    variants = variants_from(parser, args.variant)
    if len(variants) < 2:
        parser.error("give at least two --variant with different names")
    check_run_inputs(parser, args.task, [args.arch], variants, args.user_dir)
    from ..compare import compare
    from ..launch import summarize_outcome

    user_dir = str(args.user_dir.resolve()) if args.user_dir else None
    table, outcome = compare(
        args.task,
        args.arch,
        args.seeds,
        variants,
        args.max_epoch,
        args.work,
        args.results,
        jobs=args.jobs,
        nice=args.nice,
        data_seed=args.data_seed,
        stop_after_perfect=args.stop_after_perfect,
        user_dir=user_dir,
        log=lambda line: print(line, flush=True),
    )
    status = summarize_outcome(outcome, log=print)
    if status == INTERRUPTED_EXIT:
        return status
    print(
        f"\n{args.task}, {args.arch}, {args.max_epoch} epochs, data seed {args.data_seed}; "
        "test accuracy % (g: mean direction gate on the first split)\n"
    )
    print(table)
    return status


if __name__ == "__main__":
    sys.exit(main())
