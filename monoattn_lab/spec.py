"""What a run is: :class:`RunSpec` (task, architecture, option-set name and options, seed, data
seed, epoch budget, recipe, a user's package), where its files go, the fairseq-train command it
runs, and the model that command builds (:func:`planned_model_config`, read without fairseq for
the plugin's own presets).  The errors every part of a run raises are here too."""

import logging
import sys
import warnings
from argparse import Namespace
from dataclasses import dataclass, fields
from pathlib import Path
from typing import List, Optional, Tuple

import fairseq_monoattn
from fairseq_monoattn.recipes import TASK_DEFAULTS, dataset_options, recipe_options

DEFAULT_VARIANT = "default"
PLUGIN_DIR = Path(fairseq_monoattn.__file__).resolve().parent  # the plugin's package, for --user-dir


class RunError(RuntimeError):
    """A run that cannot go on (failed training, a folder started with other options)."""


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


# --- the command a run is, and the model it builds --------------------------------------------


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


def spec_from_dict(values: dict) -> RunSpec:
    """The RunSpec that a dict of its fields names: a spec sent as JSON, or a run record (whose
    other keys are ignored)."""
    named = {f.name: values[f.name] for f in fields(RunSpec) if f.name in values}
    named["options"] = tuple(named.get("options", ()))
    return RunSpec(**named)


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
    if getattr(args, "positions", None) is not None:  # it decides fairseq's three switches, as the build does
        from fairseq_monoattn.modules.position_schemes import resolve_positions

        resolve_positions(args)
    hydra_log = logging.getLogger("hydra")
    level = hydra_log.level
    with warnings.catch_warnings():  # hydra's deprecation notices, once per parse
        warnings.simplefilter("ignore")
        hydra_log.setLevel(logging.WARNING)
        try:
            config = convert_namespace_to_omegaconf(args)
        finally:
            hydra_log.setLevel(level)
    return model_and_task(OmegaConf.to_container(config))


def model_and_task(cfg: dict) -> dict:
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
