"""The plugin's command lines (installed as ``fairseq-monoattn-*``; the scripts under
``examples/`` and ``preprocess/`` call the same functions)."""
import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional


def score_main(argv=None) -> None:
    """fairseq-monoattn-score: greedy accuracy, edit distance and direction gate of a checkpoint."""
    from .scoring import CheckpointError, score, table

    parser = argparse.ArgumentParser(prog="fairseq-monoattn-score", description=score_main.__doc__)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="the fairseq-binarized data folder (DIR/bin)")
    parser.add_argument("--splits", nargs="+", required=True, help="splits to score, e.g. test15 test30 test100")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-output-len", type=int, default=None,
                        help="output length limit (default: 2 x the split's longest target + 10)")
    parser.add_argument("--predictions", action="store_true", help="also write OUT's stem + .<split>.txt hypotheses")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    try:
        results = score(args.checkpoint, args.data, args.splits, args.out, args.batch_size, args.max_output_len,
                        args.predictions, args.force)
    except CheckpointError as error:
        raise SystemExit(f"error: {error}") from None
    print(table(results))


def compare_main(argv=None) -> None:
    """fairseq-monoattn-compare: one preset, two or more option sets, same data, seeds and budget;
    per-seed test accuracy side by side."""
    from .experiments.compare import compare, parse_option_set

    parser = argparse.ArgumentParser(prog="fairseq-monoattn-compare", description=compare_main.__doc__)
    parser.add_argument("task", help="a task of fairseq-monoattn-prepare (inv_recopy, recopy, ...)")
    parser.add_argument("--arch", required=True, help="the preset (--arch) to train")
    parser.add_argument("--option-set", action="append", required=True, metavar="NAME=OPTIONS",
                        help="a named set of extra fairseq-train options (give two or more; OPTIONS may be empty)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="training seeds")
    parser.add_argument("--max-epoch", type=int, default=25, help="epoch budget of every run")
    parser.add_argument("--stop-after-perfect", type=int, default=0, metavar="K",
                        help="stop a run once greedy valid accuracy has been 100 for K epochs (0: never)")
    parser.add_argument("--data-seed", type=int, default=1, help="seed of the prepared data")
    parser.add_argument("--work", type=Path, default=Path("work"), help="data, checkpoints and logs (not in git)")
    parser.add_argument("--results", type=Path, default=Path("results/compare"),
                        help="one JSON record per finished run (small; commit it)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each pinned to its share of the cores")
    args = parser.parse_args(argv)
    try:
        option_sets = dict(parse_option_set(text) for text in args.option_set)
    except ValueError as error:
        parser.error(str(error))
    if len(option_sets) < 2:
        parser.error("give at least two --option-set with different names")
    table = compare(args.task, args.arch, args.seeds, option_sets, args.max_epoch, args.work, args.results,
                    jobs=args.jobs, data_seed=args.data_seed, stop_after_perfect=args.stop_after_perfect,
                    log=lambda line: print(line, flush=True))
    print(f"\n{args.task}, {args.arch}, {args.max_epoch} epochs, data seed {args.data_seed}; "
          "test accuracy % (g: mean direction gate on test15)\n")
    print(table)


def prepare_main(argv=None) -> None:
    from .data.prepare import main

    sys.exit(main(argv))


def git_toplevel(folder: Path) -> Optional[Path]:
    """The top folder of the git work tree holding ``folder``, or None outside git."""
    import subprocess

    top = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return Path(top.stdout.strip()) if top.returncode == 0 else None


def commit_record(spec, record_path: Path) -> None:
    """git-commit one finished run's record (only that file), so no finished run is lost when the
    machine goes away; a failure to commit is reported, never fatal."""
    import subprocess

    record_path = Path(record_path).resolve()
    top = git_toplevel(record_path.parent)
    if top is None:
        print(f"note: {record_path} is not in a git repository; not committed", flush=True)
        return
    message = f"results: {spec.key} ({spec.max_epoch} epochs max)"
    for command in (["git", "-C", str(top), "add", "--", str(record_path)],
                    ["git", "-C", str(top), "commit", "-q", "-m", message, "--", str(record_path)]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"note: could not commit {record_path}: {done.stderr.strip()}", flush=True)
            return


def uncommitted_records(specs, results: Path) -> list:
    """The specs whose record exists but git does not have as it is (untracked or changed): runs
    that finished after their sweep was stopped, so nobody committed them.  Empty outside git."""
    import subprocess

    results = Path(results).resolve()
    root = git_toplevel(results) if results.is_dir() else None
    if root is None:
        return []
    listed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all", "-z", "--",
                             str(results)], capture_output=True, text=True).stdout
    pending = {(root / entry[3:]).resolve() for entry in listed.split("\0") if entry}
    return [spec for spec in specs if spec.record_path(results).resolve() in pending]


