"""The paper's numbers, as the lab reads them from its data file (experiments/paper_values.tsv):
every row and column of each of the paper's tables is there, the values are in range, spot checks
re-read from the paper's tables by hand, the plugin's names, the reader's refusals of a bad file,
the helpers, and that the package ships the file.

The paper's LaTeX source is not part of this repository, so no test reads it.  With it at hand,
``python tests/test_paper_values.py PATH/monotonic_location_attention.tex`` compares every cell of
the file with the cells of the tex's tables, parsed by :func:`tex_cells` (which a test below checks
on a small table written here)."""

import re
import sys
from pathlib import Path

import pytest
from package_build import build_python_package

from fairseq_monoattn.catalog import TABLE2_TASKS, TABLE6_TASKS, TASKS
from monoattn_lab.paper_values import (
    COLUMNS,
    PAPER_TABLES,
    PAPER_VALUES_FILE,
    PaperValuesError,
    paper_cell,
    paper_value,
    paper_values,
    read_paper_values,
    verdict,
)

REPO_ROOT = Path(__file__).resolve().parents[1]

# The paper's row names (as the tex writes them) and the plugin's preset each one is.
TEX_ROWS = {
    "Content": "gru_content",
    "Relative": "gru_relative",
    "LocAttn": "gru_locattn",
    "Bi-Relative": "gru_birelative",
    "Bi-ROPE": "gru_birope",
    "OneStepAttn": "gru_onestep",
    "MonoAttn": "gru_monoattn",
    "RMonoAttn": "gru_rmonoattn",
    "Mix LocAttn": "gru_mix_locattn",
    "LocAttn S": "gru_locattn_s",
    "Mix LocAttn S": "gru_mix_locattn_s",
    "Mix Location S": "gru_mix_locattn_s",  # table:diagnostics_appendix's lower half
    "Mix LocAttn S PR": "gru_mix_locattn_s_pr",
    "Mix Location S PR": "gru_mix_locattn_s_pr",
    "Mix OneStepAttn": "gru_mix_onestep",
    "Mix OneStepAttn PR": "gru_mix_onestep_pr",
    "Mix MonoAttn": "gru_mix_monoattn",
    "Mix MonoAttn PR": "gru_mix_monoattn_pr",
    "Mix RMonoAttn": "gru_mix_rmonoattn",
    "Mix RMonoAttn PR": "gru_mix_rmonoattn_pr",
    "-Step 2": "gru_onestep_minus_step2",
    "-Step 3": "gru_onestep_minus_step3",
    "-Sigmoid": "gru_onestep_minus_sigmoid",
}
ARCHS = set(TEX_ROWS.values())
MAIN = ("gru_content", "gru_relative", "gru_locattn", "gru_birelative", "gru_onestep", "gru_monoattn")
MORE = (
    "gru_birope",
    "gru_mix_locattn",
    "gru_locattn_s",
    "gru_mix_locattn_s",
    "gru_mix_locattn_s_pr",
    "gru_mix_onestep",
    "gru_mix_onestep_pr",
    "gru_mix_monoattn",
    "gru_mix_monoattn_pr",
    "gru_rmonoattn",
    "gru_mix_rmonoattn",
    "gru_mix_rmonoattn_pr",
)
# Each table of the paper: its rows (the models, in its order) and columns (the tasks).
TABLE_LAYOUTS = {
    "table:diagnostics": (MAIN, TABLE2_TASKS),
    "table:critical_ablation": (
        ("gru_onestep", "gru_onestep_minus_step2", "gru_onestep_minus_step3", "gru_onestep_minus_sigmoid"),
        TABLE2_TASKS,
    ),
    "table:diagnostics_appendix": (MORE, TABLE2_TASKS),
    "table:diagnostics3": (
        ("gru_content", "gru_birelative", "gru_locattn", "gru_onestep", "gru_monoattn"),
        TABLE6_TASKS,
    ),
    "table:scan": (
        ("gru_content", "gru_relative", "gru_mix_locattn", "gru_birelative", "gru_mix_onestep", "gru_mix_monoattn"),
        ("scan", "cfq"),
    ),
    "table:scan_appendix": (
        (
            "gru_birope",
            "gru_locattn",
            "gru_locattn_s",
            "gru_mix_locattn_s",
            "gru_mix_locattn_s_pr",
            "gru_onestep",
            "gru_mix_onestep_pr",
            "gru_monoattn",
            "gru_mix_monoattn_pr",
            "gru_rmonoattn",
            "gru_mix_rmonoattn",
            "gru_mix_rmonoattn_pr",
        ),
        ("scan",),
    ),
    "table:diagnostics2": (MAIN, TABLE2_TASKS),
}
DIGITS = ("test15", "test30", "test100")
LOOKUP = ("test7", "test9", "test11")
IID = ("test_iid", "test15", "test30", "test100")

