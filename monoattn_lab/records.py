"""A run's record: the small JSON file a finished run leaves in the results folder (what ran, its
scores per test split, its validation history, the trained model's options, the environment), and
reading records back, each checked, each where its own run says it belongs."""

import json
import platform
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .outdated import trained_model_config
from .spec import PLUGIN_DIR, RunError, RunSpec, record_place, training_options


class RecordError(RunError):
    """A record (or another JSON file of a run) that cannot be read; the message names it."""


RECORD_VERSION = 1
# per test split; records made before the scorer counted cut-short and overran outputs lack those two,
# records made before they kept the per-token accuracy (of the target's tokens, and with its EOS) lack those
# two, and records scored before the length oracle (``fairseq-monoattn-sweep rescore`` adds it) lack the last three
RECORDED_SCORES = (
    "size",
    "correct",
    "accuracy",
    "mean_edit_distance",
    "cut_short",
    "overran",
    "per_token_accuracy",
    "per_token_accuracy_with_eos",
    "length_oracle_accuracy",
    "length_oracle_per_token_accuracy",
    "length_oracle_per_token_accuracy_with_eos",
)


def check_record_matches(record: dict, spec: RunSpec, path: Path) -> None:
    """A record stands for its spec only: another variant under the same name is an error."""
    wanted = {
        "task": spec.task,
        "arch": spec.arch,
        "variant": spec.variant,
        "seed": spec.seed,
        "options": list(spec.options),
        "data_seed": spec.data_seed,
        "max_epoch": spec.max_epoch,
        "stop_after_perfect": spec.stop_after_perfect,
        "recipe": spec.recipe,
        "user_dir": spec.user_dir,
    }
    found = {key: record.get(key) for key in wanted}
    if found != wanted:
        raise RunError(f"{path} records another run ({found}), not {wanted}; give this variant another name")


def make_record(spec: RunSpec, run_dir: Path, data: Path, timing: dict) -> dict:
    history = validated_training(run_dir)
    scored = read_json(run_dir / "scores.json", "the run's scores")
    scores = scored["splits"]
    best = max(history, key=lambda h: (h.get("accuracy", float("-inf")), h["epoch"])) if history else {}
    # per split, the mean of a per-example statistic the scorer kept (None where the model has none)
    means = {
        key: {split: s[key]["mean"] for split, s in scores.items() if s.get(key)}
        for key in ("direction_gate", "attention_peak")
    }
    return {
        "record_version": RECORD_VERSION,
        "task": spec.task,
        "arch": spec.arch,
        "variant": spec.variant,
        "options": list(spec.options),
        "seed": spec.seed,
        "data_seed": spec.data_seed,
        "recipe": spec.recipe,
        "max_epoch": spec.max_epoch,
        "stop_after_perfect": spec.stop_after_perfect,
        "user_dir": spec.user_dir,  # None: the plugin's own presets and entries
        "train_options": training_options(spec),
        "epochs_run": len(history),
        "best_epoch": best.get("epoch"),
        "best_valid_accuracy": best.get("accuracy"),
        "valid_accuracy": [h.get("accuracy") for h in history],
        # mean direction gate g over the valid sources each epoch (None: no gate, or an older log)
        "valid_direction_gate": [h.get("direction_gate") for h in history]
        if any("direction_gate" in h for h in history)
        else None,
        "stopped_early": stop_reason(run_dir / "train.log"),
        "training_seconds": round(timing.get("training_seconds", 0.0), 1),
        "scoring_seconds": round(timing.get("scoring_seconds", 0.0), 1),
        "scoring_precision": scored.get("precision", "float32"),  # float32: scored before float64 was the default
        "training_threads": timing.get("threads"),  # None: a run from before the count was kept
        # the code the decoder's training passes ran, once per part of the run (None: a model that does
        # not say, or a run from before it was kept)
        "training_code": training_code(run_dir / "stdout.log"),
        # a scores.json written before the cut-short counts existed (run scored, then killed before its record)
        # gives a record without them, as records of that time have
        "splits": {split: {key: s[key] for key in RECORDED_SCORES if key in s} for split, s in scores.items()},
        "direction_gate": means["direction_gate"] or None,
        "attention_peak": means["attention_peak"]
        or None,  # None: no attention returned, or a run scored before it was kept
        "model_config": trained_model_config(run_dir / "checkpoints" / "checkpoint_best.pt"),
        "environment": environment(),
    }


def training_code(output: Path) -> Optional[List[str]]:
    """The code the decoder's training passes ran (``FastPath.training_code``, or the reference), as the training's
    output says it: one line per fairseq-train process (a resumed run has several), each value
    once in the order first seen; None where no line says it."""
    from fairseq_monoattn.modules.compiled import TRAINING_CODE_LINE

    if not output.exists():
        return None
    found = [
        line.split(TRAINING_CODE_LINE, 1)[1].strip()
        for line in output.read_text(errors="replace").splitlines()
        if TRAINING_CODE_LINE in line
    ]
    return list(dict.fromkeys(found)) or None


def validated_training(run_dir: Path) -> List[Dict[str, float]]:
    """The run's validation history (:func:`valid_history` of its ``train.log``); a training that
    logged none is refused, as nothing could be recorded by it (a wrong log set-up, not a result)."""
    history = valid_history(run_dir / "train.log")
    if not history:
        raise RunError(f"{run_dir / 'train.log'}: no validation results in the training's log; no record is written")
    return history


