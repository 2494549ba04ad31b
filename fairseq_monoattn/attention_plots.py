"""Render a trained model's cross-attention for one input as a PNG heat map (the command is
``fairseq-monoattn-plot-attention``, ``cli/plot_attention.py``).

Rows are output steps (labelled with the output tokens, </s> included), columns the source
positions the decoder attends over: START, the tokens, </s>, END (no </s> for a model trained
with --source-eos False; listed right to left when a model's direction gate reads the reversed
encodings, g < 0.5).  Each model decodes the source greedily (beam 1) unless --target forces an
output.  An existing --out is never replaced without --force.
"""

import math
from pathlib import Path

from .files import atomic_output

DPI = 100
CELL_INCHES = 0.32  # one matrix cell, for small maps
MAX_PANEL_INCHES = 14.0  # long inputs shrink the cells instead of growing further
MAX_TICKS = 60  # beyond this many labels on an axis, show every k-th one
MARGIN_INCHES = (1.6, 1.4)  # room for tick labels, axis titles and the colour bar (w, h)


def pyplot():
    """matplotlib.pyplot on the Agg backend (imported here: the package works without matplotlib)."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # it logs its set-up at DEBUG
    import matplotlib

    matplotlib.use("Agg")  # no display here; must precede pyplot
    import matplotlib.pyplot as plt

    return plt


# -- layout ----------------------------------------------------------------------------


def panel_inches(rows: int, cols: int):
    """(width, height) of one heat map: square cells, capped for long inputs."""
    width = min(max(cols * CELL_INCHES, 2.5), MAX_PANEL_INCHES)
    height = min(max(rows * CELL_INCHES, 2.0), MAX_PANEL_INCHES)
    return width, height


def figure_inches(shapes):
    """Figure size for panels of the given (rows, cols) shapes, side by side."""
    sizes = [panel_inches(rows, cols) for rows, cols in shapes]
    width = sum(w for w, _ in sizes) + MARGIN_INCHES[0] * len(sizes) + 0.9  # + colour bar
    height = max(h for _, h in sizes) + MARGIN_INCHES[1] + 0.5 * (len(sizes) > 1)
    return round(width, 2), round(height, 2)


def expected_pixels(shapes):
    """(width, height) in pixels of the PNG for these panel shapes."""
    width, height = figure_inches(shapes)
    return round(width * DPI), round(height * DPI)


def tick_positions(count: int, max_ticks: int = MAX_TICKS):
    """Every k-th index so that at most ~max_ticks are shown; the last one always is."""
    step = max(1, math.ceil(count / max_ticks))
    ticks = list(range(0, count, step))
    if ticks[-1] != count - 1:
        if count - 1 - ticks[-1] < step / 2:
            ticks.pop()  # too close to the last label: it would overlap
        ticks.append(count - 1)
    return ticks, step > 1


def set_ticks(axis_set_ticks, axis_set_labels, labels, rotate=False):
    """Tick labels on one axis, thinned (and numbered) for long label lists."""
    ticks, thinned = tick_positions(len(labels))
    # thinned labels carry their index, or "7" at row 120 would say little
    texts = [f"{labels[i]} ({i})" if thinned else labels[i] for i in ticks]
    axis_set_ticks(ticks)
    axis_set_labels(texts, rotation=90 if rotate else 0, fontsize=8 if thinned or len(labels) > 30 else 9)


# -- drawing ---------------------------------------------------------------------------


def panel_title(result, label):
    """The panel's name, then the direction gate and a cut output, if any."""
    parts = [label or result.architecture]
    if result.direction is not None:
        parts.append(f"direction gate g={result.direction:.2f}")
    if result.eos_forced:
        parts.append("cut at the length limit")
    return "\n".join([parts[0], ", ".join(parts[1:])]) if len(parts) > 1 else parts[0]


def draw_panel(ax, result, label, vmax):
    """One heat map of ``result`` on ``ax``; returns the image (for the colour bar)."""
    image = ax.imshow(result.matrix, cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
    set_ticks(ax.set_xticks, ax.set_xticklabels, result.attended_labels, rotate=True)
    set_ticks(ax.set_yticks, ax.set_yticklabels, result.output_labels)
    ax.set_xlabel("source position, read reversed (g < 0.5)" if result.reads_reversed else "source position")
    ax.set_ylabel("output step" + (" (forced target)" if result.forced else ""))
    ax.set_title(panel_title(result, label), fontsize=10)
    return image


def render(results, labels, out: Path, title=None):
    """Heat maps of ``results`` side by side (one colour scale) written as PNG to ``out``."""
    plt = pyplot()
    shapes = [r.matrix.shape for r in results]
    widths = [panel_inches(*shape)[0] + MARGIN_INCHES[0] for shape in shapes]
    fig, axes = plt.subplots(
        1,
        len(results),
        figsize=figure_inches(shapes),
        dpi=DPI,
        squeeze=False,
        layout="constrained",
        gridspec_kw={"width_ratios": widths},
    )
    vmax = max(float(r.matrix.max()) for r in results) or 1.0
    for ax, result, label in zip(axes[0], results, labels):
        image = draw_panel(ax, result, label, vmax)
    fig.colorbar(image, ax=list(axes[0]), label="attention weight", shrink=0.9)
    if title:
        fig.suptitle(title)
    try:
        save_png(fig, Path(out))
    finally:
        plt.close(fig)


def save_png(fig, out: Path):
    """Write to a temporary sibling, then rename: never a half-written --out."""
    with atomic_output(out, suffix=".png") as temporary:
        fig.savefig(temporary, format="png", dpi=DPI)