# (task, arch, splits, expected values at those splits), read again from the paper's tables.
ACCURACY_SPOT_CHECKS = [
    # table:diagnostics
    ("inv_recopy", "gru_monoattn", DIGITS, (100, 100, 98.8)),
    ("inv_reverse_recopy", "gru_monoattn", DIGITS, (100, 99.9, 98.3)),
    ("lookup", "gru_monoattn", LOOKUP, (100, 98, 29.9)),
    ("lookup", "gru_content", LOOKUP, (33.3, 0, 0)),
    ("inv_recopy", "gru_content", DIGITS, (0.05, 0, 0)),
    ("reverse_lookup", "gru_relative", LOOKUP, (78.2, 0.8, 0.4)),
    ("inv_recopy", "gru_locattn", DIGITS, (99.4, 58.8, 0)),
    ("inv_reverse_recopy", "gru_birelative", DIGITS, (71.3, 0, 0)),
    ("inv_recopy", "gru_onestep", DIGITS, (0.1, 0, 0)),
    # table:critical_ablation
    ("reverse_copy", "gru_onestep_minus_step2", DIGITS, (100, 98.6, 0)),
    ("lookup", "gru_onestep_minus_step2", LOOKUP, (99.2, 2.34, 0)),
    ("reverse_recopy", "gru_onestep_minus_step3", DIGITS, (100, 100, 99.9)),
    ("inv_reverse_recopy", "gru_onestep_minus_sigmoid", DIGITS, (22, 0, 0)),
    # table:diagnostics3 ("51." in the tex)
    ("dedupe", "gru_onestep", IID, (94.1, 51, 0, 0)),
    ("dedupe", "gru_monoattn", IID, (99.7, 98.3, 94.3, 75)),
    ("posretrieve", "gru_locattn", IID, (96.3, 0, 0, 0)),
    # table:diagnostics_appendix ("Mix Location S" = Mix LocAttn S)
    ("copy", "gru_birope", DIGITS, (100, 100, 0)),
    ("inv_recopy", "gru_mix_locattn_s", DIGITS, (98.9, 66.6, 0)),
    ("inv_reverse_recopy", "gru_mix_locattn_s_pr", DIGITS, (99.6, 98.1, 84.8)),
    ("copy", "gru_mix_monoattn", DIGITS, (99.95, 5, 0)),
    ("inv_reverse_recopy", "gru_mix_onestep", DIGITS, (5.45, 0, 0)),
    ("reverse_recopy", "gru_rmonoattn", DIGITS, (0, 0, 0)),
    ("recopy", "gru_mix_rmonoattn_pr", DIGITS, (100, 90.8, 51.2)),
    # table:scan ("62,14" in the tex) and table:scan_appendix
    ("cfq", "gru_content", ("test",), ((62.14, 0.88),)),
    ("scan", "gru_mix_onestep", ("test",), ((29.51, 9.46),)),
    ("scan", "gru_locattn", ("test",), ((24.56, 17.51),)),
    ("scan", "gru_mix_locattn_s_pr", ("test",), ((19.8, 3.26),)),
]

EDIT_DISTANCE_SPOT_CHECKS = [  # table:diagnostics2
    ("recopy", "gru_content", DIGITS, (8, 53.4, 249.2)),
    ("reverse_recopy", "gru_relative", DIGITS, (17.9, 60.8, 250.7)),
    ("lookup", "gru_locattn", LOOKUP, (1.2, 3, 5.7)),
    ("lookup", "gru_monoattn", LOOKUP, (0, 0, 0.9)),
    ("inv_reverse_recopy", "gru_onestep", DIGITS, (3.1, 17.2, 85.7)),
]


