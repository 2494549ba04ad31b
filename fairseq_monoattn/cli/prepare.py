"""fairseq-monoattn-prepare: write one task's data (raw text, fairseq binaries, a manifest).
Exit status 0 on success, 2 on bad input or options (one line on stderr).  Starts without
importing fairseq (it is needed only to binarize)."""

import logging
import sys
from typing import List, Optional

from ..catalog import DEFAULT_DATA_SEED, TASKS
from .common import Parser


def build_parser() -> Parser:
    task_lines = "\n".join(f"  {name:<19} {task.description}" for name, task in TASKS.items())
    parser = Parser(
        prog="fairseq-monoattn-prepare",
        description="Write DIR/raw/, the fairseq-binarized DIR/bin/ and DIR/manifest.json for one task.",
        epilog="tasks:\n" + task_lines,
    )
    parser.add_argument("task", metavar="TASK", help="one of the tasks listed below")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_DATA_SEED, help="random seed (the same default for every task)"
    )
    parser.add_argument(
        "--data-dir", default=None, metavar="PATH", help="input data for file-based tasks (default: the task's own)"
    )
    parser.add_argument(
        "--joined-dictionary",
        action="store_true",
        help="one dictionary for source and target (for --share-all-embeddings)",
    )
    parser.add_argument(
        "--test-lengths",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="also write test splits testN of exactly N digits (generated tasks), e.g. 500 1000",
    )
    parser.add_argument(
        "--test-size", type=int, default=500, metavar="N", help="examples in each split of --test-lengths"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an existing non-empty DIR (after the new data is written)"
    )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.task not in TASKS:
        parser.error(f"unknown task {args.task!r}; valid tasks: {', '.join(TASKS)}")
    # fairseq configures INFO logging on import (and says tensorboardX is missing): keep quiet
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    from ..data.common import DataError
    from ..data.prepare import prepare, summary

    try:
        manifest = prepare(
            args.task,
            args.out,
            args.seed,
            args.data_dir,
            args.force,
            args.joined_dictionary,
            test_lengths=args.test_lengths,
            test_size=args.test_size,
        )
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary(manifest, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
