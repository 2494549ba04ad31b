"""fairseq-monoattn-aggregate VIEW: tables from run records alone, one view a subcommand (VIEW
--help lists its options): the paper's tables, variants side by side, the authors' release beside
the plugin, or the runs two results folders share.  A record whose model is no longer the one its
command builds is refused (nothing is written); an unreadable record is named, the others are
tabled, and the exit status is 1."""

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from .common import DEFAULT_RESULTS, Parser, fail


def build_parser() -> Parser:
    parser = Parser(prog="fairseq-monoattn-aggregate", description=__doc__)
    views = parser.add_subparsers(dest="view", required=True, metavar="VIEW", parser_class=Parser)

    def view(name: str, description: str) -> argparse.ArgumentParser:
        sub = views.add_parser(name, help=description, description=description)
        sub.add_argument(
            "--results",
            type=Path,
            default=DEFAULT_RESULTS,
            metavar="DIR",
            help="a results folder (RESULTS/TASK/ARCH/VARIANT/seedN.json)",
        )
        sub.add_argument(
            "--seeds",
            type=int,
            nargs="+",
            default=None,
            metavar="N",
            help="only the records under --results of these training seeds (None: every seed)",
        )
        return sub

    def add_variant(sub: argparse.ArgumentParser, what: str) -> None:
        sub.add_argument("--variant", default="default", metavar="NAME", help=f"the variant whose records {what}")

    tables = view("tables", "the paper's tables, beside the paper's values, with each cell's verdict")
    add_variant(tables, "to table")
    tables.add_argument(
        "--update",
        type=Path,
        default=None,
        metavar="FILE",
        help="rewrite the generated part of FILE (e.g. RESULTS.md), keep the rest",
    )
    add_plots(tables, "also draw accuracy against length per task into DIR (linked from the tables)")
    tables.add_argument(
        "--include-outdated",
        action="store_true",
        help="table records whose model is no longer the one their command builds (a preset or "
        "a default changed since they ran) instead of refusing",
    )
    variants = view("variants", "every cell with records of at least two of the variants, their medians side by side")
    variants.add_argument("names", nargs="+", metavar="NAME", help="the variants to compare")
    add_plots(variants, "also draw accuracy against length per task into DIR, a line per model and variant")
    release = view("release", "the authors' release's records beside the plugin's: paper / release / plugin")
    release.add_argument("release", type=Path, metavar="DIR", help="the release's records")
    add_variant(release, "make the plugin's column")
    against = view(
        "against",
        "the runs of --results that another results folder has too (the same task, model, variant and seed), "
        "run by run: whose verdicts changed, how many of each set have the paper's verdict, the CPU-hours of each",
    )
    against.add_argument("earlier", type=Path, metavar="DIR", help="the other results folder")
    add_variant(against, "to compare (--seeds: only those seeds' runs)")
    workbench = views.add_parser(
        "workbench",
        help="the workbench's table: every row, the probing tasks, the field's benchmark, the SCAN cutoffs",
        description="The workbench's table from the records of its sweeps (each in the results folder it "
        "names, relative to the current folder) and table2's, with the field's published numbers beside ours.",
    )
    workbench.add_argument(
        "--update", type=Path, default=None, metavar="FILE", help="rewrite its generated part of FILE, keep the rest"
    )
    add_plots(workbench, "also draw accuracy against length per benchmark task into DIR (linked from the table)")
    return parser


