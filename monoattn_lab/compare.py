"""Train one preset under two (or more) variants (named sets of extra fairseq-train options)
with the same data, seeds and budget, and put the per-seed test accuracies side by side.

    fairseq-monoattn-compare inv_recopy --arch gru_monoattn --seeds 1 2 3 4 5 \\
        --variant before="--embedding-init scaled-normal" --variant after="" --jobs 2

A variant's records land in RESULTS/TASK/ARCH/VARIANT/seedN.json, so a comparison resumes where
it stopped and its numbers can be re-tabled later without training again.
"""

import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_monoattn.catalog import TASKS

from .aggregate import split_label, split_order
from .launch import run_local
from .records import read_records
from .spec import RunSpec


def comparison_specs(
    task: str,
    arch: str,
    seeds: Sequence[int],
    variants: Dict[str, Tuple[str, ...]],
    max_epoch: int,
    data_seed: int = 1,
    stop_after_perfect: int = 0,
    user_dir: Optional[str] = None,
) -> List[RunSpec]:
    return [
        RunSpec(
            task=task,
            arch=arch,
            seed=seed,
            data_seed=data_seed,
            variant=name,
            options=options,
            max_epoch=max_epoch,
            stop_after_perfect=stop_after_perfect,
            user_dir=user_dir,
        )
        for seed in seeds
        for name, options in variants.items()
    ]


def table_splits(records: List[dict]) -> List[str]:
    """The paper's lengths where the records have them, else every test split but the i.i.d. one."""
    present = sorted({s for r in records for s in r["splits"] if s.startswith("test")}, key=split_order)
    tasks = {r["task"] for r in records}
    lengths = TASKS[tasks.pop()].length_splits if len(tasks) == 1 and next(iter(tasks), None) in TASKS else ()
    return [s for s in lengths if s in present] or [s for s in present if s != "test_iid"] or present


def accuracy_cell(record: Optional[dict], splits: Sequence[str]) -> str:
    if record is None:
        return "(not run)"
    values = " / ".join(f"{record['splits'][s]['accuracy']:.4g}" if s in record["splits"] else "-" for s in splits)
    gate = record.get("direction_gate") or {}
    gate_text = f"; g {gate[splits[0]]:.2f}" if splits[0] in gate else ""
    return f"{values}{gate_text}"


def comparison_table(
    records: List[dict],
    task: str,
    arch: str,
    names: Sequence[str],
    seeds: Optional[Sequence[int]] = None,
    splits: Optional[Sequence[str]] = None,
) -> str:
    """Markdown: one row per seed, one column per variant (accuracy at each split; the mean
    direction gate g on the first split), then the median over seeds and the count of seeds
    reaching >= 95 at every split."""
    mine = {(r["variant"], r["seed"]): r for r in records if r["task"] == task and r["arch"] == arch}
    splits = splits or table_splits(list(mine.values()))
    seeds = sorted(seeds if seeds is not None else {seed for variant, seed in mine if variant in names})
    header = " / ".join(split_label(s) for s in splits)
    lines = [
        "| seed | " + " | ".join(f"{name}: {header}" for name in names) + " |",
        "| ---: | " + " | ".join("---" for _ in names) + " |",
    ]
    for seed in seeds:
        lines.append(
            f"| {seed} | " + " | ".join(accuracy_cell(mine.get((name, seed)), splits) for name in names) + " |"
        )
    medians, solved = [], []
    for name in names:
        runs = [mine[(name, seed)] for seed in seeds if (name, seed) in mine]
        medians.append(
            " / ".join(
                f"{statistics.median(r['splits'][s]['accuracy'] for r in runs):.4g}" if runs else "-" for s in splits
            )
        )
        solved.append(f"{sum(all(r['splits'][s]['accuracy'] >= 95 for s in splits) for r in runs)} of {len(runs)}")
    lines.append("| median | " + " | ".join(medians) + " |")
    lines.append("| seeds >= 95 at every length | " + " | ".join(solved) + " |")
    return "\n".join(lines)


def variant_summary(
    records: List[dict],
    task: str,
    arch: str,
    names: Sequence[str],
    seeds: Optional[Sequence[int]] = None,
    splits: Optional[Sequence[str]] = None,
) -> str:
    """Markdown, one row per variant: seeds run, seeds whose direction gate reads forward
    (mean g > 0.5 on the first split), median greedy valid accuracy after the first epoch (how
    fast it learns), median test accuracy at each split, seeds reaching >= 95 at every split."""
    splits = splits or table_splits([r for r in records if r["task"] == task and r["arch"] == arch])
    lines = [
        "| variant | seeds | forward (g > 0.5) | valid after epoch 1 | "
        + " / ".join(split_label(s) for s in splits)
        + " | >= 95 at every length |",
        "| --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for name in names:
        runs = [
            r
            for r in records
            if r["task"] == task
            and r["arch"] == arch
            and r["variant"] == name
            and (seeds is None or r["seed"] in seeds)
        ]
        if not runs:
            continue
        gates = [(r.get("direction_gate") or {}).get(splits[0]) for r in runs]
        forward = f"{sum(g > 0.5 for g in gates if g is not None)}" if any(g is not None for g in gates) else "-"
        first = [r["valid_accuracy"][0] for r in runs if r.get("valid_accuracy")]
        first_text = f"{statistics.median(first):.4g}" if first else "-"
        tests = " / ".join(f"{statistics.median(r['splits'][s]['accuracy'] for r in runs):.4g}" for s in splits)
        solved = sum(all(r["splits"][s]["accuracy"] >= 95 for s in splits) for r in runs)
        lines.append(f"| {name} | {len(runs)} | {forward} | {first_text} | {tests} | {solved} |")
    return "\n".join(lines)


def compare(
    task: str,
    arch: str,
    seeds: Sequence[int],
    variants: Dict[str, Tuple[str, ...]],
    max_epoch: int,
    work: Path,
    results: Path,
    jobs: int = 1,
    data_seed: int = 1,
    stop_after_perfect: int = 0,
    user_dir: Optional[str] = None,
    log=print,
    nice: int = 0,
) -> Tuple[str, Dict[str, str]]:
    """Run what is missing; (the side-by-side table and the per-variant summary, the outcome of
    each run)."""
    specs = comparison_specs(task, arch, seeds, variants, max_epoch, data_seed, stop_after_perfect, user_dir)
    outcome = run_local(specs, work, results, jobs=jobs, log=log, nice=nice)
    records, _ = read_records(results)
    mine = [r for r in records if r["task"] == task and r["arch"] == arch and r["variant"] in variants]
    return (
        comparison_table(mine, task, arch, list(variants), seeds)
        + "\n\n"
        + variant_summary(mine, task, arch, list(variants), seeds)
    ), outcome
