"""Loading the plugin changes nothing outside its own classes: fairseq's own tasks and models run
as stock fairseq beside it.  Its fixes to fairseq come with its task (fairseq_compat.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import translation_corpus
from fairseq_cli_helpers import USER_DIR, run_command

ROOT = Path(USER_DIR).parent

# In a fresh process: fairseq's modules, what the plugin used to change on import, and fairseq's
# registries, before and after loading the plugin as fairseq-train's --user-dir does (or after
# importing the plugin's catalog first, fairseq later: the registration then waits for fairseq).
IMPORT_EFFECTS = r"""
import json, os, sys
from argparse import Namespace

first = sys.argv[1]
if first == "catalog":
    import fairseq_monoattn.catalog  # registers once fairseq is imported
import torch
import fairseq_cli.train
from fairseq import checkpoint_utils, criterions, models, optim, tasks, utils
from fairseq.data import data_utils
from fairseq.file_io import PathManager
from fairseq.logging import progress_bar

watched = {
    "data_utils.batch_by_size": lambda: data_utils.batch_by_size,
    "progress_bar.progress_bar": lambda: progress_bar.progress_bar,
    "utils.set_torch_seed": lambda: utils.set_torch_seed,
    "utils.clip_grad_norm_": lambda: utils.clip_grad_norm_,
    "PathManager.copy": lambda: PathManager.copy,
    "checkpoint_utils.PathManager.copy": lambda: checkpoint_utils.PathManager.copy,
    "fairseq_cli.train.should_stop_early": lambda: fairseq_cli.train.should_stop_early,
    "sys.excepthook": lambda: sys.excepthook,
}
registries = {
    name: getattr(module, name)
    for module in (models, tasks, criterions, optim)
    for name in dir(module)
    if name.endswith("REGISTRY") and isinstance(getattr(module, name), dict)
}

def state():
    return {
        "objects": {name: get() for name, get in watched.items()},
        "safe_globals": [repr(g) for g in torch.serialization.get_safe_globals()],
        "registries": {name: dict(registry) for name, registry in registries.items()},
        "meta_path": list(sys.meta_path),
    }

def parsed(argv):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))

before = state()
if first in ("user_dir", "task"):
    utils.import_user_module(Namespace(user_dir=sys.argv[2]))
stops = None
if first == "task":  # fairseq-train --task length_generalization, set up; then a translation run's stopping rule
    cfg = parsed([sys.argv[3], "--user-dir", sys.argv[2], "--task", "length_generalization", "--arch", "gru_onestep",
                  "--eval-accuracy", "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric",
                  "--stop-after-perfect", "2"])
    tasks.setup_task(cfg.task)
    translation = parsed([sys.argv[3], "--task", "translation", "--arch", "lstm", "--patience", "0"])
    stops = [fairseq_cli.train.should_stop_early(translation, 100.0) for _ in range(4)]
from fairseq_monoattn import allocator
from fairseq_monoattn.fairseq_compat import cpu_only, drops_last_batch

after = state()
print(json.dumps({
    "replaced": [n for n in watched if after["objects"][n] is not before["objects"][n]],
    "plugin_objects": [
        n for n, o in after["objects"].items() if getattr(o, "__module__", "").startswith("fairseq_monoattn")
    ],
    "excepthook_is_pythons": sys.excepthook is sys.__excepthook__,
    "safe_globals": [before["safe_globals"], after["safe_globals"]],
    "malloc_thresholds_set": allocator.thresholds_set,
    "changed_entries": [
        f"{name}[{key!r}]"
        for name, registry in before["registries"].items()
        for key, value in registry.items()
        if after["registries"][name].get(key, "gone") is not value
    ],
    "added": {
        name: sorted(set(after["registries"][name]) - set(registry)) for name, registry in before["registries"].items()
    },
    "names": {name: sorted(registry) for name, registry in after["registries"].items()},
    "meta_path_added": [repr(f) for f in after["meta_path"] if f not in before["meta_path"]],
    "fairseq_drops_the_last_batch": drops_last_batch(before["objects"]["data_utils.batch_by_size"]),
    "translation_stops": stops,
    "cpu_only": cpu_only(),
}))
"""


def import_effects(first: str, data: str = "") -> dict:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EFFECTS, first, USER_DIR, data], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("first", ["user_dir", "catalog"])
def test_loading_the_plugin_registers_its_components_and_changes_nothing_else(first):
    """``--user-dir`` (utils.import_user_module), or the plugin's catalog imported before fairseq:
    fairseq's functions, sys.excepthook, torch's checkpoint allow-list and glibc's malloc settings
    stay as they were; fairseq's registries only gain the plugin's names."""
    effects = import_effects(first)
    assert effects["replaced"] == [] and effects["plugin_objects"] == []
    assert effects["excepthook_is_pythons"]
    before, after = effects["safe_globals"]
    assert after == before and not any("Namespace" in g for g in after)
    assert effects["malloc_thresholds_set"] is False
    assert effects["changed_entries"] == []
    names = effects["names"]  # registered (with the catalog first: before fairseq's modules were read here)
    assert {"gru_onestep", "gru_monoattn", "transformer_monoattn"} <= set(names["ARCH_MODEL_REGISTRY"])
    assert {"gru_seq2seq", "transformer_location"} <= set(names["MODEL_REGISTRY"])
    assert "length_generalization" in names["TASK_REGISTRY"] and "seq_acc" in names["CRITERION_REGISTRY"]
    assert "torch_adamw" in names["OPTIMIZER_REGISTRY"]
    if first == "user_dir":
        added = effects["added"]
        assert added["TASK_REGISTRY"] == ["length_generalization"]
        assert added["CRITERION_REGISTRY"] == ["seq_acc"] and added["OPTIMIZER_REGISTRY"] == ["torch_adamw"]
    assert effects["meta_path_added"] == []  # the catalog's wait for fairseq is over, its finder gone


COMMAND_MODULES_LOGGING = r"""
import json, logging
import fairseq.tasks

