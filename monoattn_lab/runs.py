"""One training run of the paper's recipe, from prepared data to a small JSON record.

A run is named by :class:`RunSpec` (task, architecture, option-set name and options, seed,
data seed, epoch budget).  Everything large lives under a *work* folder that stays out of
git; the record, a few hundred bytes of JSON, goes to a *results* folder that is meant to be
committed, so that no finished run is lost when a machine goes away:

    WORK/data/TASK-dataSEED/{raw,bin,manifest.json}          prepared once (a lock guards it)
    WORK/runs/TASK/ARCH/VARIANT/seedN/{checkpoints/, train.log, command.txt, scores.json}
    RESULTS/TASK/ARCH/VARIANT/seedN.json                     the record

A run whose record exists is skipped; an interrupted run continues from its
``checkpoint_last.pt`` (fairseq's own restore); a run folder started with another command,
or whose checkpoint holds another model than the command builds now, is refused, never
overwritten.
"""

import fcntl
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
import warnings
from argparse import Namespace
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import fairseq_monoattn
from fairseq_monoattn.files import write_json_atomic
from fairseq_monoattn.recipes import TASK_DEFAULTS, dataset_options, recipe_options

RECORD_VERSION = 1
# per test split; records made before the scorer counted cut-short and overran outputs lack those two
RECORDED_SCORES = ("size", "correct", "accuracy", "mean_edit_distance", "cut_short", "overran")
DEFAULT_VARIANT = "default"
PLUGIN_DIR = Path(fairseq_monoattn.__file__).resolve().parent  # the plugin's package, for --user-dir


class RunError(RuntimeError):
    """A run that cannot go on (failed training, a folder started with other options)."""


class RecordError(RunError):
    """A record (or another JSON file of a run) that cannot be read; the message names it."""


class RunBusy(RunError):
    """Another process (a second sweep over the same work folder) is training this run now."""


BUSY_EXIT = 3  # the worker's exit code for RunBusy
INTERRUPTED_EXIT = 130  # the worker's and the commands' exit code after Ctrl-C (128 + SIGINT, as shells use)


def record_place(results: Path, task: str, arch: str, variant: str, seed: int) -> Path:
    """Where the record of a run goes: RESULTS/TASK/ARCH/VARIANT/seedN.json."""
    return Path(results) / task / arch / variant / f"seed{seed}.json"


@dataclass(frozen=True)
class RunSpec:
    task: str
    arch: str
    seed: int
    data_seed: int = 1
    variant: str = DEFAULT_VARIANT  # a name for `options` (folder and record name)
    options: Tuple[str, ...] = ()  # extra fairseq-train options of this variant
    max_epoch: int = 100
    stop_after_perfect: int = 0  # stop once greedy valid accuracy has been 100 for this many epochs
    recipe: str = "paper"
    user_dir: Optional[str] = None  # a user's package passed to fairseq-train as --user-dir (else the plugin)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.arch}/{self.variant}/seed{self.seed}"

    def record_path(self, results: Path) -> Path:
        return record_place(results, self.task, self.arch, self.variant, self.seed)

    def run_dir(self, work: Path) -> Path:
        """Its checkpoints and logs; another data seed's run never shares (and so never resumes) them."""
        name = f"seed{self.seed}" if self.data_seed == 1 else f"data{self.data_seed}-seed{self.seed}"
        return Path(work) / "runs" / self.task / self.arch / self.variant / name

    def data_dir(self, work: Path) -> Path:
        from fairseq_monoattn.data.writer import DATA_FORMAT_VERSION

        return Path(work) / "data" / f"{self.task}-data{self.data_seed}-v{DATA_FORMAT_VERSION}"


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


# --- training ------------------------------------------------------------------------------


def training_options(spec: RunSpec) -> List[str]:
    """The fairseq-train options that make a run what it is: the recipe's, the task's data's
    (:data:`~fairseq_monoattn.recipes.DATASET_OPTIONS`), then the variant's (the last value wins)."""
    return _recipe(spec) + _dataset_options(spec) + list(spec.options)


def _dataset_options(spec: RunSpec) -> List[str]:
    if not dataset_options(spec.task):
        return []
    plain = ["fairseq-train", "data", "--user-dir", str(spec.user_dir or PLUGIN_DIR), "--arch", spec.arch]
    return dataset_options(spec.task, model_fields=planned_model_config(plain))


def _recipe(spec: RunSpec) -> List[str]:
    return recipe_options(spec.recipe, max_epoch=spec.max_epoch, stop_after_perfect=spec.stop_after_perfect)