@pytest.mark.parametrize("task, arch, splits, expected", ACCURACY_SPOT_CHECKS)
def test_accuracy_spot_checks(task, arch, splits, expected):
    assert tuple(paper_value(task, arch, split) for split in splits) == expected


@pytest.mark.parametrize("task, arch, splits, expected", EDIT_DISTANCE_SPOT_CHECKS)
def test_edit_distance_spot_checks(task, arch, splits, expected):
    assert tuple(paper_value(task, arch, split, "edit_distance") for split in splits) == expected


@pytest.mark.parametrize("label", list(TABLE_LAYOUTS))
def test_every_row_and_column_of_each_table_is_in_the_file_once(label):
    """Each table has exactly its rows x columns x the task's paper splits, one line each."""
    models, tasks = TABLE_LAYOUTS[label]
    lines = [(c.task, c.model, c.split) for c in paper_values().cells if c.table == label]
    expected = [(task, model, split) for model in models for task in tasks for split in TASKS[task].paper_splits]
    assert len(lines) == len(set(lines)), label
    assert set(lines) == set(expected), label


def test_the_files_tables_are_the_papers_results_tables():
    assert set(PAPER_TABLES) == set(TABLE_LAYOUTS)
    assert {c.table for c in paper_values().cells} == set(PAPER_TABLES)


def test_names_and_splits_are_the_plugins():
    from fairseq_monoattn.models.presets import PRESETS

    assert ARCHS <= set(PRESETS)
    for cell in paper_values().cells:
        assert cell.model in ARCHS and cell.split in TASKS[cell.task].paper_splits, cell


def test_the_tables_the_sweeps_and_docs_name():
    tables = paper_values().tables
    assert set(tables) == {"table2", "table3-scan", "table5", "table6", "appendix"}
    assert tables["table2"] == [(task, model) for model in MAIN for task in TABLE2_TASKS]
    scan = [(task, model) for model in TABLE_LAYOUTS["table:scan"][0] for task in ("scan", "cfq")]
    assert tables["table3-scan"] == scan + [("scan", model) for model in TABLE_LAYOUTS["table:scan_appendix"][0]]
    reported = {pair for pairs in tables.values() for pair in pairs}
    assert reported == {(task, arch) for task, by_arch in paper_values().accuracy.items() for arch in by_arch}
    for task, by_arch in paper_values().edit_distance.items():
        assert all((task, arch) in tables["table2"] for arch in by_arch)


def test_values_are_in_range_floats_or_mean_std_pairs():
    for cell in paper_values().cells:
        value = cell.value
        if TASKS[cell.task].mean_std:
            assert isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, float) for v in value)
            assert 0 <= value[0] <= 100 and 0 <= value[1] <= 100, cell
        elif PAPER_TABLES[cell.table].metric == "accuracy":
            assert isinstance(value, float) and 0 <= value <= 100, cell
        else:
            assert isinstance(value, float) and value >= 0, cell


def test_a_cell_in_two_tables_has_one_value():
    seen = {}
    for cell in paper_values().cells:
        key = (PAPER_TABLES[cell.table].metric, cell.task, cell.model, cell.split)
        assert seen.setdefault(key, cell.value) == cell.value, cell
    both = {c.table for c in paper_values().cells if (c.task, c.model) == ("copy", "gru_onestep")}
    assert both == {"table:diagnostics", "table:critical_ablation", "table:diagnostics2"}


def test_unreported_cells_are_none():
    assert paper_value("dedupe", "gru_relative", "test15") is None
    assert paper_value("cfq", "gru_locattn", "test") is None
    assert paper_value("scan", "gru_onestep_minus_step2", "test") is None
    assert paper_value("copy", "gru_monoattn", "test_iid") is None
    assert paper_value("copy", "gru_birope", "test15", "edit_distance") is None
    assert paper_cell("copy", "gru_birope", "test15", "edit_distance") == ""
    with pytest.raises(ValueError):
        paper_value("copy", "gru_monoattn", "test15", metric="bleu")


def test_paper_cell_text():
    assert paper_cell("copy", "gru_monoattn", "test100") == "100"
    assert paper_cell("inv_recopy", "gru_monoattn", "test100") == "98.8"
    assert paper_cell("inv_recopy", "gru_content", "test15") == "0.05"
    assert paper_cell("scan", "gru_content", "test") == "17.61 ± 4.07"
    assert paper_cell("scan", "gru_mix_locattn_s_pr", "test") == "19.80 ± 3.26"
    assert paper_cell("recopy", "gru_content", "test100", "edit_distance") == "249.2"


