"""Collect the scores of every run into the paper's table layouts, as Markdown.

    python examples/aggregate.py runs [--out results.md]

Probing tasks: accuracy and mean edit distance per model and length split, the median over
seeds (as in the paper's tables).  SCAN and CFQ: mean +- standard deviation over seeds.
Reads RUNS/TASK/ARCH/seedN/scores.json as written by run_experiment.py.  With --paper, each
accuracy cell also shows the paper's value in brackets where the paper reports one.
"""
import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from paper_results import paper_cell

MEAN_STD_TASKS = {"scan", "cfq"}


def collect(runs: Path):
    """{task: {arch: {split: {metric: [value per seed]}}}} and the seeds seen per (task, arch)."""
    scores = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    seeds = defaultdict(list)
    for path in sorted(runs.glob("*/*/seed*/scores.json")):
        task, arch, seed = path.parts[-4], path.parts[-3], path.parts[-2]
        seeds[task, arch].append(int(seed[len("seed"):]))
        for split, values in json.loads(path.read_text())["splits"].items():
            for metric in ("accuracy", "mean_edit_distance"):
                scores[task][arch][split][metric].append(values[metric])
    return scores, seeds


def split_order(split: str):
    """test15 < test30 < test100 < test (named) < test_iid."""
    number = re.search(r"(\d+)$", split)
    return (split == "test_iid", int(number.group(1)) if number else 0, split)


def cell(values, mean_std: bool) -> str:
    if not values:
        return ""
    if mean_std:
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):.2f} ± {std:.2f}"
    return f"{statistics.median(values):.1f}"


def task_table(task, archs, seeds, metric, title, paper=False) -> str:
    splits = sorted({s for arch in archs.values() for s in arch}, key=split_order)
    mean_std = task in MEAN_STD_TASKS
    summary = "mean ± std" if mean_std else "median"
    note = "; paper in brackets" if paper and metric == "accuracy" else ""
    lines = [f"### {task}: {title} ({summary} over seeds{note})", "",
             "| model | seeds | " + " | ".join(splits) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in splits) + " |"]
    for arch in sorted(archs):
        cells = [cell(archs[arch][s][metric], mean_std) for s in splits]
        if paper and metric == "accuracy":
            cells = [f"{c} ({paper_cell(task, arch, s)})" if paper_cell(task, arch, s) else c
                     for c, s in zip(cells, splits)]
        seed_list = ",".join(str(s) for s in sorted(seeds[task, arch]))
        lines.append(f"| {arch} | {seed_list} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(runs: Path, paper: bool = False) -> str:
    scores, seeds = collect(runs)
    if not scores:
        raise SystemExit(f"error: no RUNS/TASK/ARCH/seedN/scores.json under {runs}")
    parts = []
    for task in sorted(scores):
        parts.append(task_table(task, scores[task], seeds, "accuracy", "sequence accuracy %", paper))
        parts.append(task_table(task, scores[task], seeds, "mean_edit_distance", "mean edit distance"))
    return "\n\n".join(parts) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown here (refuses to overwrite)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.add_argument("--paper", action="store_true", help="show the paper's accuracy in brackets")
    args = parser.parse_args(argv)
    text = render(args.runs, args.paper)
    if args.out is None:
        print(text, end="")
        return
    if args.out.exists() and not args.force:
        raise SystemExit(f"error: {args.out} exists; pass --force to replace it")
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