def train_command(spec: RunSpec, data: Path, run_dir: Path) -> List[str]:
    # the recipe first and the run's own options last (a task's data's, then the variant's)
    return [
        str(Path(sys.executable).parent / "fairseq-train"),
        str(data / "bin"),
        "--user-dir",
        str(spec.user_dir or PLUGIN_DIR),
        "--arch",
        spec.arch,
        *_recipe(spec),
        "--seed",
        str(spec.seed),
        "--save-dir",
        str(run_dir / "checkpoints"),
        "--no-epoch-checkpoints",
        "--log-format",
        "json",
        "--log-file",
        str(run_dir / "train.log"),
        *_dataset_options(spec),
        *spec.options,
    ]


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
    busy = (
        f"{spec.key} is being trained by another process in {run_dir} (it holds "
        f"{run_dir / '.lock'}); nothing was changed"
    )
    with file_lock(run_dir / ".lock", busy=busy):
        if record_path.exists():  # the other process finished it while this one prepared the data
            return existing_record(spec, record_path)
        return train_score_record(spec, data, run_dir, record_path, log, forked)


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
        log(f"[{spec.key}] scoring checkpoint_best.pt")
        from fairseq_monoattn.scoring import score  # torch and fairseq: not for the commands that only plan runs

        start = time.time()
        score(
            run_dir / "checkpoints" / "checkpoint_best.pt",
            data / "bin",
            test_splits(data),
            scores_file,
            force=True,
            user_dir=spec.user_dir,  # a user's preset or entry is only known after importing it
        )
        timing["scoring_seconds"] = time.time() - start
        write_json_atomic(timing_file, timing)
    record = make_record(spec, run_dir, data, timing)
    write_json_atomic(record_path, record)
    log(f"[{spec.key}] recorded {record_path}")
    return record


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


def check_checkpoint_matches(checkpoint: Path, command: List[str]) -> None:
    """Resuming continues the checkpoint's weights under the model the command builds *today*;
    the same command line builds another model once a default has changed (an init, the
    normalisation, ...), which would mix two models in one run without a word."""
    changed = model_differences(trained_model_config(checkpoint), planned_model_config(command))
    if changed:
        raise RunError(
            f"{checkpoint} was trained with other model options than its command builds now "
            f"({describe_differences(changed, 'in the checkpoint')}), the defaults changed since it "
            f"started; nothing was changed: use another work folder, or delete the run folder to "
            f"start it again"
        )


def model_differences(trained: dict, planned: dict) -> Dict[str, tuple]:
    """{option: (trained value, planned value)} over the options either model reads.  An option
    the trained config lacks (it predates the option) counts as its base default, since every
    option was added with the old behaviour as its default."""
    from fairseq_monoattn.models.options import option_defaults, unused_options

    trained = {**option_defaults(), **trained}
    no_op = unused_options(trained) & unused_options(planned)  # e.g. the mix temperature of OneStep
    return {
        key: (trained[key], planned[key])
        for key in sorted(set(trained) & set(planned) - no_op)
        if trained[key] != planned[key]
    }


def describe_differences(changed: Dict[str, tuple], where: str) -> str:
    return "; ".join(f"{key}: {old!r} {where}, {new!r} now" for key, (old, new) in changed.items())


def pinning_options(changed: Dict[str, tuple]) -> Optional[List[str]]:
    """The fairseq-train options that build today the model a record trained (its values of the
    ``changed`` model options, :func:`model_differences`), to add to the record's ``options``
    when it moves to a variant of its own; None when a difference is not a model option of one
    value (a task option, an option then unset)."""
    options = []
    for key, (old, _new) in changed.items():
        if key == "task" or old is None or isinstance(old, (dict, list)):
            return None
        options += [f"--{key.replace('_', '-')}", str(old)]
    return options


def spec_from_dict(values: dict) -> RunSpec:
    """The RunSpec that a dict of its fields names: a spec sent as JSON, or a run record (whose
    other keys are ignored)."""
    named = {f.name: values[f.name] for f in fields(RunSpec) if f.name in values}
    named["options"] = tuple(named.get("options", ()))
    return RunSpec(**named)


def outdated_records(records: List[dict]) -> List[Tuple[dict, Dict[str, tuple]]]:
    """The records whose trained model is not the one their command builds today (a preset or a
    default changed since they ran), each with what changed.  A record without a model config
    (an early record version) cannot be checked and is not listed."""
    planned_by_command, outdated = {}, []
    for record in records:
        if not record.get("model_config"):
            continue
        spec = spec_from_dict(record)
        command = tuple(train_command(spec, Path("data"), Path("run")))
        key = command[: command.index("--seed")] + command[command.index("--seed") + 2 :]  # seeds share a model
        if key not in planned_by_command:
            planned_by_command[key] = planned_model_config(list(command))
        changed = model_differences(record["model_config"], planned_by_command[key])
        if changed:
            outdated.append((record, changed))
    return outdated


