"""The workbench: the paper's GRU models, the same with noise in the encoder's state, fairseq's
Transformer under each position scheme and its location presets, in one table whose columns are the
paper's probing tasks, the transduction tasks of Delétang et al. (ICLR 2023) and the SCAN length
cutoffs of Newman et al. (2020).

    fairseq-monoattn-sweep run workbench-benchmark-gru --jobs 2       # one block: columns x rows
    fairseq-monoattn-aggregate workbench --update RESULTS.md           # the table, from the records

A block is one group of columns (:data:`BLOCKS`) against one group of rows (:data:`ROW_GROUPS`),
and one sweep (``workbench-BLOCK-GROUP``).  Every model of a block trains on the block's budget
with the same seeds; the table says where seeds are missing.  The paper's GRU models on the
probing tasks are the ``table2`` sweep's runs (the same budget), which the table reads where they
are.  What a cell shows is the block's ``measure``, the median over seeds.
"""

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_monoattn.catalog import DELETANG_TASKS, DELETANG_TEST_SPLITS, PROBING_TASKS, SCAN_CUTOFFS, TASKS, title
from fairseq_monoattn.metrics import mean_per_token_accuracy

WORKBENCH_RESULTS = "results/workbench"
WORKBENCH_SEEDS = (1, 2, 3)
SOLVED = 90.0  # Delétang et al.'s mark: per-token accuracy >= 90 % averaged over the test lengths
FITTED = 95.0  # below this exact match at the training lengths (Block.fit) a cell is marked


@dataclass(frozen=True)
class Row:
    """A model of the table: a preset and the options (named by ``variant``) it trains with."""

    label: str
    arch: str
    variant: str = "default"
    options: Tuple[str, ...] = ()


STATE_NOISE = ("--encoder-state-noise", "0.2")
GRU_MODELS = (
    ("Content", "gru_content"),
    ("Relative", "gru_relative"),
    ("OneStep", "gru_onestep"),
    ("MonoAttn", "gru_monoattn"),
    ("Mix MonoAttn PR", "gru_mix_monoattn_pr"),
)
POSITION_ROWS = (
    ("sinusoidal", "sinusoidal positions"),
    ("learned", "learned positions"),
    ("none", "no positions (NoPE)"),
    ("rope", "RoPE"),
    ("alibi", "ALiBi"),
    ("fire", "FIRE"),
    ("randomized", "randomized sinusoidal positions"),
)
ROW_GROUPS: Dict[str, Tuple[Row, ...]] = {
    "gru": tuple(Row(f"GRU {name}", arch) for name, arch in GRU_MODELS)
    + tuple(Row(f"GRU {name}, state noise 0.2", arch, "state-noise0.2", STATE_NOISE) for name, arch in GRU_MODELS),
    "positions": tuple(
        Row(f"Transformer, {label}", "transformer_small", f"positions-{scheme}", ("--positions", scheme))
        for scheme, label in POSITION_ROWS
    ),
    "location": (
        Row("Transformer OneStep (recency)", "transformer_onestep_recency"),
        Row("Transformer MonoAttn (recency)", "transformer_monoattn_recency"),
    ),
}
ROWS: Tuple[Row, ...] = tuple(row for rows in ROW_GROUPS.values() for row in rows)


