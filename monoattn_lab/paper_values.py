"""The numbers the paper reports, read from ``paper_values.tsv`` (beside this module; its header
says where each table is in the paper), and how a value is judged against them.

The file holds one value a line: the paper's table (its LaTeX label), task, model, split, value
and std.  :func:`paper_values` reads it once, checking every line (a known table, a task and split
of the catalog, a number in range, a std exactly where the paper reports mean ± std, one value per
cell); a bad line is refused with a one-line :class:`PaperValuesError` naming the file and line.

Values are floats, or (mean, std) tuples for the tasks the paper summarises by mean ± std (SCAN,
CFQ).  Where a cell is in two tables (the OneStepAttn row of table:diagnostics and of
table:critical_ablation) the file has it twice, with the same value.
"""

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

from fairseq_monoattn.catalog import TASKS
from fairseq_monoattn.errors import PluginError

Value = Union[float, Tuple[float, float]]

PAPER_VALUES_FILE = Path(__file__).with_name("paper_values.tsv")
COLUMNS = ("table", "task", "model", "split", "value", "std")
NO_STD = "-"


class PaperTable(NamedTuple):
    """One of the paper's tables: the name the sweeps and docs give it (None for the edit
    distances, which are Table 2's cells in another metric) and the metric its values are."""

    name: Optional[str]
    metric: str


# the LaTeX labels of the paper's results tables, in the order the tables are kept (where a cell is in
# two of them, the first one's line is named when they disagree)
PAPER_TABLES: Dict[str, PaperTable] = {
    "table:diagnostics": PaperTable("table2", "accuracy"),
    "table:critical_ablation": PaperTable("table5", "accuracy"),
    "table:diagnostics_appendix": PaperTable("appendix", "accuracy"),
    "table:diagnostics3": PaperTable("table6", "accuracy"),
    "table:scan": PaperTable("table3-scan", "accuracy"),
    "table:scan_appendix": PaperTable("table3-scan", "accuracy"),
    "table:diagnostics2": PaperTable(None, "edit_distance"),
}
METRICS = ("accuracy", "edit_distance")


class PaperValuesError(PluginError, ValueError):
    """A line of the paper's values file that cannot be read; the message names the file and line."""


class PaperCell(NamedTuple):
    """One line of the file: a value of one of the paper's tables (by its LaTeX label)."""

    table: str
    task: str
    model: str
    split: str
    value: Value
    line: int


@dataclass(frozen=True)
class PaperValues:
    """The file's values: per metric ``{task: {model: {split: value}}}``; per table name the
    (task, model) cells it reports, in the file's order; and every line as a PaperCell."""

    by_metric: Dict[str, Dict[str, Dict[str, Dict[str, Value]]]]
    tables: Dict[str, List[Tuple[str, str]]]
    cells: Tuple[PaperCell, ...]

    @property
    def accuracy(self) -> dict:
        return self.by_metric["accuracy"]

    @property
    def edit_distance(self) -> dict:
        return self.by_metric["edit_distance"]

    def value(self, task: str, model: str, split: str, metric: str = "accuracy") -> Optional[Value]:
        if metric not in self.by_metric:
            raise ValueError(f"metric must be one of {sorted(self.by_metric)}, got {metric!r}")
        return self.by_metric[metric].get(task, {}).get(model, {}).get(split)


def _number(text: str, column: str, where: str, least: float, most: float) -> float:
    try:
        number = float(text)
    except ValueError:
        raise PaperValuesError(f"{where}: {column} {text!r} is not a number") from None
    if not math.isfinite(number) or not least <= number <= most:
        raise PaperValuesError(f"{where}: {column} {text} is outside {least:g}..{most:g}")
    return number


