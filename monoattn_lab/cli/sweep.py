"""fairseq-monoattn-sweep: run, resume or inspect a named sweep of the paper's experiments
(tasks x presets x seeds, at the sweep's budget).  Records go to --results, one per run; a run
with a record is skipped, an interrupted one resumes."""

import sys
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

from .common import (
    POSITIVE,
    SEED,
    Parser,
    add_arch,
    add_jobs,
    add_places,
    add_seeds,
    check_tasks,
    fail,
    interruptible,
    whole_number,
)


def build_parser() -> Parser:
    from ..sweeps import SWEEPS

    parser = Parser(prog="fairseq-monoattn-sweep", description=__doc__)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{list,run,status,rescore}", parser_class=Parser
    )
    commands.add_parser("list", help="the named sweeps", description="The named sweeps and their sizes.")
    descriptions = {
        "run": ("run (resume) a sweep", "Run (resume) a named sweep."),
        "status": ("done / left of a sweep", "What is done and left of a named sweep."),
        "rescore": (
            "score a sweep's recorded runs again",
            "Score the recorded runs of a named sweep again, from their checkpoints in --work, with the scorer as "
            "it is now (a measure it gained after the runs), and rewrite their records' scores; a run whose "
            "checkpoint is not in --work is left as it is.",
        ),
    }
    for name, (summary, description) in descriptions.items():
        sub = commands.add_parser(name, help=summary, description=description)
        sub.add_argument("sweep", help=", ".join(SWEEPS))
        add_places(sub, results=None)
        add_seeds(sub, default=None, help="instead of the sweep's seeds")
        sub.add_argument("--task", nargs="+", default=None, metavar="TASK", help="only these tasks of the sweep")
        add_arch(sub, required=False, help="only these presets of the sweep")
        if name == "rescore":
            continue
        sub.add_argument(
            "--more-seeds-where-different",
            type=SEED,
            nargs="+",
            default=[],
            metavar="SEED",
            help="also run these seeds for every cell whose records over the sweep's seeds (or --seeds) "
            "disagree with the paper: a median with another verdict at some length, or for SCAN "
            "and CFQ a mean outside the paper's mean ± 2 std",
        )
    run = commands.choices["run"]
    add_jobs(run)
    run.add_argument(
        "--commit",
        action="store_true",
        help="git-commit each record as its run finishes (and first, any record of the sweep that no sweep committed)",
    )
    run.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="source data of a task the repository does not ship (table3-cfq: the CFQ 1.1 release, "
        "cfq1.1.tar.gz or its folder); read once to prepare WORK/data, before any run starts",
    )
    run.add_argument("--slurm", action="store_true", help="submit to SLURM through submitit instead")
    run.add_argument("--partition", default=None, help="SLURM partition (with --slurm)")
    run.add_argument("--gpus-per-node", type=whole_number(0), default=0, help="GPUs per run (with --slurm)")
    run.add_argument("--cpus-per-task", type=POSITIVE, default=1, help="cores per run (with --slurm)")
    run.add_argument("--timeout-min", type=POSITIVE, default=240, help="time limit per run (with --slurm)")
    run.add_argument("--array-parallelism", type=POSITIVE, default=64, help="runs at once (with --slurm)")
    return parser


@interruptible
def main(argv: Optional[List[str]] = None) -> int:
    from ..sweeps import SWEEPS, get_sweep

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        for sweep in SWEEPS.values():
            print(f"{sweep.name:<12} {len(sweep.specs()):>4} runs  {sweep.description}")
        return 0
    try:
        sweep = get_sweep(args.sweep)
    except KeyError as error:
        parser.error(str(error.args[0]))
    check_tasks(parser, args.task or (), option="--task")
    try:
        sweep = sweep.only(args.task, args.arch)
    except ValueError as error:
        parser.error(str(error))
    if "results" not in vars(args):  # the sweep's own folder: results/paper for the paper's tables
        args.results = sweep.results_folder(args.work)
    if args.seeds:
        sweep = replace(sweep, seeds=tuple(args.seeds))
    if args.command == "rescore":
        return rescore_sweep(args, sweep)
    from ..records import read_records

    records, problems = read_records(args.results) if args.results.exists() else ([], [])
    for problem in problems:
        print(f"unreadable record: {problem}", file=sys.stderr)
    if args.more_seeds_where_different:
        from ..paper_values import PaperValuesError, paper_values
        from ..sweeps import with_more_seeds

        try:
            paper_values()  # which cells disagree is read off the paper's values file
        except PaperValuesError as error:
            fail(str(error))
        sweep, count = with_more_seeds(sweep, records, args.more_seeds_where_different)
        print(f"{count} cells disagree with the paper: adding seeds {args.more_seeds_where_different}")
    if args.command == "status":
        from ..sweeps import status

        print("\n".join(status(sweep, args.results, records)))
        if problems:
            print(
                f"error: {len(problems)} records under {args.results} cannot be read (listed above); the counts "
                f"leave them out",
                file=sys.stderr,
            )
        return 1 if problems else 0
    return run_sweep(parser, args, sweep)


def run_sweep(parser: Parser, args, sweep) -> int:
    from .. import launch
    from ..git_records import commit_record, uncommitted_records
    from ..spec import RunError
    from ..sweeps import prepare_source_data

    def log(line: str) -> None:
        print(line, flush=True)

    if args.slurm and args.nice:
        parser.error("--nice is for runs on this machine; under --slurm the cluster's scheduler sets their priority")
    specs = sweep.specs()
    pending = [s for s in specs if not s.record_path(args.results).exists()]
    try:
        prepare_source_data(sweep.name, pending, args.work, args.data_dir, log)
    except ValueError as error:
        parser.error(str(error))
    except RunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1

    def commit_left_records():
        for spec in uncommitted_records(specs, args.results) if args.commit else ():
            log(
                f"[{spec.key}] committing its record, which no sweep committed (its run finished after its "
                f"sweep stopped, or under SLURM)"
            )
            commit_record(spec, spec.record_path(args.results), log=log)

    commit_left_records()
    if args.slurm:
        parameters = dict(
            slurm_partition=args.partition,
            cpus_per_task=args.cpus_per_task,
            gpus_per_node=args.gpus_per_node,
            timeout_min=args.timeout_min,
            slurm_array_parallelism=args.array_parallelism,
        )
        launch.run_submitit(
            specs,
            args.work,
            args.results,
            args.work / "submitit",
            log=log,
            **{k: v for k, v in parameters.items() if v is not None},
        )
        commit_left_records()
        return 0
    on_record = (lambda spec, path: commit_record(spec, path, log=log)) if args.commit else None
    outcome = launch.run_local(
        specs, args.work, args.results, jobs=args.jobs, on_record=on_record, log=log, nice=args.nice
    )
    return launch.summarize_outcome(outcome, log=log)


def rescore_sweep(args, sweep) -> int:
    """``rescore``: each recorded run of the sweep whose checkpoint the work folder holds, one at a
    time; exit status 1 if any was refused."""
    from ..runs import rescore
    from ..spec import RunError

    rescored = missing = refused = 0
    for spec in sweep.specs():
        if not spec.record_path(args.results).exists():
            continue
        try:
            record = rescore(spec, args.work, args.results, log=lambda line: print(line, flush=True))
        except RunError as error:  # RunBusy too: another process holds the run
            print(f"error: [{spec.key}] {error}", file=sys.stderr)
            refused += 1
            continue
        rescored += record is not None
        missing += record is None
    print(
        f"{rescored} records rescored; {missing} left as they were (their checkpoints are not in {args.work})"
        + (f"; {refused} refused (above)" if refused else "")
    )
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
