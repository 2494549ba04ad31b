"""The field's published numbers on the tasks the lab shares with other papers, read from
``field_values.tsv`` (beside this module; its header says what each source is, where each value
was read, and what each paper states of its protocol).

The file holds one value a line: the source (a key of :data:`SOURCES`), the source's table and
page, the task (of the catalog, and of the tasks that source reports), the model as the source
prints it, the measure (the one that source reports), the value in percent, and where it was read
(a URL, or ``owner/repo:path``).  :func:`read_field_values` checks every line and refuses a bad one
with a one-line :class:`FieldValuesError` naming the file and line; :func:`field_values` gives the
shipped file's rows (read once).
"""

import functools
import math
import re
from pathlib import Path
from typing import Dict, NamedTuple, Optional, Tuple

from fairseq_monoattn.catalog import DELETANG_TASKS, SCAN_CUTOFFS, TASKS
from fairseq_monoattn.errors import PluginError

FIELD_VALUES_FILE = Path(__file__).with_name("field_values.tsv")
COLUMNS = ("source", "table", "page", "task", "model", "measure", "value", "read_from")
MEASURES = ("per_token_accuracy", "exact_match")
SCAN_CUTOFF_TASKS = tuple(f"scan_cutoff{cutoff}" for cutoff in SCAN_CUTOFFS)


class Source(NamedTuple):
    """A paper: the measure its tables report and the catalog tasks it reports them on."""

    citation: str
    measure: str
    tasks: Tuple[str, ...]


SOURCES: Dict[str, Source] = {
    "deletang2023": Source(
        "Deletang et al., Neural Networks and the Chomsky Hierarchy, ICLR 2023",
        "per_token_accuracy",
        tuple(DELETANG_TASKS),
    ),
    "ruoss2023": Source(
        "Ruoss et al., Randomized Positional Encodings Boost Length Generalization of Transformers, ACL 2023",
        "per_token_accuracy",
        tuple(DELETANG_TASKS),
    ),
    "newman2020": Source(
        "Newman et al., The EOS Decision and Length Extrapolation, BlackboxNLP 2020",
        "exact_match",
        SCAN_CUTOFF_TASKS,
    ),
    "csordas2021": Source(
        "Csordas et al., The Devil is in the Detail: Simple Tricks Improve Systematic Generalization of "
        "Transformers, EMNLP 2021",
        "exact_match",
        SCAN_CUTOFF_TASKS,
    ),
}

# where a value was read: a web address, or a file of a public repository
READ_FROM = re.compile(r"https?://\S+|[\w.-]+/[\w.-]+:\S+")


class FieldValuesError(PluginError, ValueError):
    """A line of the field's values file that cannot be read; the message names the file and line."""


class FieldValue(NamedTuple):
    """One line of the file."""

    source: str
    table: str
    page: str
    task: str
    model: str
    measure: str
    value: float
    read_from: str
    line: int


def _row(fields, where: str) -> FieldValue:
    source, table, page, task, model, measure, value_text, read_from = fields
    if source not in SOURCES:
        raise FieldValuesError(f"{where}: unknown source {source!r}; known: {', '.join(SOURCES)}")
    facts = SOURCES[source]
    for column, text in (("table", table), ("page", page), ("model", model)):
        if not text.strip():
            raise FieldValuesError(f"{where}: no {column}")
    if task not in TASKS:
        raise FieldValuesError(f"{where}: unknown task {task!r}")
    if task not in facts.tasks:
        raise FieldValuesError(f"{where}: {source} reports no values on {task}; its tasks: {', '.join(facts.tasks)}")
    if measure not in MEASURES:
        raise FieldValuesError(f"{where}: unknown measure {measure!r}; known: {', '.join(MEASURES)}")
    if measure != facts.measure:
        raise FieldValuesError(f"{where}: {source} reports {facts.measure}, not {measure}")
    try:
        value = float(value_text)
    except ValueError:
        raise FieldValuesError(f"{where}: value {value_text!r} is not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= 100.0:
        raise FieldValuesError(f"{where}: value {value_text} is outside 0..100 (a percentage)")
    if not READ_FROM.fullmatch(read_from):
        raise FieldValuesError(f"{where}: read_from {read_from!r} is neither a URL nor owner/repo:path")
    return FieldValue(source, table, page, task, model, measure, value, read_from, 0)


def read_field_values(path: Path = FIELD_VALUES_FILE) -> Tuple[FieldValue, ...]:
    """Every row of ``path``, each line checked; a FieldValuesError at the first bad one."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise FieldValuesError(f"{path}: cannot read the field's values: {error}") from None
    rows, seen, header = [], {}, False
    for number, line in enumerate(lines, 1):
        where = f"{path}, line {number}"
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if not header:
            if tuple(fields) != COLUMNS:
                raise FieldValuesError(
                    f"{where}: the header must be the columns {', '.join(COLUMNS)} (tab-separated), got "
                    f"{', '.join(fields)}"
                )
            header = True
            continue
        if len(fields) != len(COLUMNS):
            raise FieldValuesError(
                f"{where}: {len(fields)} tab-separated fields, the header has {len(COLUMNS)} ({', '.join(COLUMNS)})"
            )
        row = _row(fields, where)._replace(line=number)
        cell = (row.source, row.table, row.task, row.model, row.measure)
        if cell in seen:
            raise FieldValuesError(f"{where}: {' '.join(cell)} is there already (line {seen[cell]})")
        seen[cell] = number
        rows.append(row)
    if not header:
        raise FieldValuesError(f"{path}: no header line ({', '.join(COLUMNS)})")
    return tuple(rows)


@functools.lru_cache(maxsize=None)
def _shipped() -> Tuple[FieldValue, ...]:
    return read_field_values(FIELD_VALUES_FILE)


def field_values(task: Optional[str] = None, source: Optional[str] = None) -> Tuple[FieldValue, ...]:
    """The shipped file's rows (read once), those of one task and/or one source where given."""
    if task is not None and task not in TASKS:
        raise ValueError(f"unknown task {task!r}")
    if source is not None and source not in SOURCES:
        raise ValueError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    return tuple(
        row for row in _shipped() if (task is None or row.task == task) and (source is None or row.source == source)
    )
