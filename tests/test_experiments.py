"""Scoring, runs with records, the local and submitit launchers, resuming, the comparison of
option sets and the aggregated tables."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fairseq_cli_helpers import tiny_spec, with_tiny_data
from forked_commands import training_server

from fairseq_monoattn.metrics import (
    Tally,
    edit_distance,
    is_exact_match,
    levenshtein,
    strip_pad_rows,
    wrong_rows,
)
from fairseq_monoattn.modules import compiled
from fairseq_monoattn.scoring import CheckpointError, score
from fairseq_monoattn.scoring import table as scoring_table
from monoattn_lab import aggregate, compare, launch
from monoattn_lab.outdated import check_checkpoint_matches
from monoattn_lab.records import RECORDED_SCORES, load_records, run_seconds
from monoattn_lab.runs import SCORED_FIELDS, rescore, run
from monoattn_lab.spec import RunError, RunSpec, planned_model_config, train_command, training_options

EOS = 2


def test_tally_on_hand_made_hypotheses():
    target = [5, 6, 7, EOS]
    cases = [
        ([5, 6, 7, EOS], True, 0),  # exact
        ([5, 6, EOS], False, 1),  # one token short: cut short
        ([5, 6, 7, 7, EOS], False, 1),  # one too many: EOS must come at the right place; overran
        ([5, 9, 7, EOS], False, 1),  # one substitution
        ([5, 6, 7, 7, 7, 7], False, 3),  # never ended (no EOS), cut by the length limit: overran
        ([8, EOS], False, 3),
        ([EOS], False, 3),  # nothing but EOS: cut short
        ([5, 6, 7], False, 0),  # every token, no EOS: overran, at edit distance 0
        ([5, 7, EOS], False, 1),  # short, but not a prefix: neither
    ]
    tally = Tally()
    for hypothesis, exact, distance in cases:
        assert is_exact_match(hypothesis, target) is exact
        assert edit_distance(hypothesis, target, EOS) == distance
    tally.add([c[0] for c in cases], [target] * len(cases), EOS)
    assert (tally.size, tally.correct, tally.edit_distance, tally.cut_short, tally.overran) == (9, 1, 13, 2, 3)
    assert tally.accuracy == pytest.approx(100 / 9) and tally.mean_edit_distance == pytest.approx(13 / 9)


def test_targets_lose_their_padding_row_by_row_whichever_side_it_is_on():
    """A batch's rows without padding (1), left- or right-padded, a row of only padding included;
    the rows whose hypothesis is not its target, by index."""
    import torch

    batch = torch.tensor([[1, 1, 5, 6, EOS], [5, 6, 7, 8, EOS], [5, EOS, 1, 1, 1], [1, 1, 1, 1, 1]])
    rows = strip_pad_rows(batch, 1)
    assert rows == [row[row.ne(1)].tolist() for row in batch]
    assert rows == [[5, 6, EOS], [5, 6, 7, 8, EOS], [5, EOS], []]
    hypotheses = [[5, 6, EOS], [5, 6, 7, EOS], [5, EOS], [EOS]]
    assert wrong_rows(hypotheses, batch, 1).tolist() == [1, 3]


def test_levenshtein_equals_nltks_edit_distance():
    """The bit-vector distance against NLTK's table (the paper's definition) on random pairs:
    alphabets of 1 to 12 tokens, empty sides, lengths on both sides of the 64-bit word, near-copies
    (a few edits of one sequence, the case scoring meets most) and tokens that are not ints."""
    import random

    from nltk.metrics.distance import edit_distance as nltk_edit_distance

    rng = random.Random(7)
    pairs = [([], []), ([], [3, 4]), ("kitten", "sitting"), (list("flaw"), list("lawn")), ([1] * 70, [1] * 64)]
    for _ in range(500):
        alphabet = rng.choice([1, 2, 3, 10, 12])
        a = [rng.randrange(alphabet) for _ in range(rng.choice([rng.randrange(12), rng.randrange(60, 140)]))]
        b = [rng.randrange(alphabet) for _ in range(rng.choice([rng.randrange(12), rng.randrange(60, 140)]))]
        pairs.append((a, b))
        edited = list(a)
        for _ in range(rng.randrange(4)):  # insert, substitute or delete one token
            edit = rng.choice(["insert", "substitute", "delete"] if edited else ["insert"])
            if edit == "insert":
                edited.insert(rng.randrange(len(edited) + 1), rng.randrange(alphabet))
            elif edit == "substitute":
                edited[rng.randrange(len(edited))] = rng.randrange(alphabet)
            else:
                del edited[rng.randrange(len(edited))]
        pairs.append((a, edited))
    for a, b in pairs:
        assert levenshtein(a, b) == levenshtein(b, a) == nltk_edit_distance(a, b), (a, b)
    assert levenshtein("kitten", "sitting") == 3 and levenshtein([1] * 70, [1] * 64) == 6


@pytest.fixture(scope="module")
def finished(tiny_run):
    """One finished tiny run (conftest.py's, shared with test_faults.py): (work, results, spec, record)."""
    return tiny_run


def test_a_run_trains_scores_and_records(finished):
    import torch

    work, results, spec, record = finished
    assert spec.record_path(results) == results / "copy" / "gru_onestep" / "default" / "seed3.json"
    assert json.loads(spec.record_path(results).read_text()) == record
    assert {s: v["size"] for s, v in record["splits"].items()} == {"test9": 13, "test_iid": 5}
    for counts in record["splits"].values():
        assert set(counts) == set(RECORDED_SCORES)
        assert counts["correct"] + counts["cut_short"] + counts["overran"] <= counts["size"]
    assert record["epochs_run"] == 2 and len(record["valid_accuracy"]) == 2
    assert len(record["valid_direction_gate"]) == 2 and all(0 <= g <= 1 for g in record["valid_direction_gate"])
    assert record["environment"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    built = compiled.kernels is not None and compiled.ENABLED
    assert record["environment"]["kernels"] == ("C++" if built else "Python")
    assert record["training_code"] == ["C++ decoder loop" if built else "Python"]  # a built-in preset
    assert record["user_dir"] is None  # the plugin's own presets
    package = str(Path(compiled.__file__).parents[1])
    head = subprocess.run(["git", "-C", package, "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = record["environment"]["plugin_commit"]
    if head.returncode == 0:  # the plugin runs from a checkout: its commit, marked when the package has changes
        assert commit.split("+")[0] == head.stdout.strip() and commit[40:] in ("", "+changes")
    else:
        assert commit is None
    assert len(record["training_threads"]) == 1 and record["training_threads"][0] >= 1  # one part, not resumed
    assert record["best_valid_accuracy"] == max(record["valid_accuracy"])
    assert set(record["direction_gate"]) == {"test9", "test_iid"}
    assert set(record["attention_peak"]) == {"test9", "test_iid"} and 0 < record["attention_peak"]["test9"] <= 1
    assert 0.0 <= record["direction_gate"]["test9"] <= 1.0
    assert (
        "--max-epoch" in record["train_options"]
        and record["train_options"][record["train_options"].index("--max-epoch") + 1] == "2"
    )
    assert (spec.run_dir(work) / "checkpoints" / "checkpoint_best.pt").is_file()


def test_a_record_keeps_each_splits_per_token_accuracy(finished):
    """The record keeps the scorer's per-token accuracy of each test split (of the target's tokens,
    and with its EOS position), so Delétang et al.'s score (their mean over the test lengths) comes
    from the record alone."""
    from fairseq_monoattn.metrics import mean_per_token_accuracy

    work, results, spec, record = finished
    scored = json.loads((spec.run_dir(work) / "scores.json").read_text())["splits"]
    assert set(record["splits"]) == set(scored) == {"test9", "test_iid"}
    for split, counts in record["splits"].items():
        for key in ("per_token_accuracy", "per_token_accuracy_with_eos"):
            assert counts[key] == scored[split][key] and 0 <= counts[key] <= 100, (split, key)
        if counts["correct"] == counts["size"]:  # every output right: every token right
            assert counts["per_token_accuracy"] == counts["per_token_accuracy_with_eos"] == 100.0
    both = mean_per_token_accuracy(json.loads(spec.record_path(results).read_text())["splits"], ["test9", "test_iid"])
    assert both == pytest.approx((scored["test9"]["per_token_accuracy"] + scored["test_iid"]["per_token_accuracy"]) / 2)


def test_scores_from_before_the_cut_short_counts_still_make_a_record(finished):
    """A run scored by an older scorer and killed before its record: the record is made from its
    scores.json as it is, without training or scoring again.  (The finished run is put back.)"""
    work, results, spec, record = finished
    record_path, scores_file = spec.record_path(results), spec.run_dir(work) / "scores.json"
    saved_record, saved_scores = record_path.read_text(), scores_file.read_text()
    try:
        scores = json.loads(saved_scores)
        for split in scores["splits"].values():  # nor the per-token accuracy and the length oracle, which came later
            del split["cut_short"], split["overran"], split["per_token_accuracy"], split["per_token_accuracy_with_eos"]
            for key in [key for key in split if key.startswith("length_oracle_")]:
                del split[key]
        scores_file.write_text(json.dumps(scores))
        record_path.unlink()
        before = scores_file.stat().st_mtime_ns
        remade = run(spec, work, results)
        assert scores_file.stat().st_mtime_ns == before
        assert remade["splits"] == {
            split: {key: counts[key] for key in ("size", "correct", "accuracy", "mean_edit_distance")}
            for split, counts in record["splits"].items()
        }
    finally:
        scores_file.write_text(saved_scores)
        record_path.write_text(saved_record)


def test_a_recorded_run_is_skipped_and_another_variant_under_its_name_refused(finished):
    work, results, spec, record = finished
    path = spec.record_path(results)
    before = path.stat().st_mtime_ns
    assert run(spec, work, results) == record
    assert path.stat().st_mtime_ns == before
    changed = RunSpec(**{**spec.__dict__, "options": ("--lr", "5e-4")})
    with pytest.raises(RunError, match="another run"):
        run(changed, work, results)
    # and a run folder started with another command is refused, nothing changes
    path.rename(path.with_suffix(".moved"))
    try:
        with pytest.raises(RunError, match="another command"):
            run(changed, work, results)
        assert not path.exists()
    finally:
        path.with_suffix(".moved").rename(path)


def test_rescoring_a_record_adds_what_the_scorer_counts_now_and_keeps_the_rest(finished, tmp_path):
    """A record scored before the length oracle (its scores lack it) gets it from the run's
    checkpoint, the same scores as a run recorded today; everything else of the record is kept; a
    score the scorer now gives otherwise is named.  The run trained again (another training time) is
    taken only where it gives every score of the record.  A work folder whose run is not the
    record's is refused, one without the run leaves it alone."""
    import shutil

    work, results, spec, record = finished
    work, results = shutil.copytree(work, tmp_path / "work"), shutil.copytree(results, tmp_path / "results")
    path = spec.record_path(results)
    older = json.loads(path.read_text())
    for scores in older["splits"].values():
        for key in [key for key in scores if key.startswith("length_oracle_")]:
            del scores[key]
    older["environment"] = {"the machine": "it trained on"}
    path.write_text(json.dumps(older))
    lines = []
    rescored = rescore(spec, work, results, log=lines.append)
    assert json.loads(path.read_text()) == rescored
    assert rescored["splits"] == record["splits"]  # the same checkpoint and scorer: the same numbers
    assert {k: v for k, v in rescored.items() if k not in SCORED_FIELDS} == {
        k: v for k, v in older.items() if k not in SCORED_FIELDS
    }
    assert lines[-1] == f"[{spec.key}] rescored {path}" and not any("changed" in line for line in lines)
    # the same run (its training time too) with a score the scorer now gives otherwise: rewritten, and named
    split = next(iter(older["splits"]))
    older["splits"][split]["correct"] += 1
    path.write_text(json.dumps(older))
    assert rescore(spec, work, results, log=lines.append)["splits"] == record["splits"]
    assert f"[{spec.key}] {split} correct changed with the scorer of today" in lines
    # the run trained again (another time): taken where it gives every score of the record ...
    older["splits"][split]["correct"] -= 1
    older["training_seconds"] += 100.0
    path.write_text(json.dumps(older))
    again = rescore(spec, work, results, log=lines.append)
    assert again["splits"] == record["splits"] and again["training_seconds"] == older["training_seconds"]
    assert lines[-1].endswith(": the run trained again gave every score it records")
    # ... and refused, the record as it was, where one score differs
    older["splits"][split]["correct"] += 1
    path.write_text(json.dumps(older))
    with pytest.raises(RunError, match=f"does not give the scores .*{split} correct"):
        rescore(spec, work, results, log=lines.append)
    assert json.loads(path.read_text()) == older
    # a run folder that holds another training than the record says: refused, the record as it was
    older["best_valid_accuracy"] = 12.5
    path.write_text(json.dumps(older))
    with pytest.raises(RunError, match="its best_valid_accuracy differ"):
        rescore(spec, work, results, log=lines.append)
    assert json.loads(path.read_text()) == older
    assert rescore(spec, tmp_path / "elsewhere", results) is None  # no checkpoint there
    assert json.loads(path.read_text()) == older


def test_rescoring_runs_on_the_records_thread_count_and_gives_this_process_its_own_back(
    finished, tmp_path, monkeypatch
):
    """A run is scored again on the thread count its record names (its worker trained and scored
    on it: another count could sum a float64 decoding in another order), whatever this process has;
    after it, or after a failure in it, the process has its own count again."""
    import shutil

    import torch

    from monoattn_lab import runs

    class Stop(Exception):
        pass

    work, results, spec, _ = finished
    work, results = shutil.copytree(work, tmp_path / "work"), shutil.copytree(results, tmp_path / "results")
    path = spec.record_path(results)
    own = torch.get_num_threads()
    seen = []

    def scoring(*args):
        seen.append(torch.get_num_threads())
        raise Stop

    monkeypatch.setattr(runs, "score_run", scoring)
    for named, expected in (([own + 1], own + 1), ([own, own + 1], own), ([], own)):
        record = json.loads(path.read_text())
        record["training_threads"] = named
        path.write_text(json.dumps(record))
        lines = []
        with pytest.raises(Stop):
            rescore(spec, work, results, log=lines.append)
        assert seen[-1] == expected and torch.get_num_threads() == own
        assert lines[-1].endswith(
            "again" + (f" on {named[0]} thread{'s' if named[0] > 1 else ''}" if len(named) == 1 else "")
        )
    assert runs.recorded_threads({"training_threads": [2]}) == 2 and runs.recorded_threads({}) is None


def test_the_rescore_command_counts_what_it_rescored_and_what_it_left(tmp_path, capsys):
    from monoattn_lab.cli import sweep as sweep_command
    from monoattn_lab.sweeps import SWEEPS

    results = tmp_path / "results"
    spec = SWEEPS["smoke"].specs()[0]
    spec.record_path(results).parent.mkdir(parents=True)
    spec.record_path(results).write_text("{}")  # a record whose run is not in the work folder
    code = sweep_command.main(["rescore", "smoke", "--work", str(tmp_path / "work"), "--results", str(results)])
    assert code == 0 and spec.record_path(results).read_text() == "{}"
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"0 records rescored; 1 left as they were (their checkpoints are not in {tmp_path / 'work'})"
    )


def test_score_counts_every_example_and_matches_written_predictions(finished, tmp_path):
    import torch

    work, _, spec, _ = finished
    checkpoint = spec.run_dir(work) / "checkpoints" / "checkpoint_best.pt"
    data = spec.data_dir(work)
    out = tmp_path / "s.json"
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = score(checkpoint, data / "bin", ["test9"], out, batch_size=8, predictions=True)
    assert not [w for w in caught if "pin_memory" in str(w.message)]  # fairseq's loader asks, no GPU here
    hypotheses = (tmp_path / "s.test9.txt").read_text().splitlines()
    targets = (data / "raw" / "test9.tgt").read_text().splitlines()
    assert len(hypotheses) == 13
    assert results["test9"]["correct"] == sum(h == t for h, t in zip(hypotheses, targets))
    pairs = [(h.split(), t.split()) for h, t in zip(hypotheses, targets)]
    assert results["test9"]["cut_short"] == sum(len(h) < len(t) and t[: len(h)] == h for h, t in pairs)
    assert results["test9"]["overran"] == sum(len(h) > len(t) and h[: len(t)] == t for h, t in pairs)
    assert "| test9 | 13 |" in scoring_table(results)
    assert results["test9"]["direction_gate"]["applies_to"].startswith("cross-attention keys and values")
    # the attention peak equals a recount, example by example, from one unbatched teacher-forced pass each
    from fairseq_monoattn.attention_maps import teacher_forced
    from fairseq_monoattn.scoring import load_checkpoint as load_for_scoring

    models, task, _ = load_for_scoring(checkpoint, data / "bin")
    task.load_dataset("test9")
    peaks = [
        teacher_forced(models[0], item["source"], item["target"])[0].max(dim=-1).values.mean().item()
        for item in (task.dataset("test9")[i] for i in range(13))
    ]
    recorded = results["test9"]["attention_peak"]
    assert recorded["mean"] == pytest.approx(sum(peaks) / 13, abs=1e-5)
    assert (recorded["min"], recorded["max"]) == pytest.approx((min(peaks), max(peaks)), abs=1e-5)
    assert 1 / 12 < recorded["min"] <= recorded["max"] <= 1
    # the gate, read off the same pass, equals the model's own gate on each example alone
    items = [task.dataset("test9")[i]["source"].unsqueeze(0) for i in range(13)]
    gates = [models[0].direction_gate(src, torch.tensor([src.size(1)])).item() for src in items]
    recorded = results["test9"]["direction_gate"]
    assert recorded["mean"] == pytest.approx(sum(gates) / 13, abs=1e-5)
    assert (recorded["min"], recorded["max"]) == pytest.approx((min(gates), max(gates)), abs=1e-5)
    assert recorded["forward_share"] == sum(g > 0.5 for g in gates) / 13
    assert "| attention peak (mean) |" in scoring_table(results)
    # told each target's length (Newman et al.'s oracle), recounted by decoding each example alone
    # told its length: the scorer decodes again only what ended early and cuts the rest
    from fairseq_monoattn.metrics import GreedyDecoder

    wide, _, _ = load_for_scoring(checkpoint, data / "bin", dtype=torch.float64)
    alone = GreedyDecoder(task.target_dictionary, max_len_b=results["test9"]["max_output_len"])
    told = Tally()
    for i in range(13):
        item = task.dataset("test9")[i]
        sample = {
            "net_input": {"src_tokens": item["source"].unsqueeze(0), "src_lengths": torch.tensor([len(item["source"])])}
        }
        output = alone.decode(wide, sample, output_lengths=torch.tensor([len(item["target"]) - 1])).hypotheses[0]
        told.add([output], [item["target"].tolist()], task.target_dictionary.eos())
    counted = results["test9"]
    assert counted["length_oracle_correct"] == told.correct >= counted["correct"] + counted["overran"]
    assert counted["length_oracle_accuracy"] == pytest.approx(told.accuracy)
    assert counted["length_oracle_per_token_accuracy"] == pytest.approx(told.per_token_accuracy)
    assert counted["length_oracle_per_token_accuracy_with_eos"] == pytest.approx(told.per_token_accuracy_with_eos)
    with pytest.raises(CheckpointError, match="exists"):
        score(checkpoint, data / "bin", ["test9"], out)


def test_score_makes_the_folder_of_out_before_it_writes_predictions(finished, tmp_path, capsys):
    """fairseq-monoattn-score --out NEWDIR/x.json --predictions: the folder is made, each split's
    predictions and the scores land in it (the predictions of the first split used to fail)."""
    from fairseq_monoattn.cli.score import main as score_main

    work, _, spec, record = finished
    out = tmp_path / "new" / "deeper" / "x.json"
    checkpoint = spec.run_dir(work) / "checkpoints" / "checkpoint_best.pt"
    argv = ["--checkpoint", checkpoint, "--data", spec.data_dir(work) / "bin", "--splits", "test_iid", "test9"]
    assert score_main([*map(str, argv), "--out", str(out), "--predictions"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["x.json", "x.test9.txt", "x.test_iid.txt"]
    assert len((out.parent / "x.test9.txt").read_text().splitlines()) == 13
    scores = json.loads(out.read_text())["splits"]
    assert {split: scores[split]["correct"] for split in scores} == {
        split: counts["correct"] for split, counts in record["splits"].items()
    }


def hold_run_lock(run_dir):
    """Another process that holds ``run_dir``'s training lock until killed."""
    lock = run_dir / ".lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.long(24)
def test_local_launcher_runs_what_is_missing_once_and_skips_a_run_another_process_is_training(tmp_path):
    """Two sweeps over one work folder: the run whose folder lock another process holds is
    neither trained nor counted as failed, its folder is left as it was, and once the other
    process is gone the run trains as usual; each record is committed (on_record) once, as it
    lands, and a sweep whose runs all have records runs nothing.  The worker's fairseq-train, a
    fork of the worker, trains what the console script does."""
    import torch

    work, results = tmp_path / "work", tmp_path / "results"
    specs = busy, free = with_tiny_data(work, tiny_spec(seed=1, max_epoch=1), tiny_spec(seed=2, max_epoch=1))
    committed = []
    holder = hold_run_lock(busy.run_dir(work))
    try:
        lines = []
        outcome = launch.run_local(
            specs, work, results, jobs=2, on_record=lambda s, p: committed.append(p), log=lines.append
        )
        assert outcome[free.key] == "ok" and outcome[busy.key].startswith("skipped: another process is training it")
        assert lines[-1].endswith("ok. 1/2 runs done, 0 running, 0 left, 1 being trained by another process")
        assert committed == [free.record_path(results)]  # not the skipped run
        assert not busy.record_path(results).exists()
        assert sorted(p.name for p in busy.run_dir(work).iterdir()) == [".lock", "worker.log"]
        assert "is being trained by another process" in (busy.run_dir(work) / "worker.log").read_text()
        with pytest.raises(RunError, match="is being trained by another process"):
            run(busy, work, results)
    finally:
        holder.kill()
        holder.wait()
    outcome = launch.run_local(
        specs, work, results, jobs=1, on_record=lambda s, p: committed.append(p), log=lambda line: None, nice=5
    )
    assert outcome == {s.key: "ok" for s in specs}
    # --nice 5: the worker that trained it lowered its priority first (never above what it started at)
    said = re.search(r"^priority: nice (\d+)", (busy.run_dir(work) / "worker.log").read_text(), re.M)
    assert said and int(said.group(1)) == max(5, os.getpriority(os.PRIO_PROCESS, 0))
    assert sorted(committed) == sorted(s.record_path(results) for s in specs)
    # one job has every core, but the suite runs with OMP_NUM_THREADS=1 (conftest): one thread
    assert json.loads(busy.record_path(results).read_text())["training_threads"] == [1]
    stamps = [s.record_path(results).stat().st_mtime_ns for s in specs]
    lines = []
    assert launch.run_local(specs, work, results, jobs=2, log=lines.append) == outcome
    assert lines == ["2/2 runs done, 0 running, 0 left"]  # nothing ran
    assert [s.record_path(results).stat().st_mtime_ns for s in specs] == stamps
    # the worker's fairseq-train is a fork of the worker; it trains what the console script does
    assert "training (fairseq-train forked from this worker)" in (busy.run_dir(work) / "worker.log").read_text()
    console = tmp_path / "console"
    with_tiny_data(console / "work", busy)
    record = run(busy, console / "work", console / "results")  # this test's process: the command
    assert record["valid_accuracy"] == json.loads(busy.record_path(results).read_text())["valid_accuracy"]
    forked_model, console_model = (
        torch.load(busy.run_dir(w) / "checkpoints" / "checkpoint_best.pt", weights_only=False)["model"]
        for w in (work, console / "work")
    )
    assert forked_model.keys() == console_model.keys()
    assert all(torch.equal(forked_model[k], console_model[k]) for k in forked_model)


def test_a_run_whose_training_logged_no_validation_gets_no_record(tmp_path):
    from monoattn_lab.records import make_record

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "train.log").write_text('{"epoch": 1, "train_loss": "1.2"}\n')  # a training line, no validation
    with pytest.raises(RunError, match=r"train\.log: no validation results in the training's log; no record"):
        make_record(tiny_spec(seed=1, max_epoch=1), run_dir, tmp_path / "data", {})


def test_a_worker_skips_a_run_another_process_is_training_before_it_imports_fairseq(tmp_path, monkeypatch, capsys):
    """The worker asks for its run's lock before importing fairseq for the training (3-5
    CPU-seconds): a run whose lock another process holds ends at once as skipped, with the
    message run() gives; once the lock is free (or the run has a record, run()'s to answer) it goes
    on to the training; without a run folder the question makes nothing."""
    from monoattn_lab import worker
    from monoattn_lab.runs import check_not_busy
    from monoattn_lab.spec import BUSY_EXIT

    class ReachedTheTraining(Exception):
        pass

    def training():
        raise ReachedTheTraining

    monkeypatch.setattr(worker, "forked_training", training)
    work, results = tmp_path / "work", tmp_path / "results"
    spec = tiny_spec(seed=1, max_epoch=1)
    argv = [launch.spec_to_json(spec), str(work), str(results)]
    check_not_busy(spec, work, results)
    assert not work.exists()
    holder = hold_run_lock(spec.run_dir(work))
    try:
        assert worker.main(argv) == BUSY_EXIT
        lock = spec.run_dir(work) / ".lock"
        assert capsys.readouterr().err == (
            f"skipped: {spec.key} is being trained by another process in {spec.run_dir(work)} (it holds {lock}); "
            "nothing was changed\n"
        )
        spec.record_path(results).parent.mkdir(parents=True)
        spec.record_path(results).write_text("{}")
        check_not_busy(spec, work, results)  # a record: no question of the lock
        spec.record_path(results).unlink()
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(ReachedTheTraining):
        worker.main(argv)
    assert sorted(p.name for p in spec.run_dir(work).iterdir()) == [".lock"]


def test_local_runs_share_only_the_cores_the_sweep_may_use(monkeypatch):
    # each job gets its own cores, round robin; more jobs than cores share them
    assert launch.cpu_shares(2, [0, 1]) == [[0], [1]]
    assert launch.cpu_shares(2, [0, 1, 2, 3]) == [[0, 2], [1, 3]]
    assert launch.cpu_shares(3, [0, 1]) == [[0], [1], [0]]
    # by default, the cores this process may run on (`taskset -c 1 fairseq-monoattn-sweep ...`)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {7, 5})
    assert launch.cpu_shares(1) == [[5, 7]]
    assert launch.cpu_shares(2) == [[5], [7]]


def test_a_jobs_threads_are_its_cores_at_most_the_launchers_omp_num_threads():
    assert launch.job_threads([0, 1, 2, 3], {}) == 4
    assert launch.job_threads([0, 1, 2, 3], {"OMP_NUM_THREADS": "2"}) == 2
    assert launch.job_threads([0, 1], {"OMP_NUM_THREADS": "1"}) == 1
    assert launch.job_threads([5], {"OMP_NUM_THREADS": "8"}) == 1
    for ignored in ("", "0", "abc", "4,2"):
        assert launch.job_threads([0, 1], {"OMP_NUM_THREADS": ignored}) == 2


def test_progress_estimates_the_time_left_from_recorded_and_new_runs(tmp_path):
    path = tmp_path / "seed1.json"
    path.write_text(json.dumps({"training_seconds": 540.0, "scoring_seconds": 60.0}))
    assert run_seconds(json.loads(path.read_text())) == 600.0
    progress = launch.Progress(total=4, skipped=1, log=None, past=[run_seconds(json.loads(path.read_text()))])
    assert progress.line(2) == "1/4 runs done, 0 running, 3 left; about 10.0 min a run, 0.2 h left at 2 at once"
    progress.started()
    progress.finished(1800.0, ok=True)  # mean of 600 s and 1800 s: 20 min, 2 left at 2 at once
    assert progress.line(2) == "2/4 runs done, 0 running, 2 left; about 20.0 min a run, 0.3 h left at 2 at once"
    assert launch.Progress(total=1, skipped=1, log=None, past=[600.0]).line(1) == "1/1 runs done, 0 running, 0 left"


def test_progress_counts_a_run_another_process_trains_as_done_once_its_record_lands(tmp_path):
    """A run skipped because another sweep holds its lock is "being trained by another process"
    until that process writes its record, and done from then on, not being trained forever."""
    progress = launch.Progress(total=3, skipped=1, log=None)
    record = tmp_path / "seed2.json"
    progress.started()
    progress.finished(5.0, ok=False, elsewhere=record)
    assert progress.line(1) == "1/3 runs done, 0 running, 1 left, 1 being trained by another process"
    record.write_text("{}")
    assert progress.line(1) == "2/3 runs done, 0 running, 1 left"
    progress.started()
    progress.finished(5.0, ok=False)
    assert progress.line(1) == "2/3 runs done, 0 running, 0 left, 1 failed"


@pytest.mark.long(22)
def test_submitit_local_executor_records_runs_and_skips_a_run_another_process_is_training(tmp_path):
    """Under submitit too a run trains, scores and records (a variant's options in its record);
    a locked run's task ends at once as skipped, not failed, and leaves the run to the process
    that holds it while the other run of the array is recorded; once free it is recorded, and
    with every record there nothing is submitted."""
    submitit = pytest.importorskip("submitit")
    work, results = tmp_path / "work", tmp_path / "results"
    specs = busy, free = with_tiny_data(
        work, tiny_spec(seed=1, max_epoch=1), tiny_spec(seed=2, max_epoch=1, variant="lr", options=("--lr", "2e-3"))
    )
    executor = submitit.LocalExecutor(folder=str(tmp_path / "submitit"))
    executor.update_parameters(timeout_min=10)
    holder = hold_run_lock(busy.run_dir(work))
    try:
        lines = []
        outcomes = launch.run_submitit(specs, work, results, tmp_path / "submitit", executor=executor, log=lines.append)
    finally:
        holder.kill()
        holder.wait()
    assert "is being trained by another process" in outcomes[0]["skipped"] and outcomes[1]["seed"] == 2
    assert outcomes[1]["options"] == ["--lr", "2e-3"]
    assert lines[-1] == "1 runs recorded, 1 skipped (being trained by another process)"
    assert free.record_path(results).exists() and not busy.record_path(results).exists()
    assert sorted(p.name for p in busy.run_dir(work).iterdir()) == [".lock"]
    records = launch.run_submitit(specs, work, results, tmp_path / "submitit", executor=executor, log=lambda line: None)
    assert [r["seed"] for r in records] == [1] and records[0]["options"] == []  # the run without a record only
    assert all(s.record_path(results).exists() for s in specs)
    assert (
        launch.run_submitit(specs, work, results, tmp_path / "submitit", executor=executor, log=lambda line: None) == []
    )


@pytest.mark.long(11)
def test_a_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    work, results = tmp_path / "work", tmp_path / "results"
    (spec,) = with_tiny_data(work, tiny_spec(seed=5, max_epoch=6))
    command = [
        sys.executable,
        "-m",
        "monoattn_lab.worker",
        launch.spec_to_json(spec),
        str(work),
        str(results),
    ]
    child = subprocess.Popen(
        command,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    last = spec.run_dir(work) / "checkpoints" / "checkpoint_last.pt"
    deadline = time.time() + 240
    while not last.exists() and child.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert child.poll() is None, f"the worker ended (exit {child.returncode}) before it could be killed"
    os.killpg(child.pid, signal.SIGKILL)  # the worker and its fairseq-train
    child.wait()
    assert last.exists() and not spec.record_path(results).exists()
    record = run(spec, work, results, forked=training_server())
    log = (spec.run_dir(work) / "stdout.log").read_text()
    restored = re.search(r"Loaded checkpoint \S+ \(epoch (\d+) @", log)
    assert restored and 1 <= int(restored.group(1)) < 6  # resumed, not started again
    assert record["epochs_run"] == 6 and len(record["valid_accuracy"]) == 6


def test_training_time_is_written_while_the_run_goes_on(tmp_path, monkeypatch):
    """A run killed before it ends keeps the time it trained: the time so far (over what earlier
    parts took) is written every TIMING_INTERVAL seconds, not only at the end."""
    from monoattn_lab import runs

    monkeypatch.setattr(runs, "TIMING_INTERVAL", 0.2)
    timing_file = tmp_path / "timing.json"
    waiter = (
        "import json, pathlib, time\n"
        f"path = pathlib.Path({str(timing_file)!r})\n"
        "deadline = time.time() + 60\n"
        "while not path.exists() and time.time() < deadline: time.sleep(0.05)\n"
        "print(json.loads(path.read_text())['training_seconds'])\n"
    )
    timing = {"training_seconds": 100.0}
    with open(tmp_path / "out.log", "w") as out:
        code = runs.run_timed([sys.executable, "-c", waiter], out, timing, timing_file)
    assert code == 0
    seen_while_running = float((tmp_path / "out.log").read_text())
    assert 100.2 <= seen_while_running <= timing["training_seconds"]
    assert json.loads(timing_file.read_text()) == timing


LOWER_PRIORITY_SCRIPT = """
import json, os, subprocess, sys
from monoattn_lab.worker import lower_priority
os.setsid()  # as the launcher starts a worker: a session of its own
said = lower_priority(int(sys.argv[1]))
child = subprocess.run([sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"],
                       capture_output=True, text=True)
group = open("/proc/self/autogroup").read() if os.path.exists("/proc/self/autogroup") else None
print(json.dumps({"said": said, "child": int(child.stdout), "group": group}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice values and sessions as Linux has them")
def test_a_worker_at_lower_priority_takes_its_sessions_share_down_too_and_its_children_inherit_it():
    """--nice N: the worker's own nice value, and where Linux shares the machine between sessions
    first (autogroup) its session's group, which is what decides against work in other sessions;
    what the worker starts (its training) runs at that nice value."""
    started = os.getpriority(os.PRIO_PROCESS, 0)
    target = max(7, started)
    done = subprocess.run([sys.executable, "-c", LOWER_PRIORITY_SCRIPT, "7"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["child"] == target
    assert found["said"].startswith(f"nice {target}")
    grouped = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if grouped.exists() and grouped.read_text().strip() == "1" and found["group"] is not None:
        assert found["group"].split()[-1] == str(target)
        assert found["said"] == f"nice {target}, its session's group at {target}"


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no nice values here")
def test_a_launcher_started_under_nice_passes_its_nice_value_on_to_its_workers():
    """`nice -n 19 fairseq-monoattn-sweep ...` gives way as --nice 19 does: the launcher's own nice
    value goes to each worker, which sets its session's group to it (a higher --nice still wins)."""
    done = subprocess.run(["nice", "-n", "4", sys.executable, "-c",
                           "from monoattn_lab.launch import workers_nice; print(workers_nice(0), workers_nice(9))"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    started = os.getpriority(os.PRIO_PROCESS, 0)
    assert done.stdout.split() == [str(min(19, started + 4)), str(max(9, min(19, started + 4)))], done.stderr


def test_a_run_keeps_the_thread_count_of_each_of_its_parts(tmp_path):
    """The count recorded is the one the child process really has, and a resumed run adds its own
    to the counts of its earlier parts."""
    from monoattn_lab import runs

    child = "import torch; print(torch.get_num_threads())"
    timing = {"training_seconds": 0.0, "threads": [97]}
    with open(tmp_path / "out.log", "w") as out:
        assert runs.run_timed([sys.executable, "-c", child], out, timing, tmp_path / "timing.json") == 0
    child_threads = int((tmp_path / "out.log").read_text().split()[-1])
    assert timing["threads"] == sorted({97, child_threads})
    assert json.loads((tmp_path / "timing.json").read_text())["threads"] == timing["threads"]


FORKED_TRAINING_SCRIPT = """
import json, sys, time
from pathlib import Path
from monoattn_lab import runs
from monoattn_lab.processes import FAIRSEQ_TRAIN, CommandServer, preload_fairseq_train

program, folder = sys.argv[1], Path(sys.argv[2])
preload_fairseq_train()  # as the worker does before its server: each command starts with fairseq imported
unused = CommandServer(FAIRSEQ_TRAIN)
start = time.time()
unused.close()  # the server exits when the pipe closes with no command
closed = time.time() - start
forked = CommandServer(FAIRSEQ_TRAIN)
served = [forked.serves([sys.executable, "-c", "pass"]), forked.serves([program, "data"])]
try:
    forked.start([sys.executable, "-c", "pass"], str(folder / "other.log"))
    refused = False
except ValueError:
    refused = True
codes = []
for attempt in ("first", "second"):  # one server, one command after the other
    with open(folder / "stdout.log", "a") as out:
        out.write(f"-- {attempt}\\n")
        codes.append(runs.run_timed([program, "data", "--arch", "no_such_arch"], out, {"training_seconds": 0.0},
                                    folder / "timing.json", forked))
forked.close()
print(json.dumps({"closed": closed, "served": served, "codes": codes, "refused": refused}))
"""


def test_a_forked_training_fails_as_the_command_does_and_an_unused_server_exits(tmp_path):
    """The worker's CommandServer in a process of its own (a test must not fork pytest's
    worker): an unused server goes at once, a fairseq-train error comes back as the command's exit
    status with its message appended to the log, each time, and the server runs fairseq-train
    only."""
    program = str(Path(sys.executable).parent / "fairseq-train")
    done = subprocess.run(
        [sys.executable, "-c", FORKED_TRAINING_SCRIPT, program, str(tmp_path)],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["closed"] < 5 and result["served"] == [False, True] and result["refused"]
    assert result["codes"] == [2, 2]  # argparse's exit status, as `fairseq-train data --arch no_such_arch` gives
    log = (tmp_path / "stdout.log").read_text().split("-- second\n")
    assert len(log) == 2 and all("invalid choice: 'no_such_arch'" in part for part in log), log
    assert not (tmp_path / "other.log").exists()


TWO_SERVERS_SCRIPT = """
import json, time
from monoattn_lab.processes import CommandServer

first, second = CommandServer({}), CommandServer({})
start = time.time()
first.close()  # the second, forked after it, must not hold the first's request pipe open
closed = time.time() - start
second.close()
print(json.dumps({"closed": closed}))
"""


def test_a_command_server_closed_while_a_later_one_runs_ends():
    """A process with two command servers (in a process of its own, as above): closing the first
    ends it at once, though the second was forked while the first's pipes were open."""
    done = subprocess.run([sys.executable, "-c", TWO_SERVERS_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["closed"] < 5


def test_resuming_a_checkpoint_of_another_model_is_refused(finished, tmp_path):
    """Same command, changed default: the half-trained checkpoint must not be continued."""
    import torch

    work, results = tmp_path / "work", tmp_path / "results"
    (spec,) = with_tiny_data(work, tiny_spec(seed=7))
    checkpoint = torch.load(
        finished[2].run_dir(finished[0]) / "checkpoints" / "checkpoint_last.pt", map_location="cpu", weights_only=False
    )
    assert checkpoint["cfg"]["model"]["location_normalization"] == "softmax"
    checkpoint["cfg"]["model"]["location_normalization"] = "sum"  # as if trained before a default changed
    last = spec.run_dir(work) / "checkpoints" / "checkpoint_last.pt"
    last.parent.mkdir(parents=True)
    torch.save(checkpoint, last)
    before = last.read_bytes()
    with pytest.raises(RunError, match=r"location_normalization: 'sum' in the checkpoint, 'softmax' now"):
        run(spec, work, results)
    assert last.read_bytes() == before and not (spec.run_dir(work) / "train.log").exists()
    assert not spec.record_path(results).exists()


def test_an_option_the_model_does_not_read_does_not_block_resuming(finished, tmp_path):
    """A OneStep checkpoint from before the mix temperature's or the head init's default changed
    continues (OneStep mixes nothing, and its step is its only head vector); a changed step
    temperature, which OneStep reads, is still refused."""
    import torch

    work, _, spec, _ = finished
    checkpoint = torch.load(
        spec.run_dir(work) / "checkpoints" / "checkpoint_last.pt", map_location="cpu", weights_only=False
    )
    command = train_command(spec, spec.data_dir(work), spec.run_dir(work))
    model = checkpoint["cfg"]["model"]
    assert (model["mix_temperature"], model["location_head_init"], model["step_temperature"]) == (1.0, "joint", 5.0)
    model.update(mix_temperature=5.0, location_head_init="per-head")
    last = tmp_path / "checkpoint_last.pt"
    torch.save(checkpoint, last)
    check_checkpoint_matches(last, command)  # no error
    model["step_temperature"] = 2.0
    torch.save(checkpoint, last)
    with pytest.raises(RunError, match=r"step_temperature: 2.0 in the checkpoint, 5.0 now") as refused:
        check_checkpoint_matches(last, command)
    assert "mix_temperature" not in str(refused.value) and "location_head_init" not in str(refused.value)


def test_aggregate_refuses_records_whose_model_changed_since_they_ran(finished, tmp_path, capsys):
    """A record trained under another default than its command builds today is named, with what
    changed, and nothing is written; an option the model does not read does not count."""
    from monoattn_lab.cli.aggregate import main as aggregate_main
    from monoattn_lab.cli.sweep import main as sweep_main

    _, results, spec, record = finished
    moved = tmp_path / "results"
    path = spec.record_path(moved)
    path.parent.mkdir(parents=True)
    out = tmp_path / "RESULTS.md"
    record = json.loads(json.dumps(record))
    record["model_config"]["mix_temperature"] = 5.0  # OneStep mixes nothing
    path.write_text(json.dumps(record))
    assert aggregate_main(["tables", "--results", str(moved), "--update", str(out)]) == 0
    assert out.exists()
    out.unlink()
    record["model_config"]["step_temperature"] = 2.0
    path.write_text(json.dumps(record))
    capsys.readouterr()
    assert aggregate_main(["tables", "--results", str(moved), "--update", str(out)]) == 1
    assert re.search(
        rf"1 records of variant 'default'.*\n  {re.escape(str(path))}: "
        r"step_temperature: 2.0 there, 5.0 now",
        capsys.readouterr().err,
    )
    assert not out.exists()
    assert aggregate_main(["tables", "--results", str(moved), "--update", str(out), "--include-outdated"]) == 0
    assert "Generated from 1 records" in out.read_text()
    capsys.readouterr()
    smoke = spec.record_path(moved).parent / "seed1.json"  # the smoke sweep's copy/OneStep cell
    path.unlink()
    smoke_run = dict(max_epoch=1, stop_after_perfect=0)  # the smoke sweep's budget
    smoke.write_text(json.dumps(dict(record, seed=1, **smoke_run, training_seconds=600.0, scoring_seconds=60.0)))
    sweep_main(["status", "smoke", "--results", str(moved)])
    out = capsys.readouterr().out
    assert re.search(r"outdated: \S+seed1.json \(step_temperature: 2.0 there, 5.0 now\)", out)
    estimate = re.search(
        r"smoke: 1 of (\d+) runs have records in \S+ \(0.2 CPU-hours of training and scoring, 11.0 min a run\); "
        r"(\d+) left, about ([\d.]+) CPU-hours at 11.0 min a run",
        out,
    )  # from the one done run's 600 + 60 s
    total, left, hours = estimate.groups()
    assert int(left) == int(total) - 1 and float(hours) == round(int(left) * 11 / 60, 1)


def test_a_sweep_narrowed_to_some_tasks_and_archs_keeps_its_order_and_names_what_it_lacks(tmp_path, capsys):
    """--task and --arch keep exactly the cells of both lists, in the sweep's order; a name the
    sweep does not have is an error naming the option and the name."""
    from monoattn_lab.cli.sweep import main as sweep_main
    from monoattn_lab.sweeps import get_sweep

    table2 = get_sweep("table2")
    narrowed = table2.only(["inv_reverse_recopy", "recopy"], ["gru_rmonoattn", "gru_monoattn"])
    assert narrowed.cells == (
        ("recopy", "gru_monoattn"),
        ("recopy", "gru_rmonoattn"),
        ("inv_reverse_recopy", "gru_monoattn"),
        ("inv_reverse_recopy", "gru_rmonoattn"),
    )
    assert [(s.task, s.arch, s.seed) for s in narrowed.specs()][:5] == [
        ("recopy", "gru_monoattn", 1),
        ("recopy", "gru_rmonoattn", 1),
        ("inv_reverse_recopy", "gru_monoattn", 1),
        ("inv_reverse_recopy", "gru_rmonoattn", 1),
        ("recopy", "gru_monoattn", 2),
    ]
    assert table2.only(archs=["gru_content"]).cells == tuple((t, "gru_content") for t, _ in table2.cells[::9])
    sweep_main(
        [
            "status",
            "table2",
            "--task",
            "copy",
            "--arch",
            "gru_content",
            "gru_onestep",
            "--seeds",
            "3",
            "--results",
            str(tmp_path),
        ]
    )
    assert capsys.readouterr().out.startswith(f"table2: 0 of 2 runs have records in {tmp_path}; 2 left")
    with pytest.raises(SystemExit) as stopped:
        sweep_main(["status", "table6", "--arch", "gru_monoattn", "gru_relative"])
    assert stopped.value.code == 2
    assert "--arch: table6 has no gru_relative; it has gru_content" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sweep_main(["status", "table6", "--task", "dedup"])
    assert "--task: unknown task 'dedup'" in capsys.readouterr().err


def write_accuracy_record(results, task, arch, seed, accuracy, splits):
    """A scripted record of the default variant at the sweeps' budget: ``accuracy`` on every one of
    ``splits``."""
    from monoattn_lab.spec import RunSpec
    from monoattn_lab.sweeps import MAX_EPOCH, STOP_AFTER_PERFECT

    path = RunSpec(task, arch, seed=seed).record_path(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "task": task,
                "arch": arch,
                "variant": "default",
                "seed": seed,
                "options": [],
                "data_seed": 1,
                "max_epoch": MAX_EPOCH,
                "stop_after_perfect": STOP_AFTER_PERFECT,
                "recipe": "paper" if task != "cfq" else "paper-cfq",
                "splits": {split: {"accuracy": accuracy} for split in splits},
            }
        )
    )


def test_more_seeds_where_different_follows_the_verdict_of_the_sweeps_own_seeds(tmp_path, capsys):
    """--more-seeds-where-different picks the cells whose median over the sweep's seeds (1-3)
    disagrees with the paper, and keeps them when an extra seed's record tips the median over all
    records: OneStep on Copy (the paper 100 everywhere) at 100 / 90 / 0 is "partial"; with seed 4
    at 100 the four-seed median is 95, "solved", yet seed 5 is still planned.  Content (the paper 0)
    at 0 agrees and gets no extra seed."""
    from monoattn_lab.cli.sweep import main as sweep_main

    def write(arch, seed, accuracy):
        write_accuracy_record(tmp_path, "copy", arch, seed, accuracy, ("test15", "test30", "test100"))

    for seed, accuracy in ((1, 100.0), (2, 90.0), (3, 0.0), (4, 100.0)):
        write("gru_onestep", seed, accuracy)
    for seed in (1, 2, 3):
        write("gru_content", seed, 0.0)
    common = ["--task", "copy", "--arch", "gru_content", "gru_onestep", "--results", str(tmp_path)]
    sweep_main(["status", "table2", *common, "--more-seeds-where-different", "4", "5"])
    out = capsys.readouterr().out
    assert out.startswith("1 cells disagree with the paper: adding seeds [4, 5]\n")
    assert (
        f"table2: 7 of 8 runs have records in {tmp_path} (0.0 CPU-hours of training and scoring, 0.0 min a run); "
        f"1 left, about 0.0 CPU-hours at 0.0 min a run"
    ) in out  # records without timings
    sweep_main(["status", "table2", *common, "--more-seeds-where-different", "4", "5", "--seeds", "1", "2"])
    assert capsys.readouterr().out.startswith("0 cells disagree")  # the base is --seeds: 100 / 90, median 95
    write("gru_onestep", 3, 100.0)
    sweep_main(["status", "table2", *common, "--more-seeds-where-different", "4", "5"])
    out = capsys.readouterr().out
    assert out.startswith("0 cells disagree") and "6 of 6 runs" in out


def test_more_seeds_where_different_takes_scan_cells_whose_mean_is_outside_the_papers_two_std(tmp_path, capsys):
    """On SCAN the tables judge a model by its mean against the paper's mean ± 2 std, and the extra
    seeds go where they say **no**: MonoAttn (the paper 14.98 ± 0.15) at 16.53 / 14.80 / 15.64, mean
    15.65, is 0.67 above and outside ±0.30; Content (17.61 ± 4.07) at 12 / 14 / 16 is inside."""
    from monoattn_lab.cli.sweep import main as sweep_main

    def write(arch, seed, accuracy):
        write_accuracy_record(tmp_path, "scan", arch, seed, accuracy, ("test",))

    for seed, accuracy in ((1, 16.53), (2, 14.80), (3, 15.64)):
        write("gru_monoattn", seed, accuracy)
    for seed, accuracy in ((1, 12.0), (2, 14.0), (3, 16.0)):
        write("gru_content", seed, accuracy)
    common = ["--arch", "gru_content", "gru_monoattn", "--results", str(tmp_path)]
    sweep_main(["status", "table3-scan", *common, "--more-seeds-where-different", "4", "5"])
    out = capsys.readouterr().out
    assert out.startswith("1 cells disagree with the paper: adding seeds [4, 5]\n")
    assert (
        f"table3-scan: 6 of 8 runs have records in {tmp_path} (0.0 CPU-hours of training and scoring, 0.0 min a run); "
        f"2 left, about 0.0 CPU-hours at 0.0 min a run"
    ) in out  # records without timings
    write("gru_monoattn", 2, 14.0)  # mean 15.39: still outside
    sweep_main(["status", "table3-scan", *common, "--more-seeds-where-different", "4", "5"])
    assert capsys.readouterr().out.startswith("1 cells disagree")
    write("gru_monoattn", 1, 15.0)  # mean 14.88: inside
    sweep_main(["status", "table3-scan", *common, "--more-seeds-where-different", "4", "5"])
    assert capsys.readouterr().out.startswith("0 cells disagree")


@pytest.mark.long(6)
def test_the_cfq_sweep_prepares_its_data_from_data_dir_and_trains_the_papers_cfq_size(tmp_path, capsys):
    """table3-cfq: the paper's CFQ column (its six models, 3 seeds) under the recipe of its CFQ
    size.  Without --data-dir it stops before any run and names the option, preparing nothing;
    with it the data is prepared once, and a run trains two GRU layers of 128 per direction on
    embeddings of 128 in batches of 128, dropout 0.4."""
    from pathlib import Path

    from monoattn_lab.cli.sweep import main as sweep_main
    from monoattn_lab.paper_values import paper_values
    from monoattn_lab.runs import prepared_data
    from monoattn_lab.sweeps import get_sweep

    sweep = get_sweep("table3-cfq")
    assert list(sweep.cells) == [cell for cell in paper_values().tables["table3-scan"] if cell[0] == "cfq"]
    assert sweep.seeds == (1, 2, 3) and {s.recipe for s in sweep.specs()} == {"paper-cfq"}
    work, results = tmp_path / "work", tmp_path / "results"
    common = ["--work", str(work), "--results", str(results), "--arch", "gru_content", "--seeds", "1"]
    assert sweep_main(["run", "table3-cfq", *common]) == 1
    assert re.search("cfq: cannot prepare .*cfq-data1-v2: cfq needs --data-dir", capsys.readouterr().err)
    assert not (work / "data" / "cfq-data1-v2").exists() and not (work / "runs").exists()
    with pytest.raises(SystemExit):
        sweep_main(["run", "table2", "--data-dir", str(tmp_path), *common[:4]])
    assert "--data-dir: no run of table2 left to run reads it (only cfq do)" in capsys.readouterr().err

    sample = Path(__file__).resolve().parent / "fixtures" / "cfq"
    spec = RunSpec(**{**sweep.specs()[0].__dict__, "max_epoch": 1})
    data = prepared_data(spec, work, sample)
    assert json.loads((data / "manifest.json").read_text())["task"] == "cfq"
    assert prepared_data(spec, work) == data  # prepared once: the source is not needed again
    record = run(spec, work, results, forked=training_server())
    config = record["model_config"]
    assert (
        config["encoder_embed_dim"],
        config["decoder_embed_dim"],
        config["encoder_hidden_size"],
        config["encoder_layers"],
        config["dropout"],
    ) == (128, 128, 128, 2, 0.4)
    options = record["train_options"]
    assert options[options.index("--batch-size") + 1] == "128" and options.count("--batch-size") == 1
    assert record["recipe"] == "paper-cfq" and set(record["splits"]) == {"test"}


def test_records_no_sweep_committed_are_found_and_committed_alone(tmp_path, capsys):
    """A run that finishes after its sweep was stopped writes a record nobody commits; the next
    ``run --commit`` finds exactly the records of its own runs that git lacks or has changed, and
    commits each alone.  Other files (another sweep's record, a staged note) stay as they are."""
    from monoattn_lab.cli.sweep import main as sweep_main
    from monoattn_lab.git_records import commit_record, uncommitted_records

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    results = tmp_path / "results"
    ours = [tiny_spec(seed=s) for s in (1, 2, 3)]
    other = tiny_spec(seed=1, task="reverse_copy")

    def record(spec, **more):  # a record of table2's run of the spec's cell and seed
        budget = {"options": [], "data_seed": 1, "max_epoch": 25, "stop_after_perfect": 3, "recipe": "paper"}
        return json.dumps(
            {
                "task": spec.task,
                "arch": spec.arch,
                "variant": spec.variant,
                "seed": spec.seed,
                "splits": {},
                **budget,
                **more,
            }  # fmt: skip
        )

    for spec in ours + [other]:
        spec.record_path(results).parent.mkdir(parents=True, exist_ok=True)
        spec.record_path(results).write_text(record(spec))
    # scored before the scorer counted all it counts now
    ours[2].record_path(results).write_text(record(ours[2], splits={"test100": {"size": 4, "accuracy": 50.0}}))
    git("add", str(ours[0].record_path(results)))
    git("commit", "-q", "-m", "first")
    ours[1].record_path(results).write_text(record(ours[1], rescored=True))  # untracked; a tracked one changed:
    ours[0].record_path(results).write_text(record(ours[0], rescored=True))
    (tmp_path / "note.txt").write_text("staged, not ours")
    git("add", "note.txt")
    assert uncommitted_records(ours, results) == ours  # seed 1 changed, 2 and 3 untracked
    sweep_main(["status", "table2", "--task", "copy", "--arch", "gru_onestep", "--results", str(results)])
    said = capsys.readouterr().out
    assert "3 of these records are not committed" in said
    assert "1 of these records lack scores the scorer counts now; `fairseq-monoattn-sweep rescore`" in said
    assert uncommitted_records(ours, tmp_path / "elsewhere") == []
    for spec in uncommitted_records(ours, results):
        commit_record(spec, spec.record_path(results))
    assert uncommitted_records(ours, results) == []
    assert uncommitted_records([other], results) == [other]
    log = git("log", "--format=%s", "--name-only").split()
    assert log.count("results:") == 3 and "note.txt" not in log
    assert git("status", "--porcelain").splitlines() == ["A  note.txt", "?? results/reverse_copy/"]
    assert git("ls-files", "--others", "--", "results").strip() == str(other.record_path(results).relative_to(tmp_path))


@pytest.mark.long(19)
def test_comparison_puts_variants_side_by_side(tmp_path):
    from monoattn_lab.cli.common import parse_variant

    work, results = tmp_path / "work", tmp_path / "results"
    option_sets = dict([parse_variant("a="), parse_variant("b=--linear-init xavier")])
    with_tiny_data(work, *compare.comparison_specs("copy", "gru_onestep", [1], option_sets, 1))
    table, outcome = compare.compare(
        "copy", "gru_onestep", [1], option_sets, 1, work, results, jobs=2, log=lambda line: None
    )
    assert set(outcome.values()) == {"ok"}
    records = {r["variant"]: r for r in load_records(results)}
    assert set(records) == {"a", "b"} and records["b"]["options"] == ["--linear-init", "xavier"]
    row = next(line for line in table.splitlines() if line.startswith("| 1 |"))
    for name in ("a", "b"):
        assert f"{records[name]['splits']['test9']['accuracy']:.4g}" in row
    with pytest.raises(ValueError, match="NAME=OPTIONS"):
        parse_variant("--lr 1")


# --- tables from records ----------------------------------------------------------------------


def record(task, arch, seed, accuracies, variant="default", edit=0.0):
    return {
        "task": task,
        "arch": arch,
        "seed": seed,
        "variant": variant,
        "options": [],
        "max_epoch": 25,
        "stop_after_perfect": 3,
        "recipe": "paper",
        "epochs_run": 5,
        "best_epoch": 4,
        "training_seconds": 60.0,
        "scoring_seconds": 6.0,
        "direction_gate": None,
        "splits": {
            split: {"size": 2000, "correct": int(20 * a), "accuracy": a, "mean_edit_distance": edit}
            for split, a in accuracies.items()
        },
    }


def test_aggregate_tables_equal_a_recount_of_the_records():
    records = [
        record("recopy", "gru_onestep", seed, {"test15": a15, "test30": a30, "test100": a100})
        for seed, (a15, a30, a100) in zip([1, 2, 3], [(100, 100, 90), (50, 20, 0), (99, 98, 97)])
    ]
    records += [
        record("recopy", "gru_relative", seed, {"test15": a, "test30": 0, "test100": 0})
        for seed, a in zip([1, 2, 3], [60, 10, 40])
    ]
    records += [record("scan", "gru_content", seed, {"test": a}) for seed, a in zip([1, 2], [10.0, 20.0])]
    records += [record("scan", "gru_relative", 1, {"test": 40.0})]
    records += [record("recopy", "gru_onestep", 9, {"test15": 0, "test30": 0, "test100": 0}, variant="other")]
    text = aggregate.render(records)
    # medians (the paper: OneStep 100/100/100 solved; Relative 43.1/0/0: partial, failed, failed)
    assert "| gru_onestep | 3 | 99 (100) | 98 (100) | 90 (100) | **no** (test100) |" in text
    assert "| gru_relative | 3 | 40 (43.1) | 0 (0) | 0 (0) | yes |" in text
    # SCAN: mean ± sample std, and whether it is within the paper's mean ± 2 std (17.61 ± 4.07:
    # 15 is; 19.21 ± 5.52: 40 is not); one seed has no std
    assert "| gru_content | 2 | 15.00 ± 7.07 (17.61 ± 4.07) | 0.00 ± 0.00 | yes |" in text
    assert "| gru_relative | 1 | 40.00 (19.21 ± 5.52) | 0.00 | **no** |" in text
    assert "1 of 2 models with a paper value have their mean within the paper's mean ± 2 std" in text
    assert "**1 of 2 cells (task, model) reproduce the paper's verdict at every length**" in text
    assert "5 of 6 cell-lengths" in text
    assert "9 runs" in text  # the other variant is not counted


def test_aggregate_says_so_when_no_cell_is_in_the_paper():
    """A model the paper did not run (here a Transformer preset) gets its tables, and no
    "0 of 0 cells reproduce" line."""
    records = [
        record("recopy", "transformer_onestep", seed, {"test15": 100, "test30": 90, "test100": 0}) for seed in (1, 2)
    ]
    text = aggregate.render(records)
    assert "0 of 0 cells" not in text and "None of these cells (task, model) is in the paper" in text
    assert "| transformer_onestep | 2 | 100 | 90 | 0 |" in text


def test_the_direction_table_counts_runs_reading_their_tasks_way():
    """g > 0.5 (median over the test splits, test_iid aside) reads forward; Copy is read forward
    and Reverse Lookup mirrored; PosRetrieve (no one way) and runs without a gate are not counted."""

    def gated(task, arch, seed, accuracies, **gates):
        return dict(record(task, arch, seed, accuracies), direction_gate=gates)

    records = [
        gated(
            "copy",
            "gru_monoattn",
            1,
            {"test15": 100, "test30": 100, "test100": 99},
            test15=0.9,
            test30=0.8,
            test100=0.2,
            test_iid=0.0,
        ),  # median 0.8: forward, the right way
        gated(
            "copy",
            "gru_monoattn",
            2,
            {"test15": 1, "test30": 0, "test100": 0},
            test15=0.1,
            test30=0.6,
            test100=0.2,
            test_iid=1.0,
        ),  # median 0.2: reversed
        gated("reverse_lookup", "gru_monoattn", 1, {"test7": 90, "test9": 12.5, "test11": 0}, test7=0.1),
        gated("posretrieve", "gru_monoattn", 1, {"test15": 0}, test15=0.9),
        record("copy", "gru_monoattn", 3, {"test15": 100}),
        record("copy", "gru_content", 1, {"test15": 100}),
    ]
    assert [aggregate.gate_reading(r) for r in records] == ["forward", "reversed", "reversed", "forward", None, None]
    table = aggregate.direction_table(aggregate.collect(records))
    assert table.splitlines()[-1] == "| gru_monoattn | 2 of 3 | Copy seed 2 (1 / 0 / 0) |"
    assert "gru_content" not in table
    assert table in aggregate.render(records)
    assert aggregate.direction_table(aggregate.collect(records[-1:])) == ""


def test_each_task_with_a_reading_direction_starts_its_output_at_that_end():
    """TASKS[task].reading is the data's own rule: a forward task's first output comes from the
    first input token, a reversed one's from the last (Lookup: the bits, first or before the '.')."""
    from fairseq_monoattn.catalog import TASKS
    from fairseq_monoattn.data import digits, lookup

    x = list("3859016")
    for task, rule in digits.RULES.items():
        source, target = rule(x)
        first_input = {"forward": source[0], "reversed": source[-1], None: None}[TASKS[task].reading]
        if TASKS[task].reading is not None:
            assert target[0] == first_input, task
    assert TASKS["posretrieve"].reading is None  # it reads the position each digit names
    assert lookup.source_tokens("101", ["t1", "t2"], reverse=False)[0] == "101" and TASKS["lookup"].reading == "forward"
    assert lookup.source_tokens("101", ["t1", "t2"], reverse=True)[-2] == "101"
    assert TASKS["reverse_lookup"].reading == "reversed"


def test_length_curves_are_median_and_range_of_the_seeds_and_drawn_per_task(tmp_path):
    from monoattn_lab import plots

    records = [
        record("recopy", "gru_onestep", seed, {"test15": a15, "test100": a100, "test_iid": 100})
        for seed, (a15, a100) in zip([1, 2, 3], [(100, 90), (50, 0), (99, 97)])
    ]
    records += [
        record("recopy", "gru_onestep", 4, {"test15": 0, "test100": 0}, variant="other"),
        record("copy", "gru_content", 1, {"test15": 3}),
    ]  # one length: no curve to draw
    assert plots.curves(records, "recopy") == {"gru_onestep": [(15, 99, 50, 100, 3), (100, 90, 0, 97, 3)]}
    assert plots.curves(records, "recopy", "other") == {"gru_onestep": [(15, 0, 0, 0, 1), (100, 0, 0, 0, 1)]}
    assert plots.curves(records, "recopy", ["default", "other"]) == {
        "gru_onestep · default": [(15, 99, 50, 100, 3), (100, 90, 0, 97, 3)],
        "gru_onestep · other": [(15, 0, 0, 0, 1), (100, 0, 0, 0, 1)],
    }
    both = plots.plot_all(records, tmp_path / "both", ["default", "other"])
    assert both == [tmp_path / "both" / "length_recopy.png"]
    paths = plots.plot_all(records, tmp_path / "figures")
    assert paths == [tmp_path / "figures" / "length_recopy.png"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = paths[0].read_bytes()
    assert plots.plot_all(records, tmp_path / "figures") == paths and paths[0].read_bytes() == first  # reproducible


def test_update_keeps_the_hand_written_text(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# Title\n\nmy analysis\n")
    aggregate.update_file(path, "table one\n")
    aggregate.update_file(path, "table two\n")
    text = path.read_text()
    assert text.startswith("# Title\n\nmy analysis\n") and "table two" in text and "table one" not in text
    assert text.count(aggregate.BEGIN) == 1


def test_dedupe_runs_keep_the_source_end_marker_unless_a_variant_drops_it(tmp_path):
    """The authors' DeDupe sources end in <eos>: a DeDupe run's GRU keeps fairseq's source </s>
    (--source-eos True after the recipe), a variant can still drop it, other tasks keep the
    presets' value, and the record's options are the command's.  fairseq's Transformer, which
    has no such option (it always keeps the </s>), is not given it."""
    work = tmp_path / "work"

    def planned(spec):
        command = train_command(spec, spec.data_dir(work), spec.run_dir(work))
        for word in training_options(spec):
            assert word in command
        return planned_model_config(command)["source_eos"], command

    kept, command = planned(RunSpec(task="dedupe", arch="gru_onestep", seed=1))
    assert kept is True and command[command.index("--source-eos") + 1] == "True"
    assert command.index("--source-eos") > command.index("--max-epoch")  # after the recipe
    dropped = RunSpec(task="dedupe", arch="gru_onestep", seed=1, variant="v", options=("--source-eos", "False"))
    assert planned(dropped)[0] is False
    assert training_options(dropped)[-4:] == ["--source-eos", "True", "--source-eos", "False"]
    copy_kept, copy_command = planned(RunSpec(task="copy", arch="gru_onestep", seed=1))
    assert copy_kept is False and "--source-eos" not in copy_command
    transformer = RunSpec(task="dedupe", arch="transformer_onestep", seed=1)
    assert "--source-eos" not in train_command(transformer, tmp_path / "data", tmp_path / "run")
    assert "--source-eos" not in training_options(transformer)


@pytest.mark.long(8)
def test_a_transformer_run_is_recorded_and_its_model_planned(tmp_path):
    """The Transformer presets go through runs and records too: the record keeps the model's own
    options (not the whole command line), and its command plans the same model."""
    from monoattn_lab.outdated import outdated_records

    work, results = tmp_path / "work", tmp_path / "results"
    (spec,) = with_tiny_data(work, tiny_spec(arch="transformer_onestep", max_epoch=1))
    record = run(spec, work, results, forked=training_server())
    config = record["model_config"]
    assert config["_name"] == "transformer_onestep" and config["location_layers"] == "last"
    assert config["step_activation"] == "sigmoid" and "lr" not in config and "save_dir" not in config
    assert outdated_records([record]) == []
    changed = json.loads(json.dumps(record))
    changed["model_config"]["step_activation"] = "relu"
    assert [c for _, c in outdated_records([changed])] == [{"step_activation": ("relu", "sigmoid")}]


def test_variants_side_by_side_from_records(tmp_path, capsys):
    """aggregate variants: per cell with records of at least two of the variants named,
    the median at the paper's lengths and the seeds solved everywhere ("not run" for a variant
    without records); a cell of one variant alone is left out."""
    from monoattn_lab.cli.aggregate import main as aggregate_main

    def write(task, arch, variant, seed, accuracies):
        splits = ("test15", "test30", "test100")
        path = tmp_path / task / arch / variant / f"seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"task": task, "arch": arch, "variant": variant, "seed": seed,
                                    "splits": {s: {"accuracy": a} for s, a in zip(splits, accuracies)}}))  # fmt: skip

    write("inv_recopy", "gru_monoattn", "default", 1, (100, 99, 98))
    write("inv_recopy", "gru_monoattn", "default", 2, (100, 90, 10))
    write("inv_recopy", "gru_monoattn", "other", 1, (100, 100, 100))
    write("recopy", "gru_onestep", "default", 1, (100, 100, 100))  # no "other": left out
    assert aggregate_main(["variants", "default", "other", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[2]
        == "| Inv ReCopy | gru_monoattn | 100 / 94.5 / 54 (1 of 2) | 100 / 100 / 100 (1 of 1) | 100 / 100 / 98.8 |"
    )
    assert len(out) == 3
    assert aggregate_main(["variants", "default", "third", "other", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == (
        "| Inv ReCopy | gru_monoattn | 100 / 94.5 / 54 (1 of 2) | not run | 100 / 100 / 100 (1 of 1) "
        "| 100 / 100 / 98.8 |"
    )
    assert len(out) == 3


def test_release_records_beside_the_paper_and_the_plugin(tmp_path, capsys):
    """aggregate release: per cell the release ran, the paper's value, the release's median over
    its runs and the plugin's median over its seeds, how many runs of each have the paper's verdict
    at every length, Fisher's p that both have the same share of such runs, and which of the two
    medians reaches another verdict; then how the cells where the plugin differs divide (the release
    differs too, both split by seed, no run of the plugin agrees, shares apart, not run)."""
    from monoattn_lab.cli.aggregate import main as aggregate_main
    from monoattn_lab.paper_values import paper_value

    splits = ("test15", "test30", "test100")
    plugin, release = tmp_path / "plugin", tmp_path / "release"

    def plugin_runs(arch, *runs):
        for seed, accuracies in enumerate(runs, start=1):
            path = plugin / "copy" / arch / "default" / f"seed{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            by_split = {s: {"accuracy": a} for s, a in zip(splits, accuracies)}
            path.write_text(json.dumps({"task": "copy", "arch": arch, "variant": "default", "seed": seed,
                                        "splits": by_split}))  # fmt: skip

    def release_runs(model, preset, *runs):
        for run_number, accuracies in enumerate(runs):
            path = release / "copy" / model / f"seed{run_number}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"task": "copy", "plugin_preset": preset,
                                        "test_accuracy": dict(zip(splits, accuracies))}))  # fmt: skip

    # the paper fails Mix OneStep on Copy; both programs solve it
    plugin_runs("gru_mix_onestep", (100, 100, 100), (100, 100, 96))
    release_runs("BiGRU_MixOneStep", "gru_mix_onestep", (100, 100, 100), (100, 99, 98), (90, 0, 0))
    # the paper solves the other three: OneStep fails in every seed of the plugin and in one run of the release
    plugin_runs("gru_onestep", (0, 0, 0))
    release_runs("BiGRU_OneStep", "gru_onestep", (100, 100, 100), (100, 100, 99), (0, 0, 0))
    # Relative: both programs have runs on both sides; the medians part
    plugin_runs("gru_relative", (100, 100, 100), (0, 0, 0), (0, 0, 0))
    release_runs("BiGRUrel", "gru_relative", (100, 100, 100), (0, 0, 0), (100, 100, 100))
    # MonoAttn, where 5 runs of the release have the paper's verdict and none of the plugin's 5
    plugin_runs("gru_monoattn", *[(0, 0, 0)] * 5)
    release_runs("BiGRU_MonoAttn", "gru_monoattn", *[(100, 100, 100)] * 5)
    # not run by the release: listed when the plugin differs (Bi-Relative), left out when it agrees (Content)
    plugin_runs("gru_birelative", (0, 0, 0))
    plugin_runs("gru_content", (0, 0, 0))
    assert aggregate_main(["release", str(release), "--results", str(plugin)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 9
    assert paper_value("copy", "gru_mix_onestep", "test15") < 50  # the paper reports this cell as failing
    rows = {tuple(c.strip() for c in line.strip("|").split("|"))[1]: [c.strip() for c in line.strip("|").split("|")]
            for line in out[2:7]}  # fmt: skip
    assert rows["gru_mix_onestep"][3:] == ["100 / 99 / 98 (3)", "100 / 100 / 98 (2)", "0 of 3, 0 of 2", "1",
                                           "release and plugin"]  # fmt: skip
    assert rows["gru_onestep"][3:] == ["100 / 100 / 99 (3)", "0 / 0 / 0 (1)", "2 of 3, 0 of 1", "1", "plugin"]
    assert rows["gru_relative"][3:] == ["100 / 100 / 100 (3)", "0 / 0 / 0 (3)", "2 of 3, 1 of 3", "1", "plugin"]
    # 5 of 5 against 0 of 5: p = 2 / C(10, 5) = 2 / 252
    assert rows["gru_monoattn"][3:] == ["100 / 100 / 100 (5)", "0 / 0 / 0 (5)", "5 of 5, 0 of 5", "0.0079", "plugin"]
    assert rows["gru_birelative"][3:] == ["not run", "0 / 0 / 0 (1)", "-, 0 of 1", "-", "plugin"]
    assert out[8] == (
        "Of the 5 cells whose plugin records differ from the paper, the release ran 4: it differs from the paper "
        "too in 1, agrees with it in 3 (in 1 of them both programs have runs with and runs without the paper's "
        "verdict; in 2 no run of the plugin has it; in 1 the two programs' shares of runs with the paper's verdict "
        "differ, p < 0.05); 1 not run."
    )

    # a variant's records beside the release: its own runs, only the cells it has
    path = plugin / "copy" / "gru_onestep" / "torch-adamw" / "seed1.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"task": "copy", "arch": "gru_onestep", "variant": "torch-adamw", "seed": 1,
                                "splits": {s: {"accuracy": 100} for s in splits}}))  # fmt: skip
    assert aggregate_main(["release", str(release), "--results", str(plugin), "--variant", "torch-adamw"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "the plugin (torch-adamw): median (seeds)" in out[0] and len(out) == 5
    assert out[2].startswith("| Copy | gru_onestep |") and out[2].endswith(
        "| 100 / 100 / 99 (3) | 100 / 100 / 100 (1) | 2 of 3, 1 of 1 | 1 | neither |"
    )
    assert out[4].startswith("Of the 0 cells whose plugin records (torch-adamw) differ from the paper")
    with pytest.raises(SystemExit):
        aggregate_main(["release", str(release), "--results", str(plugin), "--variant", "adamw"])
    assert "--variant 'adamw': no records of it" in capsys.readouterr().err

    (release / "copy" / "BiGRU_MixOneStep" / "seed1.json").write_text("{")
    assert aggregate_main(["release", str(release), "--results", str(plugin)]) == 1
    assert "seed1.json" in capsys.readouterr().err


def test_records_trained_again_are_compared_run_by_run(tmp_path, capsys):
    """aggregate against: the runs both folders have (task, model, variant, seed), a row for each
    run whose verdict changed at a paper length, the count of kept runs and run-lengths, each set's
    runs with the paper's verdict, and each set's CPU-hours; runs in only one folder are left out."""
    from monoattn_lab.cli.aggregate import main as aggregate_main

    def write(folder, rows):
        for row in rows:
            path = folder / row["task"] / row["arch"] / row["variant"] / f"seed{row['seed']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(row))

    def run(arch, seed, accuracies, seconds=60.0, variant="default"):
        row = record("copy", arch, seed, dict(zip(("test15", "test30", "test100"), accuracies)), variant=variant)
        row["training_seconds"], row["scoring_seconds"] = seconds, 0.0
        return row

    earlier, again = tmp_path / "earlier", tmp_path / "again"
    # the paper: Copy OneStep 100 / 100 / 100 (solved), Mix OneStep 2.6 / 0 / 0 (failed)
    write(earlier, [run("gru_onestep", 1, (100, 100, 100), 3600), run("gru_onestep", 2, (100, 100, 100), 3600),
                    run("gru_mix_onestep", 1, (0, 0, 0), 1800), run("gru_content", 1, (0, 0, 0))])  # fmt: skip
    write(again, [run("gru_onestep", 1, (100, 100, 97), 1800), run("gru_onestep", 2, (100, 60, 0), 1800),
                  run("gru_mix_onestep", 1, (0, 0, 0), 900), run("gru_relative", 1, (0, 0, 0)),
                  run("gru_onestep", 1, (0, 0, 0), variant="other")])  # fmt: skip
    assert aggregate_main(["against", str(earlier), "--results", str(again)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[2:] == [
        "| Copy | gru_onestep | 2 | 100 / 100 / 100 | 100 / 60 / 0 | yes | no |",
        "",
        "3 runs in both sets: 2 kept their verdict at every length the paper reports (7 of 9 run-lengths); 1 "
        "changed (above). The paper's verdict at every length: 3 of the earlier runs, 2 of the runs again. Training "
        "and scoring: 2.50 CPU-hours earlier, 1.25 again (0.50 of the earlier).",
    ]
    # --seeds: only those seeds' runs are paired (seed 1's OneStep kept its verdict, 97 at 100)
    assert aggregate_main(["against", str(earlier), "--results", str(again), "--seeds", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("2 runs in both sets: 2 kept their verdict at every length the paper reports (6 of 6 ")
    assert "run-lengths); 0 changed" in last
    with pytest.raises(SystemExit):
        aggregate_main(["against", str(earlier), "--results", str(again), "--seeds", "7", "8"])
    assert "--seeds 7 8: no records of them under" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        aggregate_main(["against", str(tmp_path / "missing"), "--results", str(again)])
    error = capsys.readouterr().err
    assert "against" in error and "missing: no such folder" in error


def test_fishers_exact_test_gives_the_textbook_values():
    """Two-sided p: the lady tasting tea (3 of 3 against 0 of 3: 2 / 20), 5 of 5 against 0 of 5
    (2 / 252), Fisher's own [[1, 9], [11, 3]] (0.002759), and 1 for tables as likely as any."""
    from monoattn_lab.aggregate import fisher_exact

    assert fisher_exact(3, 0, 0, 3) == pytest.approx(0.1)
    assert fisher_exact(5, 0, 0, 5) == pytest.approx(2 / 252)
    assert fisher_exact(1, 9, 11, 3) == pytest.approx(0.0027594562)
    assert fisher_exact(2, 1, 1, 2) == pytest.approx(1.0)
    assert fisher_exact(0, 3, 0, 2) == 1.0


def test_a_sweep_writes_to_its_own_results_folder_unless_told(tmp_path, monkeypatch, capsys):
    """The paper's sweeps default to results/paper (what aggregate tables), the Transformer's to
    results/transformer, so that they never mix into the paper's tables; --results overrides both."""
    from monoattn_lab.cli.sweep import main as sweep_main

    monkeypatch.chdir(tmp_path)
    for sweep, folder in (("table2", "results/paper"), ("transformer", "results/transformer")):
        sweep_main(["status", sweep])
        assert f"runs have records in {folder};" in capsys.readouterr().out
    sweep_main(["status", "transformer", "--results", "elsewhere"])
    assert "runs have records in elsewhere;" in capsys.readouterr().out


def test_another_data_seed_never_shares_a_run_folder_or_passes_for_a_recorded_run(finished):
    """A run of data seed 2 has its own run folder (it cannot resume data seed 1's checkpoints), and
    a results folder holding the data-seed-1 record of the same run is an error naming that file,
    not a run counted as done."""
    work, results, spec, _ = finished
    other = RunSpec(**{**spec.__dict__, "data_seed": 2})
    assert other.run_dir(work) != spec.run_dir(work) and other.run_dir(work).name == f"data2-seed{spec.seed}"
    assert other.record_path(results) == spec.record_path(results)
    lines = []
    outcome = launch.run_local([other], work, results, jobs=1, log=lines.append)
    assert outcome[other.key].startswith(f"failed: {spec.record_path(results)} records another run")
    assert "'data_seed': 1" in outcome[other.key] and not other.run_dir(work).exists()


@pytest.mark.parametrize(
    "argv, named",
    [
        (["run", "copy", "--arch", "gru_onestep", "--max-epoch", "0"], "argument --max-epoch: must be at least 1"),
        (["run", "copy", "--arch", "gru_onestep", "--seeds", "1", "-1"], "argument --seeds: must be at least 0"),
        (["run", "copy", "--arch", "gru_onestep", "--jobs", "0"], "argument --jobs: must be at least 1"),
        (["run", "copy", "--arch", "gru_onestep", "--data-seed", "-2"], "argument --data-seed: must be at least 0"),
        (
            ["compare", "copy", "--arch", "gru_onestep", "--variant", "a=", "--variant", "b=", "--max-epoch", "0"],
            "argument --max-epoch: must be at least 1",
        ),  # fmt: skip
        (
            ["compare", "copy", "--arch", "gru_onestep", "--variant", "a=", "--variant", "b=", "--jobs", "0"],
            "argument --jobs: must be at least 1",
        ),  # fmt: skip
        (["sweep", "run", "smoke", "--seeds", "-1"], "argument --seeds: must be at least 0"),
        (["sweep", "run", "smoke", "--jobs", "0"], "argument --jobs: must be at least 1"),
        (["sweep", "run", "smoke", "--jobs", "two"], "argument --jobs: not a whole number: 'two'"),
        (["sweep", "run", "smoke", "--nice", "20"], "argument --nice: must be at most 19"),
        (["run", "copy", "--arch", "gru_onestep", "--nice", "-1"], "argument --nice: must be at least 0"),
        (["sweep", "run", "smoke", "--slurm", "--nice", "5"], "--nice is for runs on this machine"),
    ],
    ids=[
        "run-epochs",
        "run-seeds",
        "run-jobs",
        "run-data-seed",
        "compare-epochs",
        "compare-jobs",
        "sweep-seeds",
        "sweep-jobs",
        "sweep-jobs-word",
        "sweep-nice",
        "run-nice",
        "sweep-nice-slurm",
    ],  # fmt: skip
)
def test_a_budget_seed_or_job_count_that_means_something_else_is_a_usage_error_before_any_work(
    tmp_path, monkeypatch, capsys, argv, named
):
    """--max-epoch 0 (fairseq-train's "no limit": a run that never ends), a negative seed (which
    failed in the worker, after making its folder), --jobs 0 (a traceback): one line naming the
    option, exit status 2, nothing made."""
    import importlib

    monkeypatch.chdir(tmp_path)
    main = importlib.import_module(f"monoattn_lab.cli.{argv[0]}").main
    with pytest.raises(SystemExit) as stopped:
        main(argv[1:] + ["--work", "w", "--results", "r"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and named in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.long(15)
def test_the_smoke_sweep_runs_in_a_folder_whose_results_hold_the_papers_runs_of_its_cells(
    finished, tmp_path, monkeypatch, capsys
):
    """In the repository root, results/paper holds the 25-epoch runs of the smoke sweep's cells: the
    smoke sweep's one-epoch records go to WORK/smoke-results and the paper's are left alone; the
    status of the smoke sweep over results/paper does not count a paper run as its own."""
    from monoattn_lab.cli.sweep import main as sweep_main

    monkeypatch.chdir(tmp_path)
    smoke = tiny_spec(seed=1, max_epoch=1)
    paper = smoke.record_path(Path("results/paper"))
    paper.parent.mkdir(parents=True)
    paper.write_text(json.dumps(dict(finished[3], seed=1, max_epoch=25, stop_after_perfect=3)))
    before = paper.read_text()
    with_tiny_data(Path("work"), smoke)
    assert sweep_main(["status", "smoke", "--task", "copy"]) == 0
    assert "smoke: 0 of 1 runs have records in work/smoke-results; 1 left" in capsys.readouterr().out
    assert sweep_main(["status", "smoke", "--task", "copy", "--results", "results/paper"]) == 0
    out = capsys.readouterr().out
    assert "smoke: 0 of 1 runs have records in results/paper" in out
    assert f"not this sweep's run: {paper} records another run" in out
    assert sweep_main(["run", "smoke", "--task", "copy"]) == 0
    record = json.loads(smoke.record_path(Path("work/smoke-results")).read_text())
    assert (record["max_epoch"], record["epochs_run"], record["seed"]) == (1, 1, 1)
    assert paper.read_text() == before
    assert sweep_main(["status", "smoke", "--task", "copy"]) == 0
    assert "smoke: 1 of 1 runs have records in work/smoke-results" in capsys.readouterr().out


def test_a_record_that_lies_elsewhere_than_its_contents_say_is_named_and_counted_nowhere(finished, tmp_path, capsys):
    """A copy of copy/gru_onestep/default/seed3.json put at another model's, variant's or seed's
    place, or beside itself under another name: each is named in one line and left out, the tables
    count the run once, and a run whose place holds another run's record is not taken as done."""
    import shutil

    from monoattn_lab.cli.aggregate import main as aggregate_main
    from monoattn_lab.records import read_records

    _, results, spec, record = finished
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    original = spec.record_path(copy)
    misplaced = [
        copy / "copy" / "gru_locattn" / "default" / "seed2.json",
        copy / "copy" / "gru_onestep" / "other" / "seed3.json",
        copy / "copy" / "gru_onestep" / "default" / "seed4.json",
        copy / "copy" / "gru_onestep" / "default" / "seed3-before.json",
    ]
    for path in misplaced:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(original, path)
    records, problems = read_records(copy)
    assert records == [record]
    assert sorted(problems) == sorted(
        f"{path}: it is the record of copy/gru_onestep/default/seed3, whose place is {original}; left out "
        f"(move it there, or edit what it says to fit its place, or delete a copy)"
        for path in misplaced
    )
    out = tmp_path / "RESULTS.md"
    assert aggregate_main(["tables", "--results", str(copy), "--update", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert sorted(line for line in err if line.startswith("unreadable record:")) == sorted(
        f"unreadable record: {problem}" for problem in problems
    )
    assert "Generated from 1 records" in out.read_text()
    # a spec whose place holds the copy: not done, never trained over
    locattn = RunSpec(**{**spec.__dict__, "arch": "gru_locattn", "seed": 2})
    outcome = launch.run_local([locattn], tmp_path / "work", copy, log=lambda line: None)
    assert outcome[locattn.key].startswith(f"failed: {misplaced[0]} records another run")
    assert not (tmp_path / "work").exists()


def test_an_outdated_record_moved_to_a_variant_of_its_own_as_the_docs_say_is_tabled_and_reused(
    finished, tmp_path, capsys
):
    """docs/experiments.md's three steps for a refused record (move it, set its variant, add the
    options the refusal lists): aggregate then tables it under the new variant, and a run of that
    variant with those options takes it as done; moved but not edited, it is named and left out."""
    from monoattn_lab.cli.aggregate import main as aggregate_main

    _, _, spec, record = finished
    results = tmp_path / "results"
    path = spec.record_path(results)
    path.parent.mkdir(parents=True)
    record = json.loads(json.dumps(record))
    record["model_config"]["step_temperature"] = 2.0  # trained before a default changed
    path.write_text(json.dumps(record))
    assert aggregate_main(["tables", "--results", str(results)]) == 1
    err = capsys.readouterr().err
    assert f"  {path}: step_temperature: 2.0 there, 5.0 now (its options: --step-temperature 2.0)" in err
    moved = path.parents[1] / "step-temperature-2" / path.name  # step 1 alone
    moved.parent.mkdir()
    path.rename(moved)
    capsys.readouterr()
    none_readable = aggregate_main(["tables", "--results", str(results), "--variant", "step-temperature-2"])
    assert none_readable == 1
    assert f"unreadable record: {moved}: it is the record of copy/gru_onestep/default/seed3" in capsys.readouterr().err
    edited = json.loads(moved.read_text())  # steps 2 and 3
    edited["variant"] = "step-temperature-2"
    edited["options"] += ["--step-temperature", "2.0"]
    moved.write_text(json.dumps(edited))
    assert aggregate_main(["tables", "--results", str(results), "--variant", "step-temperature-2"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and "Generated from 1 records" in out.out and "| copy | gru_onestep | 3 |" in out.out
    again = RunSpec(**{**spec.__dict__, "variant": "step-temperature-2", "options": ("--step-temperature", "2.0")})
    assert launch.run_local([again], tmp_path / "work", results, log=lambda line: None) == {again.key: "ok"}
    assert not (tmp_path / "work").exists()


def test_a_write_that_finds_the_disk_full_is_named_by_the_worker_with_its_file(finished, tmp_path, monkeypatch, capsys):
    """A full disk while a run writes its record: the worker's error says so and names the file (it
    was a traceback), and the launcher's outcome carries that line instead of 'see worker.log'."""
    import errno
    import shutil

    from monoattn_lab import runs, worker

    work, results, spec, _ = finished
    copy = tmp_path / "work"
    shutil.copytree(spec.run_dir(work), spec.run_dir(copy))  # scored, not recorded: the record is the next write
    shutil.copytree(spec.data_dir(work), spec.data_dir(copy))
    (spec.run_dir(copy) / "command.txt").unlink()  # it names the other work folder
    record_path = spec.record_path(tmp_path / "results")

    def full_disk(path, value):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(runs, "write_json_atomic", full_disk)
    monkeypatch.setattr(worker, "forked_training", contextlib.nullcontext)
    assert worker.main([launch.spec_to_json(spec), str(copy), str(tmp_path / "results")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {spec.key}: [Errno 28] No space left on device: '{record_path}'"
    log = tmp_path / "worker.log"
    log.write_text(f"[{spec.key}] recording\n{err}\n")
    assert (
        launch.worker_failure(1, log)
        == f"failed (exit 1): {spec.key}: [Errno 28] No space left on device: '{record_path}'"
    )
    log.write_text("Traceback (most recent call last):\n  File x\nOSError: [Errno 28] No space left on device\n")
    assert launch.worker_failure(1, log) == f"failed (exit 1): OSError: [Errno 28] No space left on device (in {log})"
    log.write_text("")
    assert launch.worker_failure(1, log) == f"failed (exit 1); see {log}"


@pytest.mark.long(12)
def test_a_training_that_fails_is_reported_with_its_cause_and_the_file_that_has_it(tmp_path):
    """fairseq-train stops on an error (here: its checkpoint folder is a file, as a write on a full
    disk stops it): the outcome gives fairseq-train's own last error line and its output's file,
    not 'see worker.log', which said 'see stdout.log'."""
    work, results = tmp_path / "work", tmp_path / "results"
    (spec,) = with_tiny_data(work, tiny_spec(seed=1, max_epoch=1))
    spec.run_dir(work).mkdir(parents=True)
    (spec.run_dir(work) / "checkpoints").write_text("not a folder")
    outcome = launch.run_local([spec], work, results, log=lambda line: None)
    stdout_log = spec.run_dir(work) / "stdout.log"
    assert re.fullmatch(
        rf"failed \(exit 1\): fairseq-train failed for {spec.key} \(exit 1\): "
        rf"(FileExistsError|NotADirectoryError): \[Errno \d+\] .*; see {re.escape(str(stdout_log))}",
        outcome[spec.key],
    ), outcome[spec.key]
    assert outcome[spec.key].split("): ", 2)[2].split("; see")[0] in stdout_log.read_text()


@pytest.mark.long(30)
def test_ctrl_c_stops_a_sweep_cleanly_and_the_same_command_resumes_it(tmp_path):
    """SIGINT to the command's process group (a Ctrl-C at the terminal) while a run trains: no
    traceback, a line saying it was interrupted, what has records and how to resume, exit status
    130; the same command then finishes every run."""
    from forked_commands import THREAD_ENV, script_argv

    work, results = tmp_path / "work", tmp_path / "results"
    specs = with_tiny_data(work, *(tiny_spec(seed=seed, max_epoch=4) for seed in (1, 2)))
    argv = ["copy", "--arch", "gru_onestep", "--seeds", "1", "2", "--max-epoch", "4", "--stop-after-perfect", "0",
            "--work", str(work), "--results", str(results)]  # fmt: skip
    runner = subprocess.Popen(
        [*script_argv("fairseq-monoattn-run"), *argv],
        env=dict(os.environ, **THREAD_ENV),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    checkpoint = specs[0].run_dir(work) / "checkpoints" / "checkpoint_last.pt"
    deadline = time.time() + 240
    while not checkpoint.exists() and runner.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert checkpoint.exists() and runner.poll() is None
    os.killpg(runner.pid, signal.SIGINT)
    out, err = runner.communicate(timeout=120)
    assert runner.returncode == 130, out + err
    assert "Traceback" not in out + err and "FAILED" not in out
    assert f"[{specs[0].key}] interrupted: stopped; it resumes from its last checkpoint." in out
    assert out.splitlines()[-1] == (
        f"interrupted: 0 of 2 runs have records; stopped: {specs[0].key} (each resumes from its last checkpoint); "
        "1 not started. The same command resumes (exit status 130)"
    )
    assert "Traceback" not in (specs[0].run_dir(work) / "worker.log").read_text()
    assert not any(s.record_path(results).exists() for s in specs)
    assert not (specs[1].run_dir(work) / "worker.log").exists()  # never started
    done = subprocess.run(
        [*script_argv("fairseq-monoattn-run"), *argv],
        env=dict(os.environ, **THREAD_ENV),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [json.loads(s.record_path(results).read_text())["epochs_run"] for s in specs] == [4, 4]
