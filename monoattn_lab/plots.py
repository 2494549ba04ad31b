"""Accuracy against test length, one picture per task: one line per model (the median over
seeds), the range of the seeds shaded, the paper's training lengths marked.  Given several
variants, one line per model and variant.

    fairseq-monoattn-aggregate tables --results results/paper --plots docs/figures
    fairseq-monoattn-aggregate variants default no-pos --results results/transformer --plots FIGURES
"""

import re
from pathlib import Path
from typing import Dict, List, Sequence, Union

from fairseq_monoattn.attention_plots import pyplot
from fairseq_monoattn.catalog import TASKS, title

from .aggregate import collect
from .spec import DEFAULT_VARIANT


def length_of(split: str):
    """test15 -> 15; test_iid and others -> None."""
    found = re.fullmatch(r"test(\d+)", split)
    return int(found.group(1)) if found else None


Variants = Union[str, Sequence[str]]


def as_list(variant: Variants) -> List[str]:
    """One variant's name or several -> the list of names."""
    return [variant] if isinstance(variant, str) else list(variant)


def curves(records: Sequence[dict], task: str, variant: Variants = DEFAULT_VARIANT) -> Dict[str, List[tuple]]:
    """{line: [(length, median, lowest seed, highest seed, seeds)]} for one task, by length; a line
    is a model (arch), or with several variants "arch · variant"."""
    import statistics

    variants = as_list(variant)
    result = {}
    for name in variants:
        for (cell_task, arch), cell in collect(records, name).items():
            if cell_task != task:
                continue
            points = []
            for split in cell.splits():
                length = length_of(split)
                values = cell.values(split)
                if length is not None and values:
                    points.append((length, statistics.median(values), min(values), max(values), len(values)))
            if points:
                result[arch if len(variants) == 1 else f"{arch} · {name}"] = sorted(points)
    return result


def plot_task(records: Sequence[dict], task: str, out: Path, variant: Variants = DEFAULT_VARIANT) -> Path:
    lines = curves(records, task, variant)
    if not lines:
        raise ValueError(f"no records of {task} ({variant}) with test lengths")
    return draw_lines(
        {arch.replace("gru_", ""): points for arch, points in lines.items()},
        task,
        out,
        "exact match % (median over seeds)",
    )


def draw_lines(
    lines: Dict[str, List[tuple]], task: str, out: Path, ylabel: str, name: str = "length", log_lengths: bool = True
) -> Path:
    """OUT/NAME_TASK.png: a line per label of ``lines`` ({label: [(length, median, lowest, highest,
    seeds)]}), the range of the seeds shaded, the task's training lengths marked; lengths on a log
    scale unless ``log_lengths`` is False."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.2))
    draw_medians(axis, lines)
    train_lengths = TASKS[task].train_lengths if task in TASKS else None
    if train_lengths:
        axis.axvspan(*train_lengths, color="grey", alpha=0.1, label="training lengths")
    if log_lengths:
        axis.set_xscale("log")
    all_lengths = sorted({p[0] for points in lines.values() for p in points})
    axis.set_xticks(all_lengths)
    axis.set_xticklabels([str(n) for n in all_lengths])
    axis.set_ylim(-2, 102)
    axis.set_xlabel("test length")
    axis.set_ylabel(ylabel)
    seeds = max(p[4] for points in lines.values() for p in points)
    axis.set_title(f"{title(task)}: accuracy against length (up to {seeds} seed{'s' * (seeds > 1)}, range shaded)")
    axis.legend(fontsize=7, ncol=2, loc="center left", bbox_to_anchor=(1.0, 0.5))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}_{task}.png"
    figure.savefig(path, dpi=110, bbox_inches="tight")  # the legend right of the axes and the title included
    plt.close(figure)
    return path


def plot_all(records: Sequence[dict], out: Path, variant: Variants = DEFAULT_VARIANT) -> List[Path]:
    """One picture per task that has records at two or more test lengths."""
    variants = set(as_list(variant))
    tasks = sorted({r["task"] for r in records if r["variant"] in variants})
    paths = []
    for task in tasks:
        lines = curves(records, task, variant)
        if lines and max(len(points) for points in lines.values()) >= 2:
            paths.append(plot_task(records, task, out, variant))
    return paths


def draw_medians(axis, lines: Dict[str, List[tuple]], colors: Dict[str, object] = None) -> None:
    """A line per label of ``lines`` ({label: [(x, median, lowest, highest, seeds)]}) on ``axis``,
    the range of the seeds shaded; ``colors``: {label: colour}, to keep a label's colour across axes."""
    colors = colors or {}
    for label in sorted(lines):
        xs, median, low, high, _ = zip(*lines[label])
        (line,) = axis.plot(xs, median, marker="o", markersize=3, label=label, color=colors.get(label))
        axis.fill_between(xs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)


def draw_panels(panels: Dict[str, Dict[str, List[tuple]]], xlabel: str, ylabel: str, heading: str, path: Path) -> Path:
    """``path`` (PNG): one panel per entry of ``panels`` ({panel title: lines as draw_medians takes}) side by
    side, on one y scale, each label in one colour in every panel, one legend."""
    plt = pyplot()
    labels = sorted({label for lines in panels.values() for label in lines})
    palette = plt.get_cmap("tab20")
    colors = {label: palette(i % 20) for i, label in enumerate(labels)}
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), sharey=True, squeeze=False)
    for axis, (name, lines) in zip(axes[0], panels.items()):
        draw_medians(axis, lines, colors)
        xs = sorted({p[0] for points in lines.values() for p in points})
        axis.set_xticks(xs)
        axis.set_xticklabels([str(x) for x in xs])
        axis.set_ylim(-2, 102)
        axis.set_xlabel(xlabel)
        axis.set_title(name, fontsize=9)
    axes[0][0].set_ylabel(ylabel)
    figure.suptitle(heading, fontsize=10)
    handles = {h.get_label(): h for axis in axes[0] for h in axis.get_legend_handles_labels()[0]}
    axes[0][-1].legend(
        [handles[label] for label in labels], labels, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path
