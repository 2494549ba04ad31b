"""Faults and bad input: each is one line naming the file or option, with an exit status that
means what it says, and nothing finished is lost or silently wrong."""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from fairseq_cli_helpers import TINY, preprocess, rebinarized, swapped, tiny_spec, with_tiny_data, write_copy_dataset
from forked_commands import THREAD_ENV, command, script_argv

from fairseq_monoattn.models.presets import PRESETS

ENV = dict(os.environ, **THREAD_ENV)


def error_lines(done):
    return [line for line in done.stderr.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def trained(tiny_run):
    """One finished tiny run (conftest.py's, shared with test_experiments.py): (work, results,
    spec, record, data folder, checkpoint)."""
    work, results, spec, record = tiny_run
    checkpoint = spec.run_dir(work) / "checkpoints" / "checkpoint_best.pt"
    return work, results, spec, record, spec.data_dir(work), checkpoint


# --- records ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage, named",
    [
        (lambda text: text[: len(text) // 2], "not a JSON record"),
        (lambda text: "", "not a JSON record"),
        (lambda text: "[1, 2]", "not a JSON object"),
        (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "splits"}), "no 'splits'"),
    ],
    ids=["truncated", "empty", "not-an-object", "no-splits"],
)
def test_a_bad_record_is_named_and_does_not_hide_the_others(trained, tmp_path, damage, named):
    _, results, spec, _, _, _ = trained
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    good = spec.record_path(copy)
    bad = good.with_name("seed7.json")
    bad.write_text(damage(good.read_text()))
    before = bad.read_bytes()
    done = command("fairseq-monoattn-aggregate", "tables", "--results", copy)
    assert done.returncode == 1
    assert f"unreadable record: {bad}: " in done.stderr and named in done.stderr
    assert "Generated from 1 records" in done.stdout  # the good record is still tabled
    status = command("fairseq-monoattn-sweep", "status", "smoke", "--results", copy)
    assert status.returncode == 1 and f"{bad}" in status.stderr and "runs have records" in status.stdout
    assert bad.read_bytes() == before  # never rewritten


def test_a_run_whose_record_is_damaged_is_refused_and_the_file_kept(trained, tmp_path):
    work, results, spec, _, _, _ = trained
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    path = spec.record_path(copy)
    path.write_text('{"task": "copy", "arch"')
    from monoattn_lab.launch import run_local

    outcome = run_local([spec], work, copy, log=lambda line: None)
    assert outcome[spec.key].startswith("failed: its record cannot be read") and str(path) in outcome[spec.key]
    assert path.read_text() == '{"task": "copy", "arch"'


# --- checkpoints --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage, named",
    [
        (lambda data: b"", "empty file, not a checkpoint"),
        (lambda data: data[: len(data) // 3], "cannot read it as a checkpoint"),
        (lambda data: b"not a checkpoint\n", "cannot read it as a checkpoint"),
    ],
    ids=["empty", "truncated", "text"],
)
def test_a_damaged_checkpoint_is_one_line_naming_it(trained, tmp_path, damage, named):
    _, _, _, _, data, checkpoint = trained
    broken = tmp_path / "checkpoint.pt"
    broken.write_bytes(damage(checkpoint.read_bytes()))
    out = tmp_path / "scores.json"
    done = command(
        "fairseq-monoattn-score", "--checkpoint", broken, "--data", data / "bin", "--splits", "test9", "--out", out
    )
    assert done.returncode == 2 and len(error_lines(done)) == 1, done.stderr
    assert f"{broken}: {named}" in done.stderr and not out.exists()
    plot = command(
        "fairseq-monoattn-plot-attention",
        "--checkpoint",
        broken,
        "--data",
        data / "bin",
        "--source",
        "1 2",
        "--out",
        tmp_path / "a.png",
    )
    assert plot.returncode == 2 and len(error_lines(plot)) == 1 and str(broken) in plot.stderr


def test_resuming_from_a_damaged_checkpoint_names_it(trained, tmp_path):
    from monoattn_lab.outdated import check_checkpoint_matches
    from monoattn_lab.spec import RunError, train_command

    work, _, spec, _, data, checkpoint = trained
    broken = tmp_path / "checkpoint_last.pt"
    broken.write_bytes(checkpoint.read_bytes()[:1000])
    with pytest.raises(RunError, match=f"{broken}: cannot read its configuration"):
        check_checkpoint_matches(broken, train_command(spec, data, tmp_path))


# --- dictionaries -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, difference",
    [
        (swapped, "symbol 4 is"),  # two symbols swapped
        (lambda lines: [*lines, "x 1"], "more symbols"),  # grown
        (lambda lines: lines[:-1], "more symbols"),  # shrunk
    ],
    ids=["reordered", "grown", "shrunk"],
)
def test_a_checkpoint_is_refused_on_data_with_other_dictionaries(trained, tmp_path, edit, difference):
    """Before, a reordered dictionary gave a wrong score with exit status 0."""
    _, _, _, _, data, checkpoint = trained
    other = rebinarized(data, tmp_path / "other", edit)
    out = tmp_path / "scores.json"
    done = command(
        "fairseq-monoattn-score", "--checkpoint", checkpoint, "--data", other, "--splits", "test", "--out", out
    )
    assert done.returncode == 2 and len(error_lines(done)) == 1, done.stderr
    assert f"{checkpoint} was trained with another source dictionary than {other / 'dict.src.txt'}" in done.stderr
    assert difference in done.stderr and not out.exists()
    generate = command(
        "fairseq-generate",
        other,
        "--user-dir",
        Path(__file__).resolve().parents[1] / "fairseq_monoattn",
        "--path",
        checkpoint,
        "--task",
        "length_generalization",
        "--gen-subset",
        "test",
        "--beam",
        "1",
    )
    assert generate.returncode == 1 and "Traceback" not in generate.stderr
    (line,) = [line for line in generate.stderr.splitlines() if line.startswith("error:")]
    assert line.endswith(error_lines(done)[0].split("error: ", 1)[1])  # the same message