def test_verdict_thresholds():
    assert verdict(100) == "solved" and verdict(95) == "solved"
    assert verdict(0) == "failed" and verdict(5) == "failed"
    assert verdict(50) == "partial" and verdict(94.9) == "partial" and verdict(5.1) == "partial"


# --- a bad file: the shipped one with one line changed --------------------------------------------


def shipped_lines():
    return PAPER_VALUES_FILE.read_text(encoding="utf-8").splitlines()


def changed(tmp_path, change):
    lines = shipped_lines()
    number = change(lines)
    path = tmp_path / "paper_values.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, number


def test_the_shipped_file_reads_the_same_from_a_copy(tmp_path):
    path, _ = changed(tmp_path, lambda lines: None)
    assert read_paper_values(path) == paper_values()


def edit(table, task, model, split, column, text):
    """A change of the file: the line of that cell gets ``text`` in ``column`` (None: the column
    is cut off the line); it returns the line's number."""

    def change(lines):
        prefix = "\t".join((table, task, model, split)) + "\t"
        index = next(i for i, line in enumerate(lines) if line.startswith(prefix))
        fields = lines[index].split("\t")
        if text is None:
            del fields[COLUMNS.index(column)]
        else:
            fields[COLUMNS.index(column)] = text
        lines[index] = "\t".join(fields)
        return index + 1

    return change


def drop_std_column(lines):
    """The std column cut off the header and every line; returns the header's line number."""
    start = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    for i in range(start, len(lines)):
        if lines[i] and not lines[i].startswith("#"):
            lines[i] = lines[i].rsplit("\t", 1)[0]
    return start + 1


