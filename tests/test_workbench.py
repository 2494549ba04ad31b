"""The workbench's table: which sweep holds each cell, one budget per block, what a cell shows."""

import dataclasses
import json
import subprocess
import sys

import pytest

from fairseq_monoattn.catalog import DELETANG_TASKS, DELETANG_TEST_SPLITS, SCAN_CUTOFFS
from monoattn_lab import workbench
from monoattn_lab.aggregate import update_file
from monoattn_lab.field_values import FieldValue
from monoattn_lab.sweeps import SWEEPS


def test_every_cell_of_the_table_is_the_cell_of_exactly_one_sweep():
    sweeps = workbench.table_sweeps()
    holders = {}
    for sweep in sweeps:
        for spec in sweep.specs():
            holders.setdefault((spec.task, spec.arch, spec.variant), set()).add(sweep.name)
    for block in workbench.BLOCKS.values():
        for row in workbench.ROWS:
            for task in block.tasks:
                names = holders.get((task, row.arch, row.variant))
                assert names is not None and len(names) == 1, (block.name, row.label, task, names)
                # the paper's GRU models on the probing tasks are table2's runs, every other cell the workbench's
                paper_cell = block.name == "probing" and row.variant == "default" and row.arch.startswith("gru_")
                assert (names == {"table2"}) == paper_cell


def test_every_model_of_a_block_trains_on_the_same_budget_and_seeds():
    for block in workbench.BLOCKS.values():
        sweeps = [s for s in workbench.table_sweeps() if s.name.startswith(f"workbench-{block.name}-")]
        assert len(sweeps) == len(workbench.ROW_GROUPS)
        if block.name == "probing":
            sweeps.append(SWEEPS["table2"])
        budgets = {(s.max_epoch, s.stop_after_perfect, s.recipe, s.data_seed) for s in sweeps}
        assert len(budgets) == 1, (block.name, budgets)
        assert all(set(s.seeds) == set(workbench.WORKBENCH_SEEDS) for s in sweeps)
        assert {task for s in sweeps for task, _ in s.cells} == set(block.tasks)
    assert workbench.BLOCKS["scan-cutoffs"].tasks == tuple(f"scan_cutoff{n}" for n in SCAN_CUTOFFS)
    assert set(workbench.BLOCKS["benchmark"].tasks) == set(DELETANG_TASKS)


def test_each_row_runs_its_own_options_and_the_noise_rows_only_add_the_noise():
    specs = [s for sweep in workbench.table_sweeps() if sweep.name.startswith("workbench-") for s in sweep.specs()]
    for row in workbench.ROWS:
        options = {s.options for s in specs if (s.arch, s.variant) == (row.arch, row.variant)}
        assert options == {row.options}, row
    noisy = [row for row in workbench.ROW_GROUPS["gru"] if row.variant != "default"]
    assert [row.arch for row in noisy] == [arch for _, arch in workbench.GRU_MODELS]
    assert {row.options for row in noisy} == {("--encoder-state-noise", "0.2")}
    schemes = [row.options[1] for row in workbench.ROW_GROUPS["positions"]]
    assert schemes == ["sinusoidal", "learned", "none", "rope", "alibi", "fire", "randomized"]


def splits_with(per_token, accuracy=0.0, key="per_token_accuracy"):
    return {split: {"accuracy": accuracy, key: value} for split, value in zip(DELETANG_TEST_SPLITS, per_token)}


def test_a_benchmark_cell_is_the_mean_over_the_test_lengths_with_the_tasks_own_key():
    block = workbench.BLOCKS["benchmark"]
    scores = [100, 90, 80, 70, 60, 50, 40, 30, 20, 10]
    record = {"task": "reverse_string", "splits": splits_with(scores)}
    assert block.value(record) == pytest.approx(55.0)
    # Stack Manipulation counts its termination token, a target token: still the plain per-token key
    assert block.value({"task": "stack_manipulation", "splits": splits_with(scores)}) == pytest.approx(55.0)
    # a record that lacks a length is no number at all, never the mean of the lengths it has
    partial = {"task": "reverse_string", "splits": dict(list(splits_with(scores).items())[:-1])}
    assert block.value(partial) is None
    longest = workbench.BLOCKS["probing"]
    assert longest.value({"task": "recopy", "splits": {"test15": {"accuracy": 90}, "test100": {"accuracy": 7}}}) == 7
    assert longest.value({"task": "lookup", "splits": {"test11": {"accuracy": 3}}}) == 3