def test_checkpoints_from_before_the_models_kept_their_dictionaries_still_load(trained, tmp_path):
    """Without stored symbols a checkpoint loads as before; with them in the length_generalization
    task's state (where that task kept them before the models did) it is still compared."""
    from fairseq_monoattn.dictionaries import SIDES, decode_symbols

    _, _, _, record, data, checkpoint = trained
    state = torch.load(checkpoint, weights_only=False)
    kept = {side: decode_symbols(state["model"].pop(f"dictionaries.{side}")) for side in SIDES}
    older = tmp_path / "without-symbols.pt"
    torch.save(state, older)
    out = tmp_path / "scores.json"
    done = command("fairseq-monoattn-score", "--checkpoint", older, "--data", data / "bin", "--splits", "test9",
                   "--out", out)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["splits"]["test9"]["accuracy"] == record["splits"]["test9"]["accuracy"]
    state["task_state"]["dictionaries"] = kept
    in_task_state = tmp_path / "symbols-in-the-task-state.pt"
    torch.save(state, in_task_state)
    other = rebinarized(data, tmp_path / "other", swapped, sides=("tgt",))
    done = command("fairseq-monoattn-score", "--checkpoint", in_task_state, "--data", other, "--splits", "test",
                   "--out", tmp_path / "other.json")  # fmt: skip
    assert done.returncode == 2 and len(error_lines(done)) == 1, done.stderr
    assert f"{in_task_state} was trained with another target dictionary than {other / 'dict.tgt.txt'}" in done.stderr