def make_record(spec: RunSpec, run_dir: Path, data: Path, timing: dict) -> dict:
    scored = read_json(run_dir / "scores.json", "the run's scores")
    scores = scored["splits"]
    history = valid_history(run_dir / "train.log")
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
    """The code the decoder's training passes ran (``compiled.training_code``), as the training's
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


def trained_model_config(checkpoint: Path) -> dict:
    """Every option of the trained model as its checkpoint recorded it (the preset's and the
    defaults of the day included), and the task options that change training."""
    import torch

    from fairseq_monoattn.checkpoint_classes import reading_fairseq_checkpoints

    try:
        with reading_fairseq_checkpoints():  # a Transformer's options
            state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        return _model_and_task(state["cfg"])
    except Exception as error:  # torch's unpickler raises many kinds for a damaged file
        raise RunError(
            f"{checkpoint}: cannot read its configuration ({type(error).__name__}: "
            f"{str(error).strip()[:200]}); delete the file to start that run again"
        ) from None


def planned_model_config(command: List[str]) -> dict:
    """What :func:`trained_model_config` will say of the model a fairseq-train command builds:
    the preset's values and the command's model options over the defaults of the day, and the
    task options that change training.  Read without fairseq for the plugin's own presets (the
    same values fairseq's parser gives, see :func:`parsed_model_config`); a user's preset is
    read by fairseq's parser after importing the command's --user-dir."""
    from fairseq_monoattn.models.options import explicit_options, resolved_options
    from fairseq_monoattn.models.presets import PRESETS

    arch = _value_of(command, "--arch")
    user_dir = _value_of(command, "--user-dir")
    if arch not in PRESETS and arch != "gru_seq2seq" or user_dir not in (None, str(PLUGIN_DIR)):
        return parsed_model_config(command)
    model = resolved_options({**PRESETS.get(arch, {}), **explicit_options(command)})
    model = {key: value for key, value in model.items() if not key.startswith("max_")}
    task = dict(TASK_DEFAULTS)
    for option, value in (
        ("--train-batches", _value_of(command, "--train-batches")),
        ("--stop-after-perfect", _value_of(command, "--stop-after-perfect")),
    ):
        if value is not None:
            task[option[2:].replace("-", "_")] = int(value) if option == "--stop-after-perfect" else value
    return {"_name": arch, **model, "task": task}


def _value_of(command: List[str], option: str) -> Optional[str]:
    """The last value given to ``option`` in an argument list (fairseq's parser keeps the last)."""
    values = [command[i + 1] for i, word in enumerate(command[:-1]) if word == option]
    return values[-1] if values else None


def parsed_model_config(command: List[str]) -> dict:
    """:func:`planned_model_config` as fairseq's own parser reads the command (imports fairseq,
    and the command's --user-dir)."""
    fairseq_monoattn.register()
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    args = options.parse_args_and_arch(options.get_training_parser(), input_args=list(command[1:]))
    hydra_log = logging.getLogger("hydra")
    level = hydra_log.level
    with warnings.catch_warnings():  # hydra's deprecation notices, once per parse
        warnings.simplefilter("ignore")
        hydra_log.setLevel(logging.WARNING)
        try:
            config = convert_namespace_to_omegaconf(args)
        finally:
            hydra_log.setLevel(level)
    return _model_and_task(OmegaConf.to_container(config))


def _model_and_task(cfg: dict) -> dict:
    model = cfg["model"]
    if isinstance(model, Namespace):
        model = vars(model)
    if "optimizer" in model:  # a model configured by argparse (the Transformer: every option, stored as
        # a Namespace or, by the plugin's Transformers, as a dict; a model's own dataclass has no
        # optimizer): its own options only
        options = _model_option_names(model["arch"])
        name = model.get("_name", model["arch"])
        model = {**{key: value for key, value in model.items() if key in options}, "_name": name}
    model = {key: value for key, value in dict(model).items() if not key.startswith("max_")}
    task = cfg["task"]
    task = vars(task) if isinstance(task, Namespace) else task
    return {**model, "task": {key: task.get(key) for key in ("train_batches", "stop_after_perfect")}}


def _model_option_names(arch: str) -> set:
    """The options an argparse-configured architecture's model class adds (its model's options)."""
    import argparse

    from fairseq.models import ARCH_MODEL_REGISTRY

    fairseq_monoattn.register()
    parser = argparse.ArgumentParser(add_help=False)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    return {action.dest for action in parser._actions}


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


__all__ = ["RunSpec", "RunError", "run", "load_records", "outdated_records"]