def sweep_main(argv=None) -> None:
    """fairseq-monoattn-sweep: run, resume or inspect a named sweep of the paper's experiments."""
    from .experiments import aggregate, launch
    from .experiments.runs import describe_differences, load_records, outdated_records, run_seconds, spec_from_dict
    from .experiments.sweeps import SWEEPS, get_sweep

    parser = argparse.ArgumentParser(prog="fairseq-monoattn-sweep", description=sweep_main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the named sweeps")
    for name in ("run", "status"):
        sub = commands.add_parser(name, help="run (resume) a sweep" if name == "run" else "done / left of a sweep")
        sub.add_argument("sweep", help=", ".join(SWEEPS))
        sub.add_argument("--results", type=Path, default=Path("results/paper"),
                         help="one JSON record per finished run (commit it)")
        sub.add_argument("--work", type=Path, default=Path("work"), help="data, checkpoints, logs (not in git)")
        sub.add_argument("--seeds", type=int, nargs="+", default=None, help="instead of the sweep's seeds")
        sub.add_argument("--tasks", nargs="+", default=None, metavar="TASK", help="only these tasks of the sweep")
        sub.add_argument("--archs", nargs="+", default=None, metavar="ARCH",
                         help="only these architectures of the sweep")
        sub.add_argument("--more-seeds-where-different", type=int, nargs="+", default=(), metavar="SEED",
                         help="also run these seeds for every cell whose records over the sweep's seeds "
                              "(or --seeds) disagree with the paper: a median with another verdict at some "
                              "length, or for SCAN and CFQ a mean outside the paper's mean ± 2 std")
    run = commands.choices["run"]
    run.add_argument("--jobs", type=int, default=1, help="local runs at once, each pinned to its share of the cores")
    run.add_argument("--commit", action="store_true",
                     help="git-commit each record as its run finishes (and first, any record of the sweep that no "
                          "sweep committed)")
    run.add_argument("--data-dir", type=Path, default=None, metavar="PATH",
                     help="source data of a task the repository does not ship (table3-cfq: the CFQ 1.1 release, "
                          "cfq1.1.tar.gz or its folder); read once to prepare WORK/data, before any run starts")
    run.add_argument("--slurm", action="store_true", help="submit to SLURM through submitit instead")
    run.add_argument("--partition", default=None, help="SLURM partition (with --slurm)")
    run.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per run (with --slurm)")
    run.add_argument("--cpus-per-task", type=int, default=1, help="cores per run (with --slurm)")
    run.add_argument("--timeout-min", type=int, default=240, help="time limit per run (with --slurm)")
    run.add_argument("--array-parallelism", type=int, default=64, help="runs at once (with --slurm)")
    args = parser.parse_args(argv)
    if args.command == "list":
        for sweep in SWEEPS.values():
            print(f"{sweep.name:<12} {len(sweep.specs()):>4} runs  {sweep.description}")
        return
    try:
        sweep = get_sweep(args.sweep)
    except KeyError as error:
        parser.error(str(error.args[0]))
    try:
        sweep = sweep.only(args.tasks, args.archs)
    except ValueError as error:
        parser.error(str(error))
    if args.seeds:
        sweep = replace(sweep, seeds=tuple(args.seeds))
    if args.more_seeds_where_different:
        # the verdict of the sweep's own seeds decides, so that a cell whose first extra seed
        # happens to tip its median still gets all the extra seeds asked for
        base_records = [r for r in load_records(args.results) if r["seed"] in sweep.seeds] \
            if args.results.exists() else []
        cells = aggregate.collect(base_records)
        different = {key: tuple(args.more_seeds_where_different) for key, cell in cells.items()
                     if key in sweep.cells and aggregate.disagrees(cell)}
        sweep = replace(sweep, extra_seeds=different)
        print(f"{len(different)} cells disagree with the paper: adding seeds {args.more_seeds_where_different}")
    specs = sweep.specs()
    if args.command == "status":
        done = [s for s in specs if s.record_path(args.results).exists()]
        done_records = [json.loads(s.record_path(args.results).read_text()) for s in done]
        # the time a run takes: this sweep's runs, or before it has any, every record of its cells
        records = done_records or ([r for r in load_records(args.results) if (r["task"], r["arch"]) in sweep.cells]
                                   if args.results.exists() else [])
        hours = sum(map(run_seconds, records)) / max(1, len(records)) / 3600
        print(f"{sweep.name}: {len(done)} of {len(specs)} runs have records in {args.results}; "
              f"{len(specs) - len(done)} left" + (f", about {hours * (len(specs) - len(done)):.1f} CPU-hours "
                                                  f"at {hours * 60:.1f} min a run" if records else ""))
        left_out = uncommitted_records(done, args.results)
        if left_out:
            print(f"{len(left_out)} of these records are not committed ({left_out[0].record_path(args.results)}"
                  f"{', ...' if len(left_out) > 1 else ''}); `fairseq-monoattn-sweep run` with this sweep and "
                  f"`--commit` commits them before it runs anything")
        outdated = outdated_records(done_records)
        for record, changed in outdated:
            path = spec_from_dict(record).record_path(args.results)
            print(f"outdated: {path} ({describe_differences(changed, 'there')}); fairseq-monoattn-aggregate refuses it")
        return
    log = lambda line: print(line, flush=True)  # noqa: E731
    prepare_source_data(parser, sweep.name, [s for s in specs if not s.record_path(args.results).exists()],
                        args.work, args.data_dir, log)

    def commit_left_records():
        for spec in uncommitted_records(specs, args.results) if args.commit else ():
            log(f"[{spec.key}] committing its record, which no sweep committed (its run finished after its "
                f"sweep stopped, or under SLURM)")
            commit_record(spec, spec.record_path(args.results))

    commit_left_records()
    if args.slurm:
        parameters = dict(slurm_partition=args.partition, cpus_per_task=args.cpus_per_task,
                          gpus_per_node=args.gpus_per_node, timeout_min=args.timeout_min,
                          slurm_array_parallelism=args.array_parallelism)
        launch.run_submitit(specs, args.work, args.results, args.work / "submitit", log=log,
                            **{k: v for k, v in parameters.items() if v is not None})
        commit_left_records()
        return
    outcome = launch.run_local(specs, args.work, args.results, jobs=args.jobs,
                               on_record=commit_record if args.commit else None, log=log)
    failed = {key: result for key, result in outcome.items() if result != "ok"}
    for key, result in failed.items():
        print(f"FAILED {key}: {result}")
    if failed:
        raise SystemExit(1)


def prepare_source_data(parser, sweep_name: str, pending, work: Path, data_dir: Optional[Path], log) -> None:
    """Prepare, in this process and before any run, the data of the pending runs' tasks whose
    source is not in the repository (CFQ), from ``--data-dir``; an error names what is missing."""
    from .data.tasks import TASKS
    from .experiments.runs import RunError, prepared_data

    readers = [name for name, task in TASKS.items() if task.needs_data_dir]
    if data_dir is not None and not any(s.task in readers for s in pending):
        parser.error(f"--data-dir: no run of {sweep_name} left to run reads it (only {', '.join(readers)} do)")
    for task in dict.fromkeys(s.task for s in pending if s.task in readers):
        spec = next(s for s in pending if s.task == task)
        before = (spec.data_dir(work) / "manifest.json").exists()
        try:
            folder = prepared_data(spec, work, data_dir)
        except RunError as error:
            raise SystemExit(f"error: {sweep_name}: {error}")
        log(f"{task}: data in {folder}" + (" (prepared before; --data-dir is not read again)"
                                           if before and data_dir is not None else ""))


def aggregate_main(argv=None) -> None:
    """fairseq-monoattn-aggregate: the paper's tables from run records, with the paper's values."""
    from .experiments.aggregate import render, update_file
    from .experiments.plots import plot_all
    from .experiments.runs import describe_differences, load_records, outdated_records, spec_from_dict

    parser = argparse.ArgumentParser(prog="fairseq-monoattn-aggregate", description=aggregate_main.__doc__)
    parser.add_argument("results", type=Path, help="a results folder (RESULTS/TASK/ARCH/VARIANT/seedN.json)")
    parser.add_argument("--variant", default="default", help="which option set's records to table")
    parser.add_argument("--update", type=Path, default=None, metavar="FILE",
                        help="rewrite the generated part of FILE (e.g. RESULTS.md), keep the rest")
    parser.add_argument("--plots", type=Path, default=None, metavar="DIR",
                        help="also draw accuracy against length per task into DIR (linked from the tables)")
    parser.add_argument("--include-outdated", action="store_true",
                        help="table records whose model is no longer the one their command builds (a preset or "
                             "a default changed since they ran) instead of refusing")
    args = parser.parse_args(argv)
    records = load_records(args.results)
    if not records:
        raise SystemExit(f"error: no records under {args.results} (RESULTS/TASK/ARCH/VARIANT/seedN.json)")
    outdated = outdated_records([r for r in records if r["variant"] == args.variant])
    if outdated and not args.include_outdated:
        listed = "\n".join(f"  {spec_from_dict(record).record_path(args.results)}: "
                           f"{describe_differences(changed, 'there')}" for record, changed in outdated[:10])
        more = f"\n  ... and {len(outdated) - 10} more" if len(outdated) > 10 else ""
        raise SystemExit(f"error: {len(outdated)} records of variant {args.variant!r} were trained with other model "
                         f"options than their commands build now:\n{listed}{more}\nmove them to a variant named "
                         f"for what they ran (its folder, and the record's variant and options), run them again, "
                         f"or pass --include-outdated; nothing was written")
    plots = []
    if args.plots is not None:  # linked relative to the file the tables go to
        base = args.update.parent if args.update else Path(".")
        plots = [os.path.relpath(path, base) for path in plot_all(records, args.plots, args.variant)]
    text = render(records, args.variant, plots)
    if args.update is None:
        print(text, end="")
        return
    update_file(args.update, text)
    print(f"updated {args.update} from {len(records)} records" + (f"; {len(plots)} pictures in {args.plots}"
                                                                    if plots else ""))


def run_main(argv=None) -> None:
    """fairseq-monoattn-run: train presets on a task with the paper's recipe (preparing the data if
    needed), score every test split of each best checkpoint, record, and print the tables.
    Options after `--` go to fairseq-train (name them with --variant)."""
    from .experiments.aggregate import render
    from .experiments.launch import run_local
    from .experiments.runs import DEFAULT_VARIANT, RunSpec, load_records

    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="fairseq-monoattn-run", description=run_main.__doc__)
    parser.add_argument("task", help="a task of fairseq-monoattn-prepare (copy, recopy, inv_recopy, scan, ...)")
    parser.add_argument("--arch", nargs="+", required=True, help="one or more presets")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="training seeds")
    parser.add_argument("--max-epoch", type=int, default=100, help="epoch budget (the paper: 100)")
    parser.add_argument("--stop-after-perfect", type=int, default=0, metavar="K",
                        help="stop once greedy valid accuracy has been 100 for K epochs (0: never)")
    parser.add_argument("--data-seed", type=int, default=1, help="seed of the prepared data")
    parser.add_argument("--variant", default=None, help="a name for the options after `--` (required with them)")
    parser.add_argument("--work", type=Path, default=Path("work"), help="data, checkpoints and logs")
    parser.add_argument("--results", type=Path, default=Path("results/runs"), help="one JSON record per run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each pinned to its share of the cores")
    args = parser.parse_args(argv)
    if extra and not args.variant:
        parser.error("options after `--` change the model or training: name them with --variant NAME")
    variant = args.variant or DEFAULT_VARIANT
    specs = [RunSpec(task=args.task, arch=arch, seed=seed, data_seed=args.data_seed, variant=variant,
                     options=tuple(extra), max_epoch=args.max_epoch, stop_after_perfect=args.stop_after_perfect)
             for arch in args.arch for seed in args.seeds]
    outcome = run_local(specs, args.work, args.results, jobs=args.jobs, log=lambda line: print(line, flush=True))
    failed = [key for key, result in outcome.items() if result != "ok"]
    if failed:
        raise SystemExit(f"error: {len(failed)} runs failed: {', '.join(failed)}")
    keys = {(s.task, s.arch, s.seed) for s in specs}
    records = [r for r in load_records(args.results) if (r["task"], r["arch"], r["seed"]) in keys]
    print()
    print(render(records, variant), end="")
