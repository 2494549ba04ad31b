"""fairseq-monoattn-aggregate: the paper's tables from run records alone, with the paper's
values beside ours and whether each cell has the paper's verdict.  A record whose model is no
longer the one its command builds is refused (nothing is written); an unreadable record is
named, the others are tabled, and the exit status is 1."""

import os
import sys
from pathlib import Path
from typing import List, Optional

from .common import DEFAULT_RESULTS, Parser


def build_parser() -> Parser:
    parser = Parser(prog="fairseq-monoattn-aggregate", description=__doc__)
    parser.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        metavar="DIR",
        help="a results folder (RESULTS/TASK/ARCH/VARIANT/seedN.json)",
    )
    parser.add_argument(
        "--variant",
        default="default",
        metavar="NAME",
        help="which variant's records to table (the paper's tables, --release, --against)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="only the records under --results of these training seeds (None: every seed); --against pairs runs "
        "by seed, so it compares those seeds only",
    )
    parser.add_argument(
        "--update",
        type=Path,
        default=None,
        metavar="FILE",
        help="rewrite the generated part of FILE (e.g. RESULTS.md), keep the rest",
    )
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="also draw accuracy against length per task into DIR (linked from the tables; with "
        "--compare-variants, a line per model and variant)",
    )
    parser.add_argument(
        "--compare-variants",
        nargs="+",
        default=None,
        metavar="NAME",
        help="instead of the paper's tables: every cell with records of at least two of these variants, their "
        "medians side by side",
    )
    parser.add_argument(
        "--release",
        type=Path,
        default=None,
        metavar="DIR",
        help="instead of the paper's tables: the cells of the authors' release's records in DIR, paper / release / "
        "plugin side by side",
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="DIR",
        help="instead of the paper's tables: the runs of --results that the results folder DIR has too (the same "
        "task, model, variant and seed), run by run: whose verdicts changed, how many of each set have the "
        "paper's verdict, and the CPU-hours of each",
    )
    parser.add_argument(
        "--include-outdated",
        action="store_true",
        help="table records whose model is no longer the one their command builds (a preset or "
        "a default changed since they ran) instead of refusing",
    )
    return parser


def records_of_variant(parser, args, records):
    """The records of --variant; a usage error naming the variants there are when it has none."""
    chosen = [r for r in records if r["variant"] == args.variant]
    if not chosen:
        known = sorted({r["variant"] for r in records})
        parser.error(
            f"--variant {args.variant!r}: no records of it under {args.results}; there are: {', '.join(known)}"
        )
    return chosen


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"--results {args.results}: no such folder")
    from ..aggregate import render, update_file
    from ..outdated import describe_differences, outdated_records, pinning_options
    from ..records import read_records
    from ..spec import spec_from_dict

    records, problems = read_records(args.results)
    for problem in problems:
        print(f"unreadable record: {problem}", file=sys.stderr)
    if not records:
        print(
            f"error: no readable records under {args.results} (RESULTS/TASK/ARCH/VARIANT/seedN.json)", file=sys.stderr
        )
        return 1
    if args.seeds is not None:
        seeds = set(args.seeds)
        kept = [r for r in records if r["seed"] in seeds]
        if not kept:
            found = ", ".join(str(seed) for seed in sorted({r["seed"] for r in records}))
            parser.error(f"--seeds {' '.join(map(str, args.seeds))}: no records of them under {args.results}; "
                         f"there are seeds {found}")  # fmt: skip
        records = kept
    if args.release:
        from ..aggregate import read_release_records, release_table
        from ..records import RecordError

        records_of_variant(parser, args, records)
        try:
            print(release_table(records, read_release_records(args.release), args.variant))
        except RecordError as error:
            print(f"error: --release: {error}", file=sys.stderr)
            return 1
        return 1 if problems else 0
    if args.against:
        from ..aggregate import rerun_table

        if not args.against.is_dir():
            parser.error(f"--against {args.against}: no such folder")
        earlier, earlier_problems = read_records(args.against)
        for problem in earlier_problems:
            print(f"unreadable record: {problem}", file=sys.stderr)
        print(rerun_table(records, earlier, args.variant))
        return 1 if problems or earlier_problems else 0
    if args.compare_variants:
        from ..aggregate import variants_table

        text = variants_table(records, args.compare_variants)
        if args.plots is not None:
            from ..plots import plot_all

            paths = plot_all(records, args.plots, args.compare_variants)
            text += "\n\nAccuracy against length: " + ", ".join(str(path) for path in paths) + "\n"
        print(text)
        return 1 if problems else 0
    chosen = records_of_variant(parser, args, records)
    outdated = outdated_records(chosen)
    if outdated and not args.include_outdated:
        listed = "\n".join(
            f"  {spec_from_dict(r).record_path(args.results)}: {describe_differences(changed, 'there')}"
            + (f" (its options: {' '.join(pinned)})" if (pinned := pinning_options(changed)) else "")
            for r, changed in outdated[:10]
        )
        more = f"\n  ... and {len(outdated) - 10} more" if len(outdated) > 10 else ""
        print(
            f"error: {len(outdated)} records of variant {args.variant!r} were trained with other model options "
            f"than their commands build now:\n{listed}{more}\nmove each to a variant of its own: into "
            f'TASK/ARCH/NAME/, its "variant" set to NAME and its options added to its "options" '
            f"(docs/experiments.md, Tables); or run them again, or pass --include-outdated; nothing was written",
            file=sys.stderr,
        )
        return 1
    plots = []
    if args.plots is not None:  # linked relative to the file the tables go to
        from ..plots import plot_all

        base = args.update.parent if args.update else Path(".")
        plots = [os.path.relpath(path, base) for path in plot_all(records, args.plots, args.variant)]
    text = render(records, args.variant, plots)
    if args.update is None:
        print(text, end="")
    else:
        update_file(args.update, text)
        print(
            f"updated {args.update} from {len(chosen)} records"
            + (f"; {len(plots)} pictures in {args.plots}" if plots else "")
        )
    if problems:
        print(
            f"error: {len(problems)} records under {args.results} cannot be read (listed above); the tables "
            f"leave them out",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