def read_paper_values(path: Path = PAPER_VALUES_FILE) -> PaperValues:
    """Every value of ``path``, each line checked; a PaperValuesError at the first bad one."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise PaperValuesError(f"{path}: cannot read the paper's values: {error}") from None
    by_metric: Dict[str, dict] = {metric: {} for metric in METRICS}
    tables: Dict[str, List[Tuple[str, str]]] = {}
    cells: List[PaperCell] = []
    seen: Dict[Tuple[str, str, str, str], Tuple[Value, int, str]] = {}  # cell -> (value, line, table)
    header = None
    for number, line in enumerate(lines, 1):
        where = f"{path}, line {number}"
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if header is None:
            if tuple(fields) != COLUMNS:
                raise PaperValuesError(
                    f"{where}: the header must be the columns {', '.join(COLUMNS)} (tab-separated), got "
                    f"{', '.join(fields)}"
                )
            header = fields
            continue
        if len(fields) != len(COLUMNS):
            raise PaperValuesError(
                f"{where}: {len(fields)} tab-separated fields, the header has {len(COLUMNS)} ({', '.join(COLUMNS)})"
            )
        label, task, model, split, value_text, std_text = fields
        if label not in PAPER_TABLES:
            raise PaperValuesError(f"{where}: unknown table {label!r}; known: {', '.join(PAPER_TABLES)}")
        if task not in TASKS:
            raise PaperValuesError(f"{where}: unknown task {task!r}")
        facts = TASKS[task]
        if split not in facts.paper_splits:
            raise PaperValuesError(
                f"{where}: {task} has no split {split!r} in the paper; its splits: {', '.join(facts.paper_splits)}"
            )
        if not model:
            raise PaperValuesError(f"{where}: no model")
        table = PAPER_TABLES[label]
        most = 100.0 if table.metric == "accuracy" else math.inf
        mean = _number(value_text, "value", where, 0.0, most)
        if facts.mean_std and std_text == NO_STD:
            raise PaperValuesError(f"{where}: the paper reports mean ± std on {task}: the std is missing")
        if not facts.mean_std and std_text != NO_STD:
            raise PaperValuesError(f"{where}: the paper reports no std on {task}: the std must be {NO_STD!r}")
        value: Value = (mean, _number(std_text, "std", where, 0.0, most)) if facts.mean_std else mean
        cells.append(PaperCell(label, task, model, split, value, number))
        cell = (table.metric, task, model, split)
        if cell in seen:
            earlier, earlier_line, earlier_label = seen[cell]
            if earlier_label == label:
                raise PaperValuesError(f"{where}: {label} has {task} {model} {split} already (line {earlier_line})")
            if earlier != value:
                raise PaperValuesError(
                    f"{where}: {task} {model} {split} is {value_text} here but {earlier} in {earlier_label} "
                    f"(line {earlier_line}); one cell has one value"
                )
        else:
            seen[cell] = (value, number, label)
            by_metric[table.metric].setdefault(task, {}).setdefault(model, {})[split] = value
        if table.name is not None:
            pairs = tables.setdefault(table.name, [])
            if (task, model) not in pairs:
                pairs.append((task, model))
    if header is None:
        raise PaperValuesError(f"{path}: no header line ({', '.join(COLUMNS)}) and no values")
    labels = {label for _, _, label in seen.values()}
    missing = [label for label in PAPER_TABLES if label not in labels]
    if missing:
        raise PaperValuesError(f"{path}: no values of {', '.join(missing)}")
    return PaperValues(by_metric, tables, tuple(cells))


@functools.lru_cache(maxsize=None)
def paper_values() -> PaperValues:
    """The values of the file shipped with the package (read once)."""
    return read_paper_values(PAPER_VALUES_FILE)


def paper_value(task: str, arch: str, split: str, metric: str = "accuracy") -> Optional[Value]:
    """The paper's number (float or (mean, std)) or None where the paper reports none."""
    return paper_values().value(task, arch, split, metric)


def paper_cell(task: str, arch: str, split: str, metric: str = "accuracy") -> str:
    """The value as text: '100', '98.8', '0.05', '17.61 ± 4.07'; '' where none."""
    value = paper_value(task, arch, split, metric)
    if value is None:
        return ""
    if isinstance(value, tuple):
        mean, std = value
        return f"{mean:.2f} ± {std:.2f}"
    return f"{value:g}"


def verdict(value: float) -> str:
    """'solved' if value >= 95, 'failed' if value <= 5, else 'partial'."""
    if value >= 95:
        return "solved"
    if value <= 5:
        return "failed"
    return "partial"
