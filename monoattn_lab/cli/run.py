"""fairseq-monoattn-run: train presets on a task with the paper's recipe (preparing the data if
needed), score every test split of each best checkpoint, record each run, print the tables.
A run with a record is skipped; an interrupted run resumes from its last checkpoint."""

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
    parser = Parser(prog="fairseq-monoattn-run", description=__doc__)
    parser.add_argument("task", help="a task (fairseq-monoattn-prepare --help lists them)")
    add_arch(parser)
    add_variants(parser, several=False)
    add_run_options(parser)
    return parser


@interruptible
def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..spec import DEFAULT_VARIANT, RunSpec

    variants = variants_from(parser, [args.variant] if args.variant else []) or {DEFAULT_VARIANT: ()}
    check_run_inputs(parser, args.task, args.arch, variants, args.user_dir)
    name, options = next(iter(variants.items()))
    from ..aggregate import render
    from ..launch import run_local, summarize_outcome
    from ..records import read_records

    user_dir = str(args.user_dir.resolve()) if args.user_dir else None
    specs = [
        RunSpec(
            task=args.task,
            arch=arch,
            seed=seed,
            data_seed=args.data_seed,
            variant=name,
            options=options,
            max_epoch=args.max_epoch,
            stop_after_perfect=args.stop_after_perfect,
            user_dir=user_dir,
        )
        for arch in args.arch
        for seed in args.seeds
    ]
    outcome = run_local(
        specs, args.work, args.results, jobs=args.jobs, nice=args.nice, log=lambda line: print(line, flush=True)
    )
    status = summarize_outcome(outcome, log=print)
    if status == INTERRUPTED_EXIT:
        return status
    records, _ = read_records(args.results)
    keys = {(s.task, s.arch, s.variant, s.seed) for s in specs}
    mine = [r for r in records if (r["task"], r["arch"], r["variant"], r["seed"]) in keys]
    if mine:
        print()
        print(render(mine, name), end="")
    return status


if __name__ == "__main__":
    sys.exit(main())