def test_the_same_dictionaries_rebinarized_score_the_same(trained, tmp_path):
    _, _, _, record, data, checkpoint = trained
    same = rebinarized(data, tmp_path / "same", lambda lines: lines)
    out = tmp_path / "scores.json"
    done = command(
        "fairseq-monoattn-score", "--checkpoint", checkpoint, "--data", same, "--splits", "test", "--out", out
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["splits"]["test"]["accuracy"] == record["splits"]["test9"]["accuracy"]


# --- data ---------------------------------------------------------------------------------------


def test_a_validation_split_without_targets_stops_training_before_it_starts(tmp_path):
    data = write_copy_dataset(tmp_path / "data", TINY)
    for suffix in ("idx", "bin"):
        (data / "bin" / f"valid.src-tgt.tgt.{suffix}").unlink()
    save = tmp_path / "ck"
    start = time.time()
    done = command(
        "fairseq-train",
        data / "bin",
        "--user-dir",
        Path(__file__).resolve().parents[1] / "fairseq_monoattn",
        "--arch",
        "gru_onestep",
        "--task",
        "length_generalization",
        "--criterion",
        "seq_acc",
        "--optimizer",
        "adam",
        "--batch-size",
        "8",
        "--max-epoch",
        "1",
        "--save-dir",
        save,
    )
    assert done.returncode == 1 and f"{data / 'bin' / 'valid.src-tgt.tgt.idx'}: split 'valid' has no tgt side" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr  # one line, not a traceback
    assert not any(save.glob("*.pt")) and time.time() - start < 60


def test_score_checks_every_split_and_its_output_before_decoding(trained, tmp_path):
    _, _, _, _, data, checkpoint = trained
    out = tmp_path / "scores.json"
    done = command(
        "fairseq-monoattn-score", "--checkpoint", checkpoint, "--data", data / "bin", "--splits", "test9", "test77",
        "--out", out,
    )  # fmt: skip
    assert done.returncode == 2 and "missing split files" in done.stderr and "test77.src-tgt.src.idx" in done.stderr
    assert not out.exists()
    blocked = tmp_path / "a-file"  # where --out's folder should be: unwritable for every user
    blocked.write_text("")
    done = command(
        "fairseq-monoattn-score", "--checkpoint", checkpoint, "--data", data / "bin", "--splits", "test9",
        "--out", blocked / "scores.json",
    )  # fmt: skip
    assert done.returncode == 2 and len(error_lines(done)) == 1 and f"cannot write {blocked}" in done.stderr


def test_prepare_into_an_unwritable_place_is_one_line(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    done = command("fairseq-monoattn-prepare", "copy", "--out", blocked / "copy")
    assert done.returncode == 2 and len(error_lines(done)) == 1 and str(blocked) in done.stderr


# --- processes ----------------------------------------------------------------------------------


def processes_mentioning(text: str):
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) != os.getpid()]


def wait_for(condition, seconds: float):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.long(30)
def test_killing_the_runner_stops_its_children_and_the_run_resumes(tmp_path):
    """kill -9 of fairseq-monoattn-run during training, and of the same command started again
    while it scores: each time its worker and fairseq-train stop with it (no orphan trains on),
    and the same command then finishes the run."""
    work, results = tmp_path / "work", tmp_path / "results"
    spec = tiny_spec(seed=2, max_epoch=4)
    sizes = {**TINY, "test40": (400, 40, 40)}  # 400 examples: scoring long enough to be caught at it
    write_copy_dataset(spec.data_dir(work), sizes, seed=spec.data_seed)
    argv = [
        "fairseq-monoattn-run", "copy", "--arch", "gru_onestep", "--seeds", "2", "--max-epoch", "4",
        "--stop-after-perfect", "0", "--work", work, "--results", results,
    ]  # fmt: skip
    run_dir = spec.run_dir(work)
    log = run_dir / "worker.log"
    for when in ("training", "scoring"):
        logged = log.stat().st_size if log.exists() else 0  # what the runs before this one wrote
        runner = subprocess.Popen([*script_argv(argv[0]), *map(str, argv[1:])], env=ENV, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        if when == "training":
            reached = wait_for(lambda: (run_dir / "checkpoints" / "checkpoint_last.pt").exists(), 240)
        else:
            reached = wait_for(lambda start=logged: "scoring checkpoint_best.pt" in log.read_text()[start:], 300)
        assert reached, when
        assert processes_mentioning(str(work)), f"no worker or training found ({when})"
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        assert wait_for(lambda: not processes_mentioning(str(work)), 30), (when, processes_mentioning(str(work)))
        assert not spec.record_path(results).exists(), when
    done = command(*argv)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(spec.record_path(results).read_text())
    assert record["epochs_run"] == 4 and record["splits"]["test40"]["size"] == 400


@pytest.mark.long(5)
def test_a_run_another_process_is_training_is_skipped_not_failed_and_not_done(tmp_path):
    work, results = tmp_path / "work", tmp_path / "results"
    (spec,) = with_tiny_data(work, tiny_spec(seed=4, max_epoch=1))
    lock = spec.run_dir(work) / ".lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        done = command(
            "fairseq-monoattn-run", "copy", "--arch", "gru_onestep", "--seeds", "4", "--max-epoch", "1",
            "--work", work, "--results", results,
        )  # fmt: skip
    assert done.returncode == 3, done.stderr  # not a failure, but nothing recorded: not 0
    assert "skipped copy/gru_onestep/default/seed4: another process is training it" in done.stdout
    assert done.stdout.splitlines()[-1] == (
        "1 of 1 runs not run here: another process is training them; the same command once it has finished "
        "records them (exit status 3)"
    )
    assert "FAILED" not in done.stdout and not spec.record_path(results).exists()