def levels():
    return [logging.getLogger("fairseq").level, logging.getLogger().level, len(logging.getLogger().handlers)]

before = levels()
import fairseq_monoattn.cli.common, fairseq_monoattn.cli.plot_attention, fairseq_monoattn.cli.prepare
import fairseq_monoattn.cli.score
imported = levels()
fairseq_monoattn.cli.common.Parser(prog="a-command")
print(json.dumps([before, imported, levels()]))
"""


def test_importing_the_plugins_command_modules_leaves_logging_alone_and_a_command_quiets_fairseq():
    """The plugin's commands quiet fairseq's INFO lines when they build their parser, not when
    their modules are imported: a program that imports their helpers keeps its logging."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", COMMAND_MODULES_LOGGING], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path), cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    before, imported, parsing = json.loads(done.stdout.strip().splitlines()[-1])
    assert imported == before and before[0] == 0  # logging.NOTSET: fairseq's level as fairseq leaves it
    assert parsing == [30, *before[1:]]  # logging.WARNING


def test_setting_up_the_plugins_task_applies_its_fixes(tmp_path):
    """Where a user chose the plugin's task, its fixes are in place for the process (each fix's own
    test: tests/test_fairseq_compat.py, test_allocator.py, test_criterion_task.py), and the
    --stop-after-perfect rule leaves a run of another task to fairseq's own rule."""
    from fairseq_cli_helpers import write_copy_dataset

    from fairseq_monoattn import allocator

    data = write_copy_dataset(tmp_path / "data", {"train": (8, 2, 3), "valid": (4, 2, 3)}) / "bin"
    effects = import_effects("task", str(data))
    replaced = set(effects["replaced"])
    assert replaced >= {"progress_bar.progress_bar", "utils.clip_grad_norm_", "sys.excepthook"}
    assert replaced >= {"PathManager.copy", "checkpoint_utils.PathManager.copy", "fairseq_cli.train.should_stop_early"}
    assert ("data_utils.batch_by_size" in replaced) == effects["fairseq_drops_the_last_batch"]
    assert ("utils.set_torch_seed" in replaced) == effects["cpu_only"]
    before, after = effects["safe_globals"]
    assert [g for g in after if g not in before] == ["<class 'argparse.Namespace'>"]
    settable = allocator.glibc() is not None and allocator.reason_to_keep_defaults(os.environ) is None
    assert effects["malloc_thresholds_set"] is settable
    assert effects["translation_stops"] == [False] * 4  # --patience 0: fairseq never stops early


def translation_data(tmp_path: Path) -> Path:
    """100 training pairs (6 batches of 16 and 4 left over, not a multiple of 8: fairseq-fixed
    0.12.3.1 drops those 4, as stock fairseq does), 13 validation pairs."""
    splits = translation_corpus.corpus(seed=3, sizes=(("train", 100), ("valid", 13)), vocabulary=12)
    translation_corpus.write(splits, tmp_path / "raw")
    raw, data = tmp_path / "raw", tmp_path / "bin"
    run_command("fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", f"{raw}/train",
                "--validpref", f"{raw}/valid", "--destdir", str(data), "--workers", "1")  # fmt: skip
    return data


def logged_losses(lines) -> list:
    """(kind, epoch, updates, loss) of every JSON progress line (fairseq's --log-format json),
    the timings left out."""
    found = []
    for line in lines:
        start = line.find("{")
        try:
            stats = json.loads(line[start:]) if start >= 0 else None
        except ValueError:
            continue
        for kind, prefix in (("train_inner", ""), ("train", "train_"), ("valid", "valid_")):
            if isinstance(stats, dict) and prefix + "loss" in stats:
                found.append((kind, stats.get("epoch"), stats.get(prefix + "num_updates"), stats[prefix + "loss"]))
    return found


@pytest.mark.long(20)
def test_fairseqs_translation_trains_the_same_with_the_plugin_loaded(tmp_path):
    """A stock fairseq-train --task translation --arch lstm run (a fixed seed, one thread, gradient
    clipping, a log file): the same losses in its log, update by update, with ``--user-dir`` as
    without it (one code path run twice, so the same numbers bit for bit)."""
    data = translation_data(tmp_path)
    runs = {}
    for name, extra in (("stock", []), ("plugin", ["--user-dir", USER_DIR])):
        log_file = tmp_path / f"{name}.log"
        output = run_command("fairseq-train", str(data), *extra, "--task", "translation", "--arch", "lstm",
                             "--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--decoder-embed-dim", "16",
                             "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16", "--optimizer", "adam",
                             "--lr", "3e-3", "--clip-norm", "0.5", "--batch-size", "16", "--max-update", "15",
                             "--seed", "7", "--save-dir", str(tmp_path / f"ck_{name}"), "--no-save",
                             "--log-format", "json", "--log-interval", "1", "--log-file", str(log_file),
                             "--num-workers", "0")  # fmt: skip
        runs[name] = logged_losses(output.splitlines()), logged_losses(log_file.read_text().splitlines())
    (stock_output, stock_file), (plugin_output, plugin_file) = runs["stock"], runs["plugin"]
    assert [kind for kind, *_ in stock_output].count("valid") == 3  # epochs of 6 updates: 6, 12, 15
    assert [int(u) for kind, _, u, _ in stock_output if kind == "train_inner"] == list(range(1, 16))
    assert plugin_output == stock_output
    assert plugin_file == stock_file