def add_plots(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--plots", type=Path, default=None, metavar="DIR", help=help_text)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.view == "workbench":
        return show_workbench(args)
    if not args.results.is_dir():
        parser.error(f"--results {args.results}: no such folder")
    from ..paper_values import PaperValuesError, paper_values
    from ..records import read_records

    try:
        paper_values()  # the paper's values file, checked before any record is read
    except PaperValuesError as error:
        fail(str(error))
    records, problems = read_records(args.results)
    for problem in problems:
        print(f"unreadable record: {problem}", file=sys.stderr)
    if not records:
        print(
            f"error: no readable records under {args.results} (RESULTS/TASK/ARCH/VARIANT/seedN.json)", file=sys.stderr
        )
        return 1
    if args.seeds is not None:
        records = of_seeds(parser, args, records)
    return VIEWS[args.view](parser, args, records, problems)


def of_seeds(parser, args, records):
    """The records of --seeds; a usage error naming the seeds there are when none is there."""
    kept = [r for r in records if r["seed"] in set(args.seeds)]
    if not kept:
        found = ", ".join(str(seed) for seed in sorted({r["seed"] for r in records}))
        parser.error(f"--seeds {' '.join(map(str, args.seeds))}: no records of them under {args.results}; "
                     f"there are seeds {found}")  # fmt: skip
    return kept


def of_variant(parser, args, records):
    """The records of --variant; a usage error naming the variants there are when it has none."""
    chosen = [r for r in records if r["variant"] == args.variant]
    if not chosen:
        known = sorted({r["variant"] for r in records})
        parser.error(
            f"--variant {args.variant!r}: no records of it under {args.results}; there are: {', '.join(known)}"
        )
    return chosen


def show_tables(parser, args, records, problems) -> int:
    from ..aggregate import render, update_file

    chosen = of_variant(parser, args, records)
    if refuse_outdated(args, chosen):
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


def refuse_outdated(args, chosen) -> bool:
    """Name the records whose model their command no longer builds (unless --include-outdated);
    True when there are any."""
    from ..outdated import describe_differences, outdated_records, pinning_options
    from ..spec import spec_from_dict

    outdated = [] if args.include_outdated else outdated_records(chosen)
    if not outdated:
        return False
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
    return True


def show_variants(parser, args, records, problems) -> int:
    from ..aggregate import variants_table

    text = variants_table(records, args.names)
    if args.plots is not None:
        from ..plots import plot_all

        paths = plot_all(records, args.plots, args.names)
        text += "\n\nAccuracy against length: " + ", ".join(str(path) for path in paths) + "\n"
    print(text)
    return 1 if problems else 0


def show_release(parser, args, records, problems) -> int:
    from ..aggregate import read_release_records, release_table
    from ..records import RecordError

    of_variant(parser, args, records)
    try:
        print(release_table(records, read_release_records(args.release), args.variant))
    except RecordError as error:
        print(f"error: release {args.release}: {error}", file=sys.stderr)
        return 1
    return 1 if problems else 0


def show_against(parser, args, records, problems) -> int:
    from ..aggregate import rerun_table
    from ..records import read_records

    if not args.earlier.is_dir():
        parser.error(f"against {args.earlier}: no such folder")
    earlier, earlier_problems = read_records(args.earlier)
    for problem in earlier_problems:
        print(f"unreadable record: {problem}", file=sys.stderr)
    print(rerun_table(records, earlier, args.variant))
    return 1 if problems or earlier_problems else 0


def show_workbench(args) -> int:
    from .. import workbench
    from ..aggregate import update_file
    from ..field_values import FieldValuesError, field_values
    from ..outdated import outdated_records

    try:
        published = field_values()
    except FieldValuesError as error:
        fail(str(error))
    records, sweeps = workbench.Records(), workbench.table_sweeps()
    plots = {}
    if args.plots is not None:
        base = args.update.parent if args.update else Path(".")
        pictures = workbench.plot_lengths(records, sweeps, args.plots)
        plots = {task: os.path.relpath(path, base) for task, path in pictures.items()}
    text = workbench.render(records, sweeps, published, plots)
    tabled = [r for folder in records.folders.values() for r in folder.values()]
    outdated = outdated_records(tabled)
    if outdated:
        first = outdated[0][0]
        fail(
            f"{len(outdated)} records of the workbench's sweeps were trained with other model options than their "
            f"commands build now (the first: {first['task']}/{first['arch']}/{first['variant']}/seed{first['seed']}); "
            "run them again; nothing was written"
        )
    if args.update is None:
        print(text, end="")
    else:
        update_file(args.update, text, name="workbench")
        print(f"updated {args.update}" + (f"; {len(plots)} pictures in {args.plots}" if plots else ""))
    for problem in records.problems:
        print(f"unreadable record: {problem}", file=sys.stderr)
    return 1 if records.problems else 0


VIEWS = {"tables": show_tables, "variants": show_variants, "release": show_release, "against": show_against}


if __name__ == "__main__":
    sys.exit(main())