@dataclass(frozen=True)
class Block:
    """A group of columns, the budget its runs train on and what its cells show."""

    name: str
    title: str
    tasks: Tuple[str, ...]
    max_epoch: Optional[int]  # None: the paper sweeps' budget (the probing tasks' runs of table2 are shared)
    measure: str  # "longest": exact match at the longest test length; "per_token": Delétang's score; "test"
    # the split drawn like the training examples, whose greedy exact match says whether a run fitted
    # its training lengths: "valid" (the best epoch's) where valid is i.i.d., else a test split
    fit_split: str = "valid"

    def value(self, record: dict, told: bool = False) -> Optional[float]:
        """The number a record gives this block's cell, None where the record lacks a split; with
        ``told``, the same measure of the outputs told each target's length (the scorer's length
        oracle), None where the record was scored before it was counted."""
        splits = record["splits"]
        if self.measure == "per_token":
            task = DELETANG_TASKS[record["task"]]
            try:
                return mean_per_token_accuracy(
                    splits, DELETANG_TEST_SPLITS, with_eos=task.accuracy_key == "per_token_accuracy_with_eos", told=told
                )
            except ValueError:
                return None
        split = splits.get(self.decision_split(record["task"]), {})
        return split.get("length_oracle_accuracy" if told else "accuracy")

    def decision_split(self, task: str) -> str:
        """The split of ``task`` whose outputs the length decisions count: the longest test length
        (Delétang's 500 for the per-token score) or, for a SCAN cutoff, the commands past it."""
        if self.measure == "per_token":
            return DELETANG_TEST_SPLITS[-1]
        return TASKS[task].length_splits[-1] if self.measure == "longest" else "test"

    def fit(self, record: dict) -> Optional[float]:
        """The record's exact match at its training lengths (:attr:`fit_split`), None if unknown."""
        if self.fit_split == "valid":
            return record.get("best_valid_accuracy")
        split = record["splits"].get(self.fit_split)
        return split["accuracy"] if split else None

    def heading(self, task: str) -> str:
        if self.measure == "longest":
            return f"{title(task)} ({TASKS[task].length_splits[-1][4:]})"
        return title(task).replace("SCAN (length cutoff ", "SCAN ≤").rstrip(")")


BENCHMARK_EPOCHS = 10  # 10,000 training examples an epoch in batches of 32: 3,130 updates
SCAN_CUTOFF_EPOCHS = 10
BLOCKS: Dict[str, Block] = {
    block.name: block
    for block in (
        # the probing tasks' valid split runs past the training lengths (10-15 against 5-10)
        Block("probing", "the paper's probing tasks: exact match % at the longest test length", PROBING_TASKS,
              None, "longest", fit_split="test_iid"),
        Block("benchmark", "Delétang et al.'s transduction tasks: per-token accuracy % over test lengths 50-500",
              tuple(DELETANG_TASKS), BENCHMARK_EPOCHS, "per_token"),
        Block("scan-cutoffs", "SCAN length cutoffs: exact match % of the commands longer than the cutoff",
              tuple(f"scan_cutoff{n}" for n in SCAN_CUTOFFS), SCAN_CUTOFF_EPOCHS, "test"),
    )
}  # fmt: skip


def sweep_name(block: str, group: str) -> str:
    return f"workbench-{block}-{group}"


def workbench_sweeps(sweep_class, paper_epochs: int, stop_after_perfect: int) -> List:
    """The sweeps (``sweep_class``: sweeps.Sweep) of every block, one per (block, row group); the
    paper's GRU models on the probing tasks are left to ``table2``, whose budget is ``paper_epochs``
    and whose early stop every block shares."""
    sweeps = []
    for block in BLOCKS.values():
        for group, rows in ROW_GROUPS.items():
            if block.name == "probing" and group == "gru":
                rows = tuple(row for row in rows if row.variant != "default")
            archs = tuple(dict.fromkeys(row.arch for row in rows))
            variants = tuple(dict.fromkeys((row.variant, row.options) for row in rows))
            sweeps.append(
                sweep_class(
                    sweep_name(block.name, group),
                    f"{block.title}; {group} rows",
                    tuple((task, arch) for task in block.tasks for arch in archs),
                    seeds=WORKBENCH_SEEDS,
                    max_epoch=block.max_epoch or paper_epochs,
                    stop_after_perfect=stop_after_perfect,
                    variants=variants,
                    results=WORKBENCH_RESULTS,
                )
            )
    return sweeps


# --- the table ----------------------------------------------------------------------------------


