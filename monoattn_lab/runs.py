"""One training run of the paper's recipe, from prepared data to a small JSON record.

A run is named by a :class:`~monoattn_lab.spec.RunSpec`.  Everything large lives under a *work*
folder that stays out of git; the record (:mod:`monoattn_lab.records`), a few hundred bytes of
JSON, goes to a *results* folder that is meant to be committed, so that no finished run is lost
when a machine goes away:

    WORK/data/TASK-dataSEED/{raw,bin,manifest.json}          prepared once (a lock guards it)
    WORK/runs/TASK/ARCH/VARIANT/seedN/{checkpoints/, train.log, command.txt, scores.json}
    RESULTS/TASK/ARCH/VARIANT/seedN.json                     the record

A run whose record exists is skipped; an interrupted run continues from its
``checkpoint_last.pt`` (fairseq's own restore); a run folder started with another command,
or whose checkpoint holds another model than the command builds now, is refused, never
overwritten (:mod:`monoattn_lab.outdated`).
"""

import fcntl
import os
import re
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

from fairseq_monoattn.files import write_json_atomic

from .outdated import check_checkpoint_matches
from .records import check_record_matches, make_record, read_json, read_record, validated_training
from .spec import RunBusy, RunError, RunSpec, train_command

# --- data ----------------------------------------------------------------------------------


