"""The field's published numbers (monoattn_lab/field_values.tsv): the shipped file reads clean and
says where each of its values was read, the reader refuses a bad line naming the file and line,
the filters, and that the package ships the file."""

from pathlib import Path

import pytest
from package_build import build_python_package

from fairseq_monoattn.catalog import TASKS
from monoattn_lab.field_values import (
    COLUMNS,
    FIELD_VALUES_FILE,
    READ_FROM,
    SOURCES,
    FieldValuesError,
    field_values,
    read_field_values,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
GOOD = ("csordas2021", "Table 9", "630", "scan_cutoff26", "Rel. Trafo", "exact_match", "99.5", "owner/repo:paper.tex")


def header_comment() -> str:
    lines = FIELD_VALUES_FILE.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if line.startswith("#"))


def test_the_shipped_file_reads_clean_and_every_row_names_where_it_was_read():
    rows = field_values()
    assert rows, "the shipped file has no values"
    assert rows == read_field_values(FIELD_VALUES_FILE)
    for row in rows:
        assert row.table.strip() and row.page.strip(), row
        assert READ_FROM.fullmatch(row.read_from), row
        assert row.task in SOURCES[row.source].tasks and row.measure == SOURCES[row.source].measure, row
        # the line the row says it is on holds its cells
        line = FIELD_VALUES_FILE.read_text(encoding="utf-8").splitlines()[row.line - 1].split("\t")
        assert line[:6] == [row.source, row.table, row.page, row.task, row.model, row.measure]
        assert float(line[6]) == row.value


def test_the_header_describes_every_source_and_what_it_reports():
    """Each source key has its block in the file's header (its citation and protocol), and the
    sources' task families are the catalog's: the Deletang tasks score per token, SCAN cutoffs by
    exact match."""
    comment = header_comment()
    for key in SOURCES:
        assert f"# {key}  " in comment, f"the header has no block for {key}"
    deletang = {
        "reverse_string",
        "duplicate_string",
        "odds_first",
        "bucket_sort",
        "binary_addition",
        "stack_manipulation",
    }
    for key in ("deletang2023", "ruoss2023"):
        assert set(SOURCES[key].tasks) == deletang and SOURCES[key].measure == "per_token_accuracy"
    for key in ("newman2020", "csordas2021"):
        assert "scan_cutoff26" in SOURCES[key].tasks and SOURCES[key].measure == "exact_match"
        assert all(task.startswith("scan_cutoff") and task in TASKS for task in SOURCES[key].tasks)


def write(tmp_path, *rows, header=COLUMNS):
    """A values file: a comment, the header, then ``rows`` (tuples of fields, or raw lines)."""
    lines = ["# a comment", "\t".join(header)]
    lines += [row if isinstance(row, str) else "\t".join(row) for row in rows]
    path = tmp_path / "field_values.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_good_file_reads_as_written(tmp_path):
    other = GOOD[:4] + ("Rel. Uni. Trafo",) + GOOD[5:6] + ("100",) + ("https://example.org/paper.pdf",)
    rows = read_field_values(write(tmp_path, GOOD, other))
    assert [(row.model, row.value, row.line) for row in rows] == [
        ("Rel. Trafo", 99.5, 3),
        ("Rel. Uni. Trafo", 100.0, 4),
    ]


def replaced(column: str, text: str):
    fields = list(GOOD)
    fields[COLUMNS.index(column)] = text
    return tuple(fields)


BAD_LINES = {
    "unknown task": (replaced("task", "scan_cutoff99"), "unknown task 'scan_cutoff99'"),
    "task of another source": (replaced("task", "reverse_string"), "csordas2021 reports no values on reverse_string"),
    "value 101": (replaced("value", "101"), "value 101 is outside 0..100 (a percentage)"),
    "value below 0": (replaced("value", "-1"), "value -1 is outside 0..100 (a percentage)"),
    "value not a number": (replaced("value", "n/a"), "value 'n/a' is not a number"),
    "value nan": (replaced("value", "nan"), "value nan is outside 0..100 (a percentage)"),
    "unknown source": (replaced("source", "smith2024"), "unknown source 'smith2024'"),
    "unknown measure": (replaced("measure", "bleu"), "unknown measure 'bleu'"),
    "the source's other measure": (replaced("measure", "per_token_accuracy"), "csordas2021 reports exact_match"),
    "no page": (replaced("page", " "), "no page"),
    "no table": (replaced("table", ""), "no table"),
    "no model": (replaced("model", ""), "no model"),
    "read_from neither a URL nor a file": (replaced("read_from", "the paper"), "read_from 'the paper' is neither"),
    "too few columns": ("\t".join(GOOD[:7]), "7 tab-separated fields, the header has 8"),
    "too many columns": ("\t".join(GOOD + ("x",)), "9 tab-separated fields, the header has 8"),
}


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_line_is_refused_naming_the_file_and_line(tmp_path, case):
    line, message = BAD_LINES[case]
    path = write(tmp_path, GOOD[:4] + ("Rel. Uni. Trafo",) + GOOD[5:], line)
    with pytest.raises(FieldValuesError) as refused:
        read_field_values(path)
    assert str(refused.value).startswith(f"{path}, line 4: {message}")
    assert "\n" not in str(refused.value)


def test_a_duplicate_cell_is_refused_naming_both_lines(tmp_path):
    path = write(tmp_path, GOOD, replaced("value", "98"))
    with pytest.raises(FieldValuesError, match=r"line 4: .* is there already \(line 3\)$") as refused:
        read_field_values(path)
    assert str(refused.value).startswith(f"{path}, line 4: ")
    # the same model in another table of the source is another cell
    assert len(read_field_values(write(tmp_path, GOOD, replaced("table", "Table 10")))) == 2


def test_a_wrong_header_or_no_header_is_refused(tmp_path):
    path = write(tmp_path, GOOD, header=COLUMNS[:-1])
    with pytest.raises(FieldValuesError, match=r", line 2: the header must be the columns source, table, page"):
        read_field_values(path)
    path.write_text("# only comments\n", encoding="utf-8")
    with pytest.raises(FieldValuesError, match=r": no header line"):
        read_field_values(path)
    with pytest.raises(FieldValuesError, match=r"cannot read the field's values"):
        read_field_values(tmp_path / "missing.tsv")


def test_the_filters_keep_the_rows_of_one_task_or_source():
    every = field_values()
    for row in every:
        assert row in field_values(task=row.task) and row in field_values(source=row.source)
        assert row in field_values(task=row.task, source=row.source)
    for task in ("reverse_string", "scan_cutoff26", "scan_cutoff40"):
        assert field_values(task=task) == tuple(row for row in every if row.task == task)
    for source in SOURCES:
        assert field_values(source=source) == tuple(row for row in every if row.source == source)
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        field_values(task="nope")
    with pytest.raises(ValueError, match="unknown source 'nope'"):
        field_values(source="nope")


def test_the_package_ships_the_values_file(tmp_path):
    shipped = build_python_package(tmp_path) / FIELD_VALUES_FILE.relative_to(REPO_ROOT)
    assert shipped.with_suffix(".py").is_file()
    assert shipped.read_bytes() == FIELD_VALUES_FILE.read_bytes()