class Records:
    """The records of the sweeps' results folders, each folder read once: ``of(folder)`` maps a
    record's path to the record; ``problems`` lists the files that could not be read."""

    def __init__(self):
        self.folders: Dict[str, Dict[str, dict]] = {}
        self.problems: List[str] = []

    def of(self, folder: Path) -> Dict[str, dict]:
        from .records import read_records
        from .spec import record_place

        if str(folder) not in self.folders:
            records, problems = read_records(folder) if Path(folder).is_dir() else ([], [])
            self.problems += problems
            self.folders[str(folder)] = {
                str(record_place(folder, r["task"], r["arch"], r["variant"], r["seed"])): r for r in records
            }
        return self.folders[str(folder)]


def cell_records(records: Records, sweeps: Sequence, row: Row, task: str) -> List[dict]:
    """The records of ``row`` on ``task`` that the first sweep with that cell made (its budget,
    options and seeds: a record of another budget in its place is not the cell's)."""
    from .records import check_record_matches
    from .spec import RunError

    for sweep in sweeps:
        specs = [s for s in sweep.specs() if (s.task, s.arch, s.variant) == (task, row.arch, row.variant)]
        if not specs:
            continue
        folder = sweep.results_folder(Path("work"))
        found = []
        for spec in specs:
            record = records.of(folder).get(str(spec.record_path(folder)))
            if record is None:
                continue
            try:
                check_record_matches(record, spec, spec.record_path(folder))
            except RunError:
                continue
            found.append(record)
        return found
    return []


def table_sweeps() -> List:
    """The sweeps whose records the table reads: table2 (the paper's GRU models on the probing
    tasks) and the workbench's."""
    from .sweeps import SWEEPS

    return [SWEEPS["table2"]] + [sweep for name, sweep in SWEEPS.items() if name.startswith("workbench-")]


def render(records: Records, sweeps: Sequence, field_rows: Sequence = (), plots: Dict[str, str] = None) -> str:
    """The workbench's tables in Markdown: one per block, every row, and under ours the published
    numbers of the field (``field_rows``: field_values.FieldValue), marked as theirs; ``plots``:
    {task: the path of its picture, relative to the file}."""
    plots = plots or {}
    lines = []
    for block in BLOCKS.values():
        seeds = len(WORKBENCH_SEEDS)
        budget = next(s for s in sweeps if s.name.startswith(f"workbench-{block.name}-"))
        lines += [
            f"#### {block.title[0].upper()}{block.title[1:]}",
            "",
            f"Budget: at most {budget.max_epoch} epochs, stopping once greedy valid accuracy has been 100 for "
            f"{budget.stop_after_perfect} epochs; seeds {', '.join(map(str, WORKBENCH_SEEDS))}; the median over "
            f"the seeds, with (k/{seeds}) where only k seeds have records; – not run yet."
            + (f" **Bold**: solved (at least {SOLVED:g})." if block.measure == "per_token" else "")
            + " †: the runs did not fit the training lengths (the median of their greedy exact match on "
            + ("the best epoch's i.i.d. valid split" if block.fit_split == "valid" else f"the split {block.fit_split}")
            + f" is below {FITTED:g}), so the cell says little of length generalization.",
            "",
            "| model | " + " | ".join(block.heading(task) for task in block.tasks) + " |",
            "|---|" + "---:|" * len(block.tasks),
        ]
        for row in ROWS:
            cells = []
            for task in block.tasks:
                found = cell_records(records, sweeps, row, task)
                values = [v for v in (block.value(r) for r in found) if v is not None]
                cells.append(
                    format_cell(values, seeds, block.measure == "per_token") + unfitted_mark(block, found, values)
                )
            lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
        for published in field_rows:
            if published.task in block.tasks:
                cells = [f"{published.value:g} (theirs)" if task == published.task else "" for task in block.tasks]
                where = f"{published.source}, {published.table}, p. {published.page}"
                lines.append(f"| *{published.model} ({where})* | " + " | ".join(cells) + " |")
        lines.append("")
        lines += length_decisions(records, sweeps, block)
        lines += told_the_length(records, sweeps, block)
        pictures = [task for task in block.tasks if task in plots]
        lines += [f"![{title(task)}: accuracy against length]({plots[task]})\n" for task in pictures]
        if block.name in plots:
            lines.append(f"![{block.title.split(':')[0]}: exact match against the cutoff]({plots[block.name]})\n")
    return "\n".join(lines)