# --- scores do not depend on the batch --------------------------------------------------------


@pytest.fixture(scope="module")
def long_copy(tmp_path_factory):
    from fairseq_monoattn.data.prepare import prepare

    out = tmp_path_factory.mktemp("long") / "copy"
    prepare("copy", out, seed=2, test_lengths=[37], test_size=12)
    return out


@pytest.fixture(scope="module")
def long_copy_task(long_copy):
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    return TranslationTask.setup_task(
        TranslationConfig(
            data=str(long_copy / "bin"),
            source_lang="src",
            target_lang="tgt",
            dataset_impl=None,
            train_subset="train",
            required_seq_len_multiple=1,
        )  # fmt: skip
    )


@pytest.mark.parametrize("arch", sorted(PRESETS))
def test_scores_do_not_depend_on_the_batch_size_for_any_preset(long_copy_task, arch):
    """Decoded in float64 (the scorer's default) in batches of 1, 7 and 256, every preset gives the
    same greedy output for each of 12 length-37 inputs (batches of 7: one full, one not), and the same accuracy."""
    from fairseq_monoattn.scoring import score_split
    from fairseq_monoattn.testing import build

    task = long_copy_task
    model = build(arch, task.target_dictionary, seed=7).eval().to(torch.float64)
    runs = {size: score_split([model], task, "test37", batch_size=size)[:2] for size in (1, 7, 256)}
    assert runs[1][1] == runs[7][1] == runs[256][1]
    assert runs[1][0] == runs[7][0] == runs[256][0]


def test_float32_rounding_depends_on_the_padded_width_and_float64_shrinks_it():
    """Why the scorer decodes in float64: an example's float32 log-probabilities, alone or padded
    beside a longer input, differ by rounding (no padding leaks in: float64 agrees to 1e-12)."""
    from fairseq_monoattn.testing import batch, build, digit_dictionary

    dictionary = digit_dictionary()
    short, long = list("31415926"), list("27182818284590452353602874713527")
    largest = {}
    for dtype in (torch.float32, torch.float64):
        model = build("gru_mix_locattn", dictionary, seed=3).eval().to(dtype)
        together = model(**batch(dictionary, [short, long], [short, long])["net_input"])[0]
        alone = model(**batch(dictionary, [short], [short])["net_input"])[0]
        largest[dtype] = (together[0, : len(short) + 1] - alone[0]).abs().max().item()
    assert largest[torch.float64] < 1e-12
    assert largest[torch.float32] < 1e-4


def test_score_counts_every_example_of_an_extra_length(trained, tmp_path):
    """prepare --test-lengths writes testN; the scorer counts all of its examples."""
    from fairseq_monoattn.data.prepare import prepare

    _, _, _, _, data, checkpoint = trained
    long = tmp_path / "long"
    prepare("copy", long, seed=1, test_lengths=[150], test_size=25)
    # binarized with the run's own dictionaries (a prepared copy lists the digits by their counts)
    other = rebinarized_split(long, data, tmp_path / "same-dictionaries", "test150")
    out = tmp_path / "scores.json"
    done = command(
        "fairseq-monoattn-score", "--checkpoint", checkpoint, "--data", other, "--splits", "test150", "--out", out
    )
    assert done.returncode == 0, done.stderr
    scores = json.loads(out.read_text())["splits"]["test150"]
    assert scores["size"] == 25 and json.loads(out.read_text())["precision"] == "float64"
    assert scores["max_output_len"] == 2 * 151 + 10  # every target: 150 digits and </s>


def rebinarized_split(prepared: Path, dictionaries_from: Path, out: Path, split: str) -> Path:
    out.mkdir()
    preprocess(
        ["--source-lang", "src", "--target-lang", "tgt", "--testpref", prepared / "raw" / split, "--srcdict",
         dictionaries_from / "bin" / "dict.src.txt", "--tgtdict", dictionaries_from / "bin" / "dict.tgt.txt",
         "--destdir", out, "--workers", "1"]
    )  # fmt: skip
    for side in ("src", "tgt"):
        for suffix in ("idx", "bin"):
            (out / f"test.src-tgt.{side}.{suffix}").rename(out / f"{split}.src-tgt.{side}.{suffix}")
    return out