COPY_15 = ("table:diagnostics", "copy", "gru_content", "test15")
BAD_FILES = {
    "no std column": (drop_std_column, "the header must be the columns table, task, model, split, value, std"),
    "a field missing": (edit(*COPY_15, "std", None), "5 tab-separated fields, the header has 6"),
    "a value not a number": (edit(*COPY_15, "value", "98%"), "value '98%' is not a number"),
    "an accuracy above 100": (edit(*COPY_15, "value", "100.5"), "value 100.5 is outside 0..100"),
    "nan": (edit("table:diagnostics2", "copy", "gru_content", "test15", "value", "nan"), "value nan is outside 0..inf"),
    "an unknown table": (edit(*COPY_15, "table", "table:two"), "unknown table 'table:two'"),
    "an unknown task": (edit(*COPY_15, "task", "cpy"), "unknown task 'cpy'"),
    "no model": (edit(*COPY_15, "model", ""), "no model"),
    "a split the paper has not": (edit(*COPY_15, "split", "test7"), "copy has no split 'test7' in the paper"),
    "SCAN without its std": (
        edit("table:scan", "scan", "gru_content", "test", "std", "-"),
        "the paper reports mean ± std on scan: the std is missing",
    ),
    "a std where the paper has none": (edit(*COPY_15, "std", "1"), "the paper reports no std on copy"),
    "a std not a number": (
        edit("table:scan", "cfq", "gru_content", "test", "std", "0,88"),
        "std '0,88' is not a number",
    ),
    "one cell twice in a table": (
        edit("table:diagnostics", "copy", "gru_content", "test30", "split", "test15"),
        "table:diagnostics has copy gru_content test15 already",
    ),
    "one cell with two values in two tables": (
        edit("table:critical_ablation", "inv_recopy", "gru_onestep", "test15", "value", "0.2"),
        "inv_recopy gru_onestep test15 is 0.2 here but 0.1 in table:diagnostics",
    ),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_bad_line_is_refused_in_one_line_naming_the_file_and_line(tmp_path, name):
    change, message = BAD_FILES[name]
    path, number = changed(tmp_path, change)
    with pytest.raises(PaperValuesError) as raised:
        read_paper_values(path)
    text = str(raised.value)
    assert "\n" not in text
    assert text.startswith(f"{path}, line {number}: ") and message in text, text


def without_scan_appendix(lines):
    lines[:] = [line for line in lines if not line.startswith("table:scan_appendix\t")]


def test_a_file_without_a_table_or_without_values_is_refused(tmp_path):
    path, _ = changed(tmp_path, without_scan_appendix)
    with pytest.raises(PaperValuesError, match=rf"^{re.escape(str(path))}: no values of table:scan_appendix$"):
        read_paper_values(path)
    empty = tmp_path / "empty.tsv"
    empty.write_text("# nothing\n")
    with pytest.raises(PaperValuesError, match=r"no header line"):
        read_paper_values(empty)
    with pytest.raises(PaperValuesError, match=r"missing\.tsv: cannot read the paper's values"):
        read_paper_values(tmp_path / "missing.tsv")


@pytest.fixture
def shipped_file_replaced(monkeypatch):
    """Make the package's values file another one (the reader's cache emptied before and after)."""
    from monoattn_lab import paper_values as module

    def replace(path):
        monkeypatch.setattr(module, "PAPER_VALUES_FILE", path)
        paper_values.cache_clear()

    yield replace
    paper_values.cache_clear()


def test_the_commands_refuse_a_bad_values_file_in_one_line_before_any_work(tmp_path, shipped_file_replaced, capsys):
    """fairseq-monoattn-aggregate (before it reads a record or writes its --update file) and the
    sweep's --more-seeds-where-different stop with the reader's line, exit status 1."""
    from monoattn_lab.cli.aggregate import main as aggregate_main
    from monoattn_lab.cli.sweep import main as sweep_main

    path, number = changed(tmp_path, edit(*COPY_15, "value", "n/a"))
    shipped_file_replaced(path)
    results, target = tmp_path / "results", tmp_path / "RESULTS.md"
    results.mkdir()
    target.write_text("kept\n")
    expected = f"error: {path}, line {number}: value 'n/a' is not a number"
    with pytest.raises(SystemExit) as stopped:
        aggregate_main(["tables", "--results", str(results), "--update", str(target)])
    assert str(stopped.value) == expected and target.read_text() == "kept\n"
    argv = ["status", "table2", "--results", str(results), "--more-seeds-where-different", "4"]
    with pytest.raises(SystemExit) as stopped:
        sweep_main(argv)
    assert str(stopped.value) == expected
    assert "disagree" not in capsys.readouterr().out


def test_the_package_ships_the_values_file(tmp_path):
    """setup.py's package_data puts the file beside its reader in a built package (what an
    installed lab reads)."""
    shipped = build_python_package(tmp_path) / PAPER_VALUES_FILE.relative_to(REPO_ROOT)
    assert shipped.with_suffix(".py").is_file()
    assert shipped.read_bytes() == PAPER_VALUES_FILE.read_bytes()


# --- the paper's tex, where one has it -----------------------------------------------------------


def tex_value(text: str):
    """A tex cell's number ('$\\mathbf{98.8}$' -> 98.8, '$17.61 \\pm 4.07$' -> (17.61, 4.07)); the
    text itself where it is no number (a typo such as '62,14')."""
    text = text.replace("$", "").strip()
    while (bold := re.fullmatch(r"\\mathbf\{(.*)\}", text)) is not None:
        text = bold.group(1).strip()
    try:
        if "\\pm" in text:
            mean, std = text.split("\\pm")
            return (float(mean), float(std))
        return float(text)
    except ValueError:
        return text


def tex_task(name: str) -> str:
    by_title = {facts.title: task for task, facts in TASKS.items()}
    return by_title.get(name) or name.split()[0].lower()  # "SCAN (Len.)" -> scan, "CFQ (Len.)" -> cfq


def tex_cells(tex: str, label: str) -> dict:
    """{(task, model, split): value} of the tabular of the table labelled ``label``."""
    end = tex.index(f"\\label{{{label}}}")
    start = tex.rindex("\\begin{tabular}", 0, end)
    body = tex[tex.index("\n", start) : tex.index("\\end{tabular}", start)]
    cells, tasks, splits = {}, [], None
    for row in body.split("\\\\"):
        row = re.sub(r"\\hline|\\midrule", "", row).strip()
        if "&" not in row:
            continue
        first, *rest = (part.strip() for part in row.split("&"))
        if first.startswith("\\textbf{Model}"):
            tasks, splits = [], None
            for part in rest:
                wide = re.fullmatch(r"\\multicolumn\{(\d+)\}\{[^}]*\}\{\\textbf\{(.*)\}\}", part)
                count, name = (
                    (int(wide.group(1)), wide.group(2)) if wide else (1, re.sub(r"\\textbf\{(.*)\}", r"\1", part))
                )
                tasks += [tex_task(name)] * count
        elif first.startswith("(Length Splits)"):
            splits = ["test_iid" if part == "IID" else f"test{part.strip('$')}" for part in rest]
        else:
            model = TEX_ROWS[" ".join(first.replace("$", "").split())]
            for i, part in enumerate(rest):
                cells[(tasks[i], model, splits[i] if splits else "test")] = tex_value(part)
    return cells


TEX_TYPOS = {("table:scan", "cfq", "gru_content", "test"): ("62,14 \\pm 0.88", (62.14, 0.88))}


def compare_with_tex(tex: str) -> list:
    """Every difference between the file and the tex's tables, as lines of text (none: agree)."""
    problems = []
    for label in PAPER_TABLES:
        theirs = tex_cells(tex, label)
        ours = {(c.task, c.model, c.split): c.value for c in paper_values().cells if c.table == label}
        for key in sorted(set(theirs) | set(ours)):
            tex_value_, file_value = theirs.get(key), ours.get(key)
            typo = TEX_TYPOS.get((label, *key))
            if typo is not None and tex_value_ == typo[0] and file_value == typo[1]:
                continue
            if tex_value_ != file_value:
                problems.append(f"{label} {' '.join(key)}: tex {tex_value_!r}, file {file_value!r}")
    return problems


SMALL_TEX = r"""
\begin{table*}[t]
\begin{tabular}{  l | l l l | l l l l}
\hline
\textbf{Model} & \multicolumn{3}{c}{\textbf{Copy}} & \multicolumn{4}{|c}{\textbf{DeDupe}}\\
(Length Splits)  & $15$ & $30$ & $100$ & IID & $15$ & $30$ & $100$\\
\hline
Ours \\
\hline
OneStepAttn & $\mathbf{100}$ & $51.$ & $0$ & $94.1$ & $0.05$ & $0$ & $0$\\
$-$Step $2$ &  $99.8$ & $0$ & $0$ & $1$ & $2$ & $3$ & $4$\\
\hline
\textbf{Model} & \textbf{SCAN (Len.)} & \textbf{CFQ (Len.)}\\
 \hline
Mix Location S PR & $17.61 \pm 4.07$ & $\mathbf{62,14 \pm 0.88}$\\
\end{tabular}
\caption{A table.}
\label{table:small}
\end{table*}
"""


def test_tex_cells_reads_a_table_as_the_paper_writes_them():
    cells = tex_cells(SMALL_TEX, "table:small")
    assert cells == {
        ("copy", "gru_onestep", "test15"): 100.0,
        ("copy", "gru_onestep", "test30"): 51.0,
        ("copy", "gru_onestep", "test100"): 0.0,
        ("dedupe", "gru_onestep", "test_iid"): 94.1,
        ("dedupe", "gru_onestep", "test15"): 0.05,
        ("dedupe", "gru_onestep", "test30"): 0.0,
        ("dedupe", "gru_onestep", "test100"): 0.0,
        ("copy", "gru_onestep_minus_step2", "test15"): 99.8,
        ("copy", "gru_onestep_minus_step2", "test30"): 0.0,
        ("copy", "gru_onestep_minus_step2", "test100"): 0.0,
        ("dedupe", "gru_onestep_minus_step2", "test_iid"): 1.0,
        ("dedupe", "gru_onestep_minus_step2", "test15"): 2.0,
        ("dedupe", "gru_onestep_minus_step2", "test30"): 3.0,
        ("dedupe", "gru_onestep_minus_step2", "test100"): 4.0,
        ("scan", "gru_mix_locattn_s_pr", "test"): (17.61, 4.07),
        ("cfq", "gru_mix_locattn_s_pr", "test"): "62,14 \\pm 0.88",
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/test_paper_values.py PATH/monotonic_location_attention.tex")
    differences = compare_with_tex(Path(sys.argv[1]).read_text(encoding="utf-8"))
    count = sum(1 for _ in paper_values().cells)
    print("\n".join(differences) or f"every one of the file's {count} values is the tex's (typos: {len(TEX_TYPOS)})")
    sys.exit(1 if differences else 0)