DECISION_SPLITS = {
    "longest": "at the longest test length of each column",
    "per_token": f"at length {DELETANG_TEST_SPLITS[-1][4:]}",
    "test": "on the commands longer than the cutoff",
}


def length_decisions(records: Records, sweeps: Sequence, block: Block) -> List[str]:
    """Where long outputs go wrong: per row and task, the outputs of the block's
    :meth:`Block.decision_split` that are right but stop too early (a proper prefix of the target:
    the end-of-sequence decision of Newman et al., 2020, not the reading, fails) and those that
    give the whole target and go on, % of the split, the median over seeds."""
    lines = [
        f"Outputs {DECISION_SPLITS[block.measure]} that are right but stop too early (a proper prefix of the "
        "target) / that give the whole target and go on (% of the split, median over seeds): where the first "
        "is high, the model reads right and its end-of-sequence decision fails; – where no record has these "
        "counts (not run, or scored before they were counted).",
        "",
        "| model | " + " | ".join(block.heading(task) for task in block.tasks) + " |",
        "|---|" + "---:|" * len(block.tasks),
    ]
    for row in ROWS:
        cells = []
        for task in block.tasks:
            shares = [
                (100 * split["cut_short"] / split["size"], 100 * split["overran"] / split["size"])
                for split in (
                    r["splits"].get(block.decision_split(task)) for r in cell_records(records, sweeps, row, task)
                )
                if split and split.get("size") and "cut_short" in split and "overran" in split
            ]
            cells.append(
                f"{statistics.median(c for c, _ in shares):.0f} / {statistics.median(o for _, o in shares):.0f}"
                if shares
                else "–"
            )
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    return lines + [""]


TOLD_MEASURES = {
    "longest": "Exact match % at the longest test length of each column",
    "per_token": "Per-token accuracy % over test lengths 50-500 (Delétang et al.'s models always write the answer's "
    "length)",
    "test": "Exact match % on the commands longer than the cutoff",
}


def told_the_length(records: Records, sweeps: Sequence, block: Block) -> List[str]:
    """Each cell's measure (:meth:`Block.value`) of the outputs told each target's length (the length
    oracle of Newman et al., 2020), per row and task, the median over seeds; no table where no
    record of the block has it (records scored before it was counted)."""
    cells, counted = {}, False
    for row in ROWS:
        for task in block.tasks:
            found = cell_records(records, sweeps, row, task)
            values = [v for v in (block.value(r, told=True) for r in found) if v is not None]
            cells[row, task] = format_cell(values, len(WORKBENCH_SEEDS), block.measure == "per_token")
            cells[row, task] += unfitted_mark(block, found, values)
            counted = counted or bool(values)
    if not counted:
        return []
    lines = [
        f"{TOLD_MEASURES[block.measure]}, when the decoding is told each target's length (EOS forbidden before it "
        "and forced at it: the oracle of Newman et al., 2020), the median over seeds; – where the records were "
        "scored before it was counted; bold and † as above.",
        "",
        "| model | " + " | ".join(block.heading(task) for task in block.tasks) + " |",
        "|---|" + "---:|" * len(block.tasks),
    ]
    lines += [f"| {row.label} | " + " | ".join(cells[row, task] for task in block.tasks) + " |" for row in ROWS]
    return lines + [""]