def valid_history(log_file: Path) -> List[Dict[str, float]]:
    """The validation lines of a fairseq ``--log-format json --log-file`` log: one dict per
    epoch (keys without their ``valid_`` prefix, plus ``epoch``).  An epoch validated twice (a
    run killed after validating, before its checkpoint was saved, repeats it) keeps its last."""
    by_epoch = {}
    if not log_file.exists():
        return []
    for line in log_file.read_text().splitlines():
        if '"valid_' not in line or not line.startswith("{"):
            continue
        try:
            values = json.loads(line)
        except json.JSONDecodeError:
            continue
        entry = {key[len("valid_") :]: _number(value) for key, value in values.items() if key.startswith("valid_")}
        entry["epoch"] = int(values["epoch"])
        by_epoch[entry["epoch"]] = entry
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def stop_reason(log_file: Path) -> Optional[str]:
    """Why fairseq-train stopped before --max-epoch, read off its log (None: it did not)."""
    if not log_file.exists():
        return None
    text = log_file.read_text()
    for pattern in (
        r"stopping: greedy valid accuracy has been 100 for \d+ validations",
        r"early stop since valid performance hasn't improved for last \d+ runs",
    ):
        found = re.search(pattern, text)
        if found:
            return found.group(0)
    return None


def environment() -> dict:
    import fairseq
    import torch

    from fairseq_monoattn import __version__
    from fairseq_monoattn.modules import compiled

    # the vector instructions torch's CPU kernels use (e.g. AVX2, AVX512) round sums differently
    return {
        "plugin": __version__,
        "plugin_commit": plugin_commit(),
        "fairseq": fairseq.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # the C++ kernels and the Python code they stand in for round the gradients differently
        "kernels": compiled.in_use(),
    }


def plugin_commit() -> Optional[str]:
    """The git commit of the checkout the plugin runs from, with "+changes" when its package
    folder differs from it; None for an installed copy (no git checkout around it)."""
    package = PLUGIN_DIR
    head = subprocess.run(["git", "-C", str(package), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return None
    changed = subprocess.run(
        ["git", "-C", str(package), "status", "--porcelain", "--untracked-files=no", "--", "."],
        capture_output=True,
        text=True,
    )
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def run_seconds(record: dict) -> float:
    """Training and scoring time of a finished run, from its record."""
    return record.get("training_seconds", 0.0) + record.get("scoring_seconds", 0.0)


# the keys every record has, and their types (the others are read with defaults)
RECORD_KEYS = {"task": str, "arch": str, "variant": str, "seed": int, "splits": dict}


def read_json(path: Path, what: str):
    """A JSON file a run keeps (manifest, scores, timing); RecordError names it and what is wrong."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except OSError as error:
        raise RecordError(f"{path}: cannot read {what}: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RecordError(f"{path}: {what} is not valid JSON ({error}); delete it to redo that step") from None


def read_record(path: Path) -> dict:
    """One record, checked: RecordError names the file and what is wrong with it."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except OSError as error:
        raise RecordError(f"{path}: cannot read it: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RecordError(
            f"{path}: not a JSON record ({error}); a run killed while writing it, or an edit: "
            f"move it away and run the cell again"
        ) from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: not a JSON object")
    for key, kind in RECORD_KEYS.items():
        if not isinstance(record.get(key), kind):
            raise RecordError(
                f"{path}: {'no' if key not in record else 'a malformed'} {key!r} (expected {kind.__name__})"
            )
    for split, scores in record["splits"].items():
        if not isinstance(scores, dict) or not isinstance(scores.get("accuracy"), (int, float)):
            raise RecordError(f"{path}: split {split!r} has no accuracy")
    return record


def read_records(results: Path) -> Tuple[List[dict], List[str]]:
    """(every readable record under a results folder, in a stable order; a message naming each
    file that could not be read)."""
    records, problems = [], []
    for path in sorted(Path(results).glob("*/*/*/seed*.json")):
        try:
            record = read_record(path)
            check_record_place(record, path, results)
            records.append(record)
        except RecordError as error:
            problems.append(str(error))
    return records, problems


def check_record_place(record: dict, path: Path, results: Path) -> None:
    """A record is read for what it says (task, arch, variant, seed), so it must lie where it says:
    a copy elsewhere would count its run twice and hide the run of its place."""
    place = record_place(results, record["task"], record["arch"], record["variant"], record["seed"])
    if Path(path).relative_to(results) != place.relative_to(results):
        raise RecordError(
            f"{path}: it is the record of {record['task']}/{record['arch']}/{record['variant']}/seed{record['seed']}, "
            f"whose place is {place}; left out (move it there, or edit what it says to fit its place, or delete a copy)"
        )


def load_records(results: Path) -> List[dict]:
    """Every record under a results folder (in a stable order); RecordError on the first file that
    cannot be read (:func:`read_records` reports them all and keeps the rest)."""
    records, problems = read_records(results)
    if problems:
        raise RecordError(
            problems[0] + (f" (and {len(problems) - 1} more unreadable records)" if len(problems) > 1 else "")
        )
    return records