@contextmanager
def file_lock(path: Path, busy: Optional[str] = None):
    """An exclusive lock on ``path`` for the ``with`` block, released when the process ends
    however it ends.  Waits for another holder, or with ``busy`` raises RunBusy(busy) at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if busy is None else fcntl.LOCK_NB))
        except BlockingIOError:
            raise RunBusy(busy) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepared_data(spec: RunSpec, work: Path, data_dir: Optional[Path] = None) -> Path:
    """The prepared data folder of the spec's task and data seed (prepared here if missing;
    concurrent runs wait on a lock instead of preparing it twice).  ``data_dir``: the source data
    of a task the repository does not ship (CFQ), read only when the folder is not prepared yet."""
    from fairseq_monoattn.data.common import DataError
    from fairseq_monoattn.data.prepare import prepare

    folder = spec.data_dir(work)
    with file_lock(Path(work) / "data" / f".{folder.name}.lock"):
        manifest_file = folder / "manifest.json"
        if not manifest_file.exists():
            try:
                prepare(spec.task, folder, seed=spec.data_seed, data_dir=data_dir, joined_dictionary=True)
            except DataError as error:  # e.g. CFQ without --data-dir: the builder names what it needs
                raise RunError(f"{spec.task}: cannot prepare {folder}: {error}") from None
        manifest = read_json(manifest_file, "the data's manifest")
    if manifest["task"] != spec.task or manifest["seed"] != spec.data_seed:
        raise RunError(
            f"{folder} holds {manifest['task']} data with seed {manifest['seed']}, "
            f"not {spec.task} with seed {spec.data_seed}"
        )
    return folder


def test_splits(data: Path) -> List[str]:
    manifest = read_json(data / "manifest.json", "the data's manifest")
    return [split for split in manifest["splits"] if split.startswith("test")]


# --- one run ---------------------------------------------------------------------------------


def run(spec: RunSpec, work: Path, results: Path, log=print, forked=None) -> dict:
    """Train, score and record one run (or return its existing record).  fairseq-train inherits
    this process's environment (the local launcher sets OMP_NUM_THREADS and pins the cores); it
    runs as a command, or forked from ``forked`` (a :class:`~.processes.CommandServer`) where given."""
    record_path = spec.record_path(results)
    if record_path.exists():
        return existing_record(spec, record_path)
    data = prepared_data(spec, work)
    run_dir = spec.run_dir(work)
    # one process trains a run at a time: a second sweep over the same work folder skips it
    with file_lock(run_dir / ".lock", busy=busy_message(spec, run_dir)):
        if record_path.exists():  # the other process finished it while this one prepared the data
            return existing_record(spec, record_path)
        return train_score_record(spec, data, run_dir, record_path, log, forked)


def busy_message(spec: RunSpec, run_dir: Path) -> str:
    return (
        f"{spec.key} is being trained by another process in {run_dir} (it holds "
        f"{run_dir / '.lock'}); nothing was changed"
    )


def check_not_busy(spec: RunSpec, work: Path, results: Path) -> None:
    """Raise the RunBusy that :func:`run` would raise when another process holds the run's lock
    now, creating nothing: a worker asks before it imports fairseq for a run it would only skip.
    (A run with a record is :func:`run`'s to answer; the lock is taken again by :func:`run`.)"""
    run_dir = spec.run_dir(work)
    lock = run_dir / ".lock"
    if spec.record_path(results).exists() or not lock.exists():
        return
    try:
        handle = open(lock)
    except FileNotFoundError:  # gone meanwhile: run() takes it
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunBusy(busy_message(spec, run_dir)) from None
        fcntl.flock(handle, fcntl.LOCK_UN)


def existing_record(spec: RunSpec, record_path: Path) -> dict:
    record = read_record(record_path)
    check_record_matches(record, spec, record_path)
    return record


def train_score_record(spec: RunSpec, data: Path, run_dir: Path, record_path: Path, log, forked=None) -> dict:
    """The body of :func:`run`, under the run folder's lock."""
    command = train_command(spec, data, run_dir)
    recorded = " ".join(command)
    command_file = run_dir / "command.txt"
    if command_file.exists() and command_file.read_text().strip() != recorded:
        raise RunError(
            f"{run_dir} was started with another command:\n  {command_file.read_text().strip()}\n"
            f"now:\n  {recorded}\n(nothing was changed; use another work folder or variant name)"
        )
    command_file.write_text(recorded + "\n")
    last_checkpoint = run_dir / "checkpoints" / "checkpoint_last.pt"
    scores_file = run_dir / "scores.json"
    if last_checkpoint.exists() and not scores_file.exists():
        check_checkpoint_matches(last_checkpoint, command)
    timing_file = run_dir / "timing.json"
    timing = read_json(timing_file, "the run's timing") if timing_file.exists() else {"training_seconds": 0.0}
    if not scores_file.exists():
        forked = forked if forked is not None and forked.serves(command) else None
        log(f"[{spec.key}] training" + (" (fairseq-train forked from this worker)" if forked else ""))
        with open(run_dir / "stdout.log", "a") as out:
            code = run_timed(command, out, timing, timing_file, forked)
        if code != 0:
            cause = last_error(run_dir / "stdout.log")
            raise RunError(
                f"fairseq-train failed for {spec.key} (exit {code})"
                + (f": {cause}" if cause else "")
                + f"; see {run_dir / 'stdout.log'}"
            )
        validated_training(run_dir)  # before scoring: a training with no validation gets no record
        log(f"[{spec.key}] scoring checkpoint_best.pt")
        score_run(spec, data, run_dir, timing)
    record = make_record(spec, run_dir, data, timing)
    write_json_atomic(record_path, record)
    log(f"[{spec.key}] recorded {record_path}")
    return record


def score_run(spec: RunSpec, data: Path, run_dir: Path, timing: dict) -> None:
    """Score the run's ``checkpoint_best.pt`` on the data's test splits into its ``scores.json``,
    and the time it took into ``timing`` and its ``timing.json``."""
    from fairseq_monoattn.scoring import score  # torch and fairseq: not for the commands that only plan runs

    start = time.time()
    score(
        run_dir / "checkpoints" / "checkpoint_best.pt",
        data / "bin",
        test_splits(data),
        run_dir / "scores.json",
        force=True,
        user_dir=spec.user_dir,  # a user's preset or entry is only known after importing it
    )
    timing["scoring_seconds"] = time.time() - start
    write_json_atomic(run_dir / "timing.json", timing)


# what a record says of its training: scoring again must find the same training in the work folder
TRAINING_FACTS = ("train_options", "epochs_run", "best_epoch", "best_valid_accuracy", "valid_accuracy", "model_config")
# what scoring again may change; the rest of the record is kept as it was
SCORED_FIELDS = ("splits", "direction_gate", "attention_peak", "scoring_seconds", "scoring_precision")


def rescore(spec: RunSpec, work: Path, results: Path, log=print) -> Optional[dict]:
    """Score a recorded run's ``checkpoint_best.pt`` again with the scorer as it is now (a measure
    it gained after the run) and rewrite the record's scores, keeping the rest of the record; None
    where there is no record, or the work folder does not hold the run's checkpoint.

    A run folder whose training is not the record's (another epoch count, validation or model) is
    refused and the record left as it was.  One whose training took another time is the run trained
    again (a record from another machine, its run repeated here): it is taken only if it gives every
    score the record has, to the bit; then it adds what the scorer counts now.  The scoring runs on
    the record's thread count (its worker trained and scored on it), whatever this process has."""
    record_path = spec.record_path(results)
    run_dir = spec.run_dir(work)
    if not record_path.exists() or not (run_dir / "checkpoints" / "checkpoint_best.pt").exists():
        return None
    data = prepared_data(spec, work)
    with file_lock(run_dir / ".lock", busy=busy_message(spec, run_dir)):
        old = existing_record(spec, record_path)
        timing_file = run_dir / "timing.json"
        timing = read_json(timing_file, "the run's timing") if timing_file.exists() else {}
        before = make_record(spec, run_dir, data, timing)  # the run folder's training, read before scoring
        changed = [key for key in TRAINING_FACTS if before[key] != old[key]]
        if changed:
            raise RunError(
                f"{run_dir} is not the run {record_path} records (its {', '.join(changed)} differ); nothing was changed"
            )
        trained_again = before["training_seconds"] != old["training_seconds"]
        threads = recorded_threads(old)
        log(
            f"[{spec.key}] scoring checkpoint_best.pt again"
            + (f" on {threads} thread{'s' if threads > 1 else ''}" if threads else "")
            + (" (the run trained again)" if trained_again else "")
        )
        with torch_threads(threads):
            score_run(spec, data, run_dir, timing)
        new = make_record(spec, run_dir, data, timing)
        moved = changed_scores(old, new)
        if trained_again and moved:
            raise RunError(
                f"{run_dir} holds the run trained again, and it does not give the scores {record_path} records "
                f"({'; '.join(moved[:3])}); nothing was changed"
            )
        record = {**old, **{key: new[key] for key in SCORED_FIELDS}}
        write_json_atomic(record_path, record)
    for line in moved:
        log(f"[{spec.key}] {line} changed with the scorer of today")
    log(
        f"[{spec.key}] rescored {record_path}"
        + (": the run trained again gave every score it records" if trained_again else "")
    )
    return record


def recorded_threads(record: dict) -> Optional[int]:
    """The intra-op thread count a record's run was trained and scored on (its worker's), or None
    where the record names none or several (a run resumed on another count)."""
    threads = record.get("training_threads") or []
    return threads[0] if len(threads) == 1 else None


@contextmanager
def torch_threads(threads: Optional[int]):
    """torch's intra-op thread count set to ``threads`` (None: left as it is) inside the block,
    and back to what it was after it."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def changed_scores(old: dict, new: dict) -> List[str]:
    """The scores of record ``old`` that ``new`` gives otherwise ("SPLIT KEY" or the field's name):
    each split's counts and rates, and the gate's and attention peak's means."""
    moved = [
        f"{split} {key}"
        for split, scores in old["splits"].items()
        for key, value in scores.items()
        if new["splits"].get(split, {}).get(key) != value
    ]
    return moved + [
        field for field in ("direction_gate", "attention_peak") if old.get(field) and old[field] != new[field]
    ]


# the line of a log that says why a program stopped: ours ("error: ..."), or a traceback's last line
ERROR_LINE = re.compile(r"(error: |[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b)")


def last_error(log: Path) -> Optional[str]:
    """The last line of ``log`` that says why a program stopped (None: none, or no log to read)."""
    try:
        lines = Path(log).read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = next((line.strip() for line in reversed(lines) if ERROR_LINE.match(line.strip())), None)
    return None if found is None else found[:500]


def training_threads() -> int:
    """The intra-op threads fairseq-train will use: torch's count in this process, which reads the
    same OMP_NUM_THREADS and the same core affinity that the child inherits."""
    import torch

    return torch.get_num_threads()


TIMING_INTERVAL = 60.0  # seconds between two writes of a training run's time so far


def run_timed(command: List[str], out, timing: dict, timing_file: Path, forked=None) -> int:
    """Run fairseq-train, adding its time to ``timing["training_seconds"]`` and writing it to
    ``timing_file`` every TIMING_INTERVAL seconds, so a run killed and resumed later still counts
    (within a minute) the time its first part took.  ``timing["threads"]`` collects the number of
    intra-op threads of each part: float sums are split by thread, so the same seed trains another
    trajectory with another thread count, and a record must say which it had.  ``forked``: a
    :class:`~.processes.CommandServer` that serves ``command`` (the training runs in a child forked
    from it), or None (a new process runs the command)."""
    timing["threads"] = sorted(set(timing.get("threads", [])) | {training_threads()})
    base, start = timing["training_seconds"], time.time()
    from .processes import die_with_parent

    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if forked is not None:  # a CommandServer that serves this command
        out.flush()
        process = forked.start(command, out.name, env=env, append=True)
    else:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )
    while True:
        try:
            code = process.wait(timeout=TIMING_INTERVAL)
        except subprocess.TimeoutExpired:
            code = None
        timing["training_seconds"] = base + time.time() - start
        write_json_atomic(timing_file, timing)
        if code is not None:
            return code
