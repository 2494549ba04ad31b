"""Run an experiment end to end: prepare the task's data if missing, train each model with
the paper's recipe for each seed, and score every test split of its best checkpoint.

    python examples/run_experiment.py recopy --arch gru_onestep gru_relative --seeds 1 2 3
    python examples/run_experiment.py scan --arch gru_mix_onestep --seeds 1 --max-epoch 20 -- --lr 5e-4

Layout: RUNS/TASK/data (prepared once, see preprocess/), RUNS/TASK/ARCH/seedN/{checkpoints/,
train.log, command.txt, scores.json}.  It resumes: a run with scores.json is skipped, a run
with checkpoints continues from checkpoint_last.pt (fairseq's own restore).  It never
overwrites: a run folder started with other options is refused, results are written once.
Options after `--` go to fairseq-train unchanged.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))

from score import score, table  # noqa: E402


def parse_args(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", help="a task of preprocess/prepare.py (copy, recopy, inv_recopy, scan, ...)")
    parser.add_argument("--arch", nargs="+", required=True, help="one or more --arch names")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="training seeds")
    parser.add_argument("--runs", type=Path, default=REPO / "runs", help="root folder of all runs")
    parser.add_argument("--max-epoch", type=int, default=None, help="override the recipe's 100 epochs")
    parser.add_argument("--data-dir", default=None, help="input data for file-based tasks (lookup, cfq)")
    parser.add_argument("--data-seed", type=int, default=None, help="seed of the generated data (default 1)")
    parser.add_argument("--teacher-forced-selection", action="store_true",
                        help="select checkpoints by teacher-forced exact match (the authors' selector)")
    parser.add_argument("--batch-size-eval", type=int, default=64, help="batch size of the final scoring")
    args = parser.parse_args(argv)
    args.extra = extra
    return args


def prepared_data(task, runs, data_dir, data_seed) -> Path:
    from preprocess.prepare import prepare, summary

    folder = runs / task / "data"
    manifest_file = folder / "manifest.json"
    if manifest_file.exists():
        manifest = json.loads(manifest_file.read_text())
        if manifest["task"] != task or (data_seed is not None and manifest["seed"] != data_seed):
            raise SystemExit(f"error: {folder} holds {manifest['task']} data with seed {manifest['seed']}; "
                             "use another --runs folder")
        return folder
    print(f"preparing {task} data in {folder}", flush=True)
    manifest = prepare(task, folder, seed=data_seed, data_dir=data_dir)
    print(summary(manifest, folder), flush=True)
    return folder


def train_command(data_bin, arch, seed, save_dir, args):
    from fairseq_monoattn.recipes import PAPER_RECIPE, PAPER_RECIPE_TEACHER_FORCED

    recipe = list(PAPER_RECIPE_TEACHER_FORCED if args.teacher_forced_selection else PAPER_RECIPE)
    if args.max_epoch is not None:
        recipe[recipe.index("--max-epoch") + 1] = str(args.max_epoch)
    return [str(Path(sys.executable).parent / "fairseq-train"), str(data_bin),
            "--user-dir", str(REPO / "fairseq_monoattn"), "--arch", arch, *recipe, "--seed", str(seed),
            "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--log-file", str(save_dir.parent / "train.log"),
            *args.extra]


def run_one(data, arch, seed, args):
    run_dir = args.runs / args.task / arch / f"seed{seed}"
    scores_file = run_dir / "scores.json"
    if scores_file.exists():
        print(f"[{arch} seed {seed}] done already: {scores_file}", flush=True)
        return json.loads(scores_file.read_text())["splits"]
    run_dir.mkdir(parents=True, exist_ok=True)
    command = train_command(data / "bin", arch, seed, run_dir / "checkpoints", args)
    command_file = run_dir / "command.txt"
    recorded = " ".join(command)
    if command_file.exists() and command_file.read_text().strip() != recorded:
        raise SystemExit(f"error: {run_dir} was started with other options:\n  {command_file.read_text().strip()}\n"
                         f"now:\n  {recorded}\nuse another --runs folder (nothing was changed)")
    command_file.write_text(recorded + "\n")
    start = time.time()
    print(f"[{arch} seed {seed}] training: {recorded}", flush=True)
    if subprocess.run(command).returncode != 0:
        raise SystemExit(f"error: fairseq-train failed for {arch} seed {seed}; see {run_dir / 'train.log'}")
    print(f"[{arch} seed {seed}] trained in {time.time() - start:.0f} s; scoring checkpoint_best.pt", flush=True)
    manifest = json.loads((data / "manifest.json").read_text())
    splits = [s for s in manifest["splits"] if s.startswith("test")]
    results = score(run_dir / "checkpoints" / "checkpoint_best.pt", data / "bin", splits, scores_file,
                    batch_size=args.batch_size_eval)
    print(f"[{arch} seed {seed}] finished in {time.time() - start:.0f} s", flush=True)
    print(table(results), flush=True)
    return results


def main(argv=None):
    args = parse_args(argv)
    start = time.time()
    data = prepared_data(args.task, args.runs, args.data_dir, args.data_seed)
    for arch in args.arch:
        for seed in args.seeds:
            run_one(data, arch, seed, args)
    print(f"all runs of {args.task} finished; elapsed {time.time() - start:.0f} s. Tables: "
          f"python examples/aggregate.py {args.runs}", flush=True)


if __name__ == "__main__":
    main()