def test_a_cell_is_the_median_bold_when_solved_and_says_how_many_seeds_it_has():
    assert workbench.format_cell([91.0, 10.0, 95.0], 3, bold=True) == "**91.0**"
    assert workbench.format_cell([91.0, 10.0, 95.0], 3) == "91.0"
    assert workbench.format_cell([89.96], 3, bold=True) == "90.0 (1/3)"  # the median, not its rounding, decides
    assert workbench.format_cell([40.0, 50.0], 3) == "45.0 (2/3)"
    assert workbench.format_cell([], 3) == "–"


def write_record(folder, spec, splits, valid=None):
    record = {**dataclasses.asdict(spec), "options": list(spec.options), "splits": splits}  # the spec's fields
    record["best_valid_accuracy"] = valid
    path = spec.record_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


def test_the_table_reads_each_cell_from_its_sweep_and_refuses_another_budget(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = SWEEPS["workbench-benchmark-gru"]
    specs = [s for s in sweep.specs() if (s.task, s.arch, s.variant) == ("odds_first", "gru_onestep", "default")]
    assert [s.seed for s in specs] == [1, 2, 3]
    folder = sweep.results_folder(tmp_path)
    write_record(folder, specs[0], splits_with([100] * 10))
    write_record(folder, specs[1], splits_with([80] * 10))
    # the same place, another budget: not this sweep's run, so not in the table
    other = dataclasses.replace(specs[2], max_epoch=specs[2].max_epoch + 1)
    write_record(folder, other, splits_with([0] * 10))
    records = workbench.Records()
    cell = workbench.cell_records(records, workbench.table_sweeps(), workbench.ROWS[2], "odds_first")
    assert sorted(r["seed"] for r in cell) == [1, 2]
    published = FieldValue("csordas2021", "abstract", "619", "scan_cutoff26", "relative", "exact_match", 100.0, "x", 1)
    text = workbench.render(records, workbench.table_sweeps(), [published])
    row = next(line for line in text.splitlines() if line.startswith("| GRU OneStep |") and "**90.0** (2/3)" in line)
    assert row.split(" | ")[4] == "**90.0** (2/3)"  # Odds First is the benchmark block's fourth column
    # the same seeds, which did not fit their training lengths (median best valid accuracy below 95): marked
    for spec, valid in zip(specs, (99.0, 90.0)):
        write_record(folder, spec, splits_with([100 if valid > 95 else 80] * 10), valid=valid)
    write_record(folder, specs[2], splits_with([100] * 10), valid=94.0)
    text = workbench.render(workbench.Records(), workbench.table_sweeps(), [published])
    rows = [line for line in text.splitlines() if line.startswith("| GRU OneStep |")]  # each block's two tables
    assert rows[2].split(" | ")[4] == "**100.0** †"  # per-token median 100 of (100, 80, 100); valid median 94
    theirs = next(line for line in text.splitlines() if "(theirs)" in line)
    assert theirs.split(" | ")[4] == "100 (theirs)" and "csordas2021, abstract, p. 619" in theirs  # SCAN <=26


def test_two_generated_parts_of_one_file_are_rewritten_apart(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\nhand-written\n")
    update_file(path, "tables one\n")
    update_file(path, "workbench one\n", name="workbench")
    path.write_text(path.read_text() + "closing words\n")
    update_file(path, "workbench two\n", name="workbench")
    update_file(path, "tables two\n")
    text = path.read_text()
    assert text.startswith("# Results\nhand-written\n") and text.endswith("closing words\n")
    assert "tables two\n" in text and "workbench two\n" in text and "one\n" not in text
    assert text.count("BEGIN GENERATED") == 2 and text.count("END GENERATED") == 2


def test_the_workbench_view_writes_the_table_into_a_file(tmp_path):
    out = tmp_path / "RESULTS.md"
    command = [sys.executable, "-m", "monoattn_lab.cli.aggregate", "workbench", "--update", str(out)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert text.count("| model |") == 2 * len(workbench.BLOCKS)  # each block's scores and length decisions
    assert all(f"| {row.label} |" in text for row in workbench.ROWS)


def test_the_length_decisions_are_the_shares_of_the_longest_split_cut_short_and_overrun(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = SWEEPS["workbench-benchmark-gru"]
    specs = [s for s in sweep.specs() if (s.task, s.arch, s.variant) == ("reverse_string", "gru_monoattn", "default")]
    folder = sweep.results_folder(tmp_path)
    for spec, (cut, over) in zip(specs, [(82, 0), (40, 10), (0, 30)]):
        splits = splits_with([50] * 10)
        splits["test500"].update(size=200, cut_short=cut * 2, overran=over * 2)
        splits["test450"].update(size=100, cut_short=100, overran=0)  # only the longest length counts
        write_record(folder, spec, splits)
    lines = workbench.length_decisions(workbench.Records(), workbench.table_sweeps(), workbench.BLOCKS["benchmark"])
    row = next(line for line in lines if line.startswith("| GRU MonoAttn |"))
    assert row.split(" | ")[1] == "40 / 10"  # medians of (82, 40, 0) and (0, 10, 30), Reverse String's column
    assert next(line for line in lines if line.startswith("| GRU OneStep |")).split(" | ")[1] == "–"


def test_the_scan_cutoffs_and_probing_length_decisions_count_the_split_their_cells_score(tmp_path, monkeypatch):
    """SCAN's cells score the commands past the cutoff (split test), a probing cell its task's
    longest test length; their length decisions count the same outputs, under the same headings,
    and so does the exact match told the length, once a record has it."""
    monkeypatch.chdir(tmp_path)
    cases = [
        ("workbench-scan-cutoffs-gru", "scan_cutoff26", "gru_content", "test", "SCAN ≤26", "on the commands longer"),
        ("table2", "recopy", "gru_monoattn", "test100", "ReCopy (100)", "at the longest test length"),
    ]
    for name, task, arch, split, heading, where in cases:
        sweep = SWEEPS[name]
        spec = next(s for s in sweep.specs() if (s.task, s.arch, s.variant, s.seed) == (task, arch, "default", 1))
        splits = {split: {"accuracy": 62.5, "size": 400, "cut_short": 146, "overran": 4}}
        fitted = {"accuracy": 99, "size": 10, "cut_short": 10, "overran": 0}
        splits["test_iid" if name == "table2" else "test15"] = fitted
        write_record(sweep.results_folder(tmp_path), spec, splits, valid=99.0)
        block = next(b for b in workbench.BLOCKS.values() if task in b.tasks)
        assert block.decision_split(task) == split
        lines = workbench.length_decisions(workbench.Records(), workbench.table_sweeps(), block)
        assert where in lines[0]
        column = lines[2].split(" | ").index(heading)
        label = next(r.label for r in workbench.ROWS if r.arch == arch and r.variant == "default")
        row = next(line for line in lines if line.startswith(f"| {label} |"))
        assert row.split(" | ")[column] == "36 / 1"  # 146 and 4 of 400, rounded
        # exact match told the length: no table while no record has it, then the cell's median
        assert workbench.told_the_length(workbench.Records(), workbench.table_sweeps(), block) == []
        splits[split]["length_oracle_accuracy"] = 98.3
        write_record(sweep.results_folder(tmp_path), spec, splits, valid=99.0)
        lines = workbench.told_the_length(workbench.Records(), workbench.table_sweeps(), block)
        assert where in lines[0] and lines[2].split(" | ").index(heading) == column
        row = next(line for line in lines if line.startswith(f"| {label} |"))
        assert row.split(" | ")[column] == "98.3 (1/3)" and row.count("–") == len(block.tasks) - 1
        fitted["accuracy"] = 50.0  # runs that did not fit their training lengths: marked as in the scores
        write_record(sweep.results_folder(tmp_path), spec, splits, valid=50.0)
        lines = workbench.told_the_length(workbench.Records(), workbench.table_sweeps(), block)
        row = next(line for line in lines if line.startswith(f"| {label} |"))
        assert row.split(" | ")[column] == "98.3 (1/3) †"


@pytest.mark.parametrize("scheme", ["sinusoidal", "learned", "none", "alibi"])
def test_a_position_rows_planned_model_has_the_switches_its_scheme_sets(scheme):
    """--positions decides fairseq's three switches when the model is built; the planner, which the
    outdated-record check compares trained models with, must say the same (it said False for learned)."""
    from pathlib import Path

    from monoattn_lab.spec import planned_model_config, train_command

    spec = next(s for s in SWEEPS["workbench-benchmark-positions"].specs() if s.variant == f"positions-{scheme}")
    planned = planned_model_config(train_command(spec, Path("data"), Path("run")))
    assert planned["positions"] == scheme
    assert planned["encoder_learned_pos"] is planned["decoder_learned_pos"] is (scheme == "learned")
    assert planned["no_token_positional_embeddings"] is (scheme not in ("sinusoidal", "learned"))


def test_a_probing_cell_is_marked_by_its_iid_test_not_its_valid_split_which_runs_past_training(tmp_path, monkeypatch):
    """The probing tasks validate on lengths 10-15 (training: 5-10), so a model that fits its
    training lengths and fails past them has a low valid score: its i.i.d. test decides the mark."""
    probing, benchmark = workbench.BLOCKS["probing"], workbench.BLOCKS["benchmark"]
    fitted = {"best_valid_accuracy": 32.7, "splits": {"test_iid": {"accuracy": 99.95}, "test100": {"accuracy": 0.0}}}
    unfitted = {"best_valid_accuracy": 32.7, "splits": {"test_iid": {"accuracy": 60.0}}}
    assert probing.fit(fitted) == 99.95 and probing.fit(unfitted) == 60.0
    assert probing.fit({"best_valid_accuracy": 99.0, "splits": {}}) is None  # no i.i.d. split: unknown, no mark
    assert benchmark.fit(fitted) == 32.7  # the benchmark's valid split is i.i.d. (lengths 1-40)
    monkeypatch.chdir(tmp_path)
    sweep = SWEEPS["table2"]
    specs = [s for s in sweep.specs() if (s.task, s.arch, s.variant) == ("copy", "gru_content", "default")]
    for spec, iid in zip(specs, (99.95, 99.0, 40.0)):
        splits = {"test_iid": {"accuracy": iid}, **{f"test{n}": {"accuracy": 0.0} for n in (15, 30, 100)}}
        write_record(sweep.results_folder(tmp_path), spec, splits, valid=32.7)
    text = workbench.render(workbench.Records(), workbench.table_sweeps())
    row = next(line for line in text.splitlines() if line.startswith("| GRU Content |"))  # the probing block's
    assert row.split(" | ")[1] == "0.0"  # i.i.d. median 99.0: fitted, though every valid score is 32.7


def test_the_cutoff_curves_are_each_rows_exact_match_by_cutoff_greedy_and_told_and_drawn(tmp_path, monkeypatch):
    """A row with records at two SCAN cutoffs is a line of its medians, greedy and told each
    target's length (where the records have it); one at a single cutoff is no line; the picture is
    drawn and the scan block's table names it."""
    monkeypatch.chdir(tmp_path)
    sweep = SWEEPS["workbench-scan-cutoffs-gru"]

    def spec(task, seed, variant="default"):
        return next(
            s for s in sweep.specs() if (s.task, s.arch, s.variant, s.seed) == (task, "gru_content", variant, seed)
        )

    folder = sweep.results_folder(tmp_path)
    for task, seed, greedy, told in [("scan_cutoff22", 1, 10.0, 60.0), ("scan_cutoff22", 2, 20.0, 70.0),
                                     ("scan_cutoff30", 1, 45.0, 100.0)]:  # fmt: skip
        write_record(folder, spec(task, seed), {"test": {"accuracy": greedy, "length_oracle_accuracy": told}}, 99.0)
    write_record(folder, spec("scan_cutoff26", 1, "state-noise0.2"), {"test": {"accuracy": 73.0}}, 99.0)
    records, sweeps = workbench.Records(), workbench.table_sweeps()
    assert workbench.cutoff_curves(records, sweeps) == {
        "GRU Content": [(22, 15.0, 10.0, 20.0, 2), (30, 45.0, 45.0, 45.0, 1)]
    }
    told = workbench.cutoff_curves(records, sweeps, "length_oracle_accuracy")
    assert told == {"GRU Content": [(22, 65.0, 60.0, 70.0, 2), (30, 100.0, 100.0, 100.0, 1)]}
    pictures = workbench.plot_lengths(records, sweeps, tmp_path / "figures")
    assert pictures == {"scan-cutoffs": tmp_path / "figures" / "workbench_scan_cutoffs.png"}
    assert pictures["scan-cutoffs"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = workbench.render(records, sweeps, plots={"scan-cutoffs": "figures/workbench_scan_cutoffs.png"})
    assert text.rstrip().endswith(
        "![SCAN length cutoffs: exact match against the cutoff](figures/workbench_scan_cutoffs.png)"
    )


def test_a_benchmark_cell_told_the_length_is_the_mean_per_token_accuracy_of_the_told_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = SWEEPS["workbench-benchmark-gru"]
    spec = next(
        s
        for s in sweep.specs()
        if (s.task, s.arch, s.variant, s.seed) == ("reverse_string", "gru_monoattn", "default", 1)
    )
    splits = splits_with([50] * 10)
    for split, told in zip(DELETANG_TEST_SPLITS, [100, 100, 90, 90, 80, 80, 70, 70, 60, 60]):
        splits[split]["length_oracle_per_token_accuracy"] = told
    write_record(sweep.results_folder(tmp_path), spec, splits, valid=99.0)
    block = workbench.BLOCKS["benchmark"]
    record = workbench.Records().of(sweep.results_folder(tmp_path))
    (only,) = record.values()
    assert block.value(only) == pytest.approx(50.0) and block.value(only, told=True) == pytest.approx(80.0)
    lines = workbench.told_the_length(workbench.Records(), workbench.table_sweeps(), block)
    assert lines[0].startswith("Per-token accuracy % over test lengths 50-500")
    row = next(line for line in lines if line.startswith("| GRU MonoAttn |"))
    assert row.split(" | ")[1] == "80.0 (1/3)"  # Reverse String, below the 90 % mark: not bold