def unfitted_mark(block: Block, found: Sequence[dict], values: Sequence[float]) -> str:
    """ " †" where a cell with ``values`` stands on runs (``found``) that did not fit their training
    lengths (the median of :meth:`Block.fit` below FITTED), else ""."""
    fitted = [v for v in map(block.fit, found) if v is not None]
    return " †" if values and fitted and statistics.median(fitted) < FITTED else ""


def format_cell(values: Sequence[float], seeds: int, bold: bool = False) -> str:
    """The median of ``values`` (one a seed) to one decimal, bold where it is solved (``bold``),
    with (k/seeds) where fewer seeds than the block's have values; – where none has."""
    if not values:
        return "–"
    median = statistics.median(values)
    text = f"**{median:.1f}**" if bold and median >= SOLVED else f"{median:.1f}"
    return text if len(values) >= seeds else f"{text} ({len(values)}/{seeds})"


def length_curves(records: Records, sweeps: Sequence, task: str) -> Dict[str, List[tuple]]:
    """{row label: [(length, median, lowest, highest, seeds)]}: each row's score at each test length
    of ``task`` (per-token accuracy for Delétang et al.'s tasks, exact match otherwise)."""
    from .plots import length_of

    key = DELETANG_TASKS[task].accuracy_key if task in DELETANG_TASKS else "accuracy"
    lines = {}
    for row in ROWS:
        by_length: Dict[int, List[float]] = {}
        for record in cell_records(records, sweeps, row, task):
            for split, scores in record["splits"].items():
                if length_of(split) is not None and key in scores:
                    by_length.setdefault(length_of(split), []).append(scores[key])
        points = [(n, statistics.median(v), min(v), max(v), len(v)) for n, v in sorted(by_length.items())]
        if len(points) >= 2:
            lines[row.label] = points
    return lines


def cutoff_curves(records: Records, sweeps: Sequence, key: str = "accuracy") -> Dict[str, List[tuple]]:
    """{row label: [(cutoff, median, lowest, highest, seeds)]}: each row's exact match (``key``:
    "accuracy", or "length_oracle_accuracy" told each target's length) on the commands past each
    SCAN cutoff its records have it for; rows at fewer than two cutoffs are left out."""
    block = BLOCKS["scan-cutoffs"]
    lines = {}
    for row in ROWS:
        points = []
        for cutoff, task in zip(SCAN_CUTOFFS, block.tasks):
            found = (
                r["splits"].get(block.decision_split(task)) or {} for r in cell_records(records, sweeps, row, task)
            )
            values = [split[key] for split in found if key in split]
            if values:
                points.append((cutoff, statistics.median(values), min(values), max(values), len(values)))
        if len(points) >= 2:
            lines[row.label] = points
    return lines


def plot_lengths(records: Records, sweeps: Sequence, out: Path) -> Dict[str, Path]:
    """OUT/workbench_TASK.png for every benchmark task with a row at two or more test lengths, and
    OUT/workbench_scan_cutoffs.png (key "scan-cutoffs") where a row has two or more SCAN cutoffs:
    exact match against the cutoff, greedy and told each target's length."""
    from .plots import draw_lines, draw_panels

    pictures = {}
    for task in BLOCKS["benchmark"].tasks:
        lines = length_curves(records, sweeps, task)
        if lines:
            pictures[task] = draw_lines(
                lines, task, out, "per-token accuracy % (median over seeds)", "workbench", log_lengths=False
            )
    greedy = cutoff_curves(records, sweeps)
    if greedy:
        panels = {
            "greedy": greedy,
            "told each target's length": cutoff_curves(records, sweeps, "length_oracle_accuracy"),
        }
        pictures["scan-cutoffs"] = draw_panels(
            panels,
            "cutoff (longest action sequence in training)",
            "exact match % past the cutoff (median over seeds)",
            "SCAN length cutoffs: exact match against the cutoff",
            out / "workbench_scan_cutoffs.png",
        )
    return pictures
