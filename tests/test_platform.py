"""What makes the plugin a platform: registration without import-order traps, commands that
start without fairseq, plan a command's model without it, agree on names and defaults, and
refuse a bad name before anything is created."""

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from forked_commands import command as forked_command

from fairseq_monoattn.testing import build, digit_dictionary

D = digit_dictionary()


def python(code: str, cwd=None):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_the_package_registers_once_fairseq_is_imported_and_the_fast_commands_never_import_it():
    done = python(
        "import sys\n"
        "import fairseq_monoattn, fairseq_monoattn.catalog, fairseq_monoattn.cli.prepare, monoattn_lab.cli.sweep\n"
        "import monoattn_lab.cli.aggregate, fairseq_monoattn.models.options, monoattn_lab.sweeps\n"
        "assert 'fairseq' not in sys.modules, 'fairseq imported'\n"
        "from fairseq.models import ARCH_MODEL_REGISTRY\n"
        "from fairseq.tasks import TASK_REGISTRY\n"
        "assert 'gru_monoattn' in ARCH_MODEL_REGISTRY and 'length_generalization' in TASK_REGISTRY\n"
        "print('ok')\n"
    )
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_data_command_starts_without_fairseq_or_torch():
    done = python(
        "import sys\nfrom fairseq_monoattn.cli import prepare\n"
        "try:\n    prepare.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('fairseq', 'torch') if m in sys.modules))"
    )
    assert done.stdout.strip().endswith("[]"), done.stderr[-2000:]


def test_no_module_takes_the_whole_model_config():
    from fairseq_monoattn.models.gru_seq2seq import GRUDecoder, GRUEncoder
    from fairseq_monoattn.modules import CrossAttention, DirectionGate, LocationAttention
    from fairseq_monoattn.registry import REGISTRIES

    classes = [CrossAttention, DirectionGate, LocationAttention, GRUEncoder, GRUDecoder]
    classes += [entry.cls for registry in REGISTRIES.values() for entry in registry.entries.values()]
    for cls in classes:
        named = [
            p.name
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        assert "cfg" not in named and "args" not in named, cls.__name__


PLANNED_VARIANTS = [
    (),
    ("--location-normalization", "sum"),
    ("--share-all-embeddings", "True"),
    ("--mix-temperature", "5", "--lr-patience", "3"),
    ("--train-batches", "sorted"),
    ("--step-activation", "relu", "--mono-gate-init", "0", "--direction-gate", "False"),
    ("--decoder-hidden-size", "96", "--attention-dim", "48"),
]


@pytest.mark.long(14)
def test_the_planned_model_config_is_what_fairseqs_parser_gives():
    """aggregate and sweep status tell outdated records without fairseq; they must see the model
    fairseq-train builds, preset, defaults and the variant's options included."""
    from fairseq_monoattn.models.presets import PRESETS
    from monoattn_lab.spec import RunSpec, parsed_model_config, planned_model_config, train_command

    checked = 0
    for arch in ["gru_seq2seq", *PRESETS]:
        for options in PLANNED_VARIANTS if arch in ("gru_seq2seq", "gru_monoattn", "gru_mix_onestep") else [()]:
            spec = RunSpec("copy", arch, seed=1, options=options, max_epoch=25, stop_after_perfect=3)
            command = train_command(spec, Path("data"), Path("run"))
            assert planned_model_config(command) == parsed_model_config(command), (arch, options)
            checked += 1
    assert checked > 30


def test_a_checkpoint_from_before_the_step_modules_loads():
    """Mono's gate logit moved from the location module to its step module; an old state dict
    (the old name) loads into the new model, and the value arrives."""
    model = build("gru_monoattn", D, seed=1)
    state = model.state_dict()
    state["decoder.attention.location.mono_gate_logit"] = torch.tensor(3.5)
    del state["decoder.attention.location.step.gate_logit"]
    model.load_state_dict(state)
    assert model.decoder.attention.location.step.gate_logit.item() == 3.5


# --- the commands ----------------------------------------------------------------------------------


def command(name, *argv, cwd):
    """fairseq-monoattn-NAME ARGV in ``cwd``, forked from the tests' command server (the plugin
    imported by the command, as by a new process; tests/forked_commands.py): what it writes and
    its exit status are a new process's, without a fresh interpreter's start-up for each."""
    return forked_command(f"fairseq-monoattn-{name}", *argv, cwd=cwd, timeout=300)


BAD_CALLS = [
    ("prepare", ["copyy", "--out", "data"], "unknown task 'copyy'"),
    ("prepare", ["scan", "--out", "data", "--test-lengths", "50"], "--test-lengths: scan reads its test splits"),
    ("run", ["copyy", "--arch", "gru_onestep"], "unknown task 'copyy'"),
    ("run", ["copy", "--arch", "gru_onestepp"], "--arch: unknown architecture 'gru_onestepp'"),
    (
        "run",
        ["copy", "--arch", "gru_onestep", "--variant", "x=--lr-patiance 3"],
        "unrecognized arguments: --lr-patiance",
    ),
    (
        "run",
        ["copy", "--arch", "gru_onestep", "--variant", "x=--sigma-min -1"],
        "argument --sigma-min: must be > 0, got -1",
    ),
    ("run", ["copy", "--arch", "gru_onestep", "--variant", "x=--direction-gate yes"], "--direction-gate"),
    ("run", ["copy", "--arch", "gru_onestep", "--variant", "--lr 3"], "NAME=OPTIONS"),
    (
        "run",
        ["copy", "--arch", "gru_onestep", "--variant", "a=", "--variant", "b=--lr 3"],
        "--variant given twice ('a=', then 'b=--lr 3'); this command runs one",
    ),
    (
        "compare",
        ["copy", "--arch", "gru_onestep", "--variant", "a=", "--variant", "b=--step-activation tanhh"],
        "--variant b: argument --step-activation: invalid choice: 'tanhh'",
    ),
    ("compare", ["copy", "--arch", "gru_onestep", "--variant", "a="], "at least two --variant"),
    ("sweep", ["run", "table22"], "unknown sweep 'table22'"),
    ("sweep", ["run", "table2", "--arch", "gru_onestepp"], "--arch: table2 has no gru_onestepp"),
    ("sweep", ["status", "table2", "--task", "cop"], "--task: unknown task 'cop'"),
    ("aggregate", ["tables", "--results", "nowhere"], "--results nowhere: no such folder"),
    ("aggregate", [], "the following arguments are required: VIEW"),
    ("aggregate", ["table"], "invalid choice: 'table'"),
    (
        "score",
        ["--checkpoint", "none.pt", "--data", ".", "--splits", "test", "--out", "s.json"],
        "checkpoint not found: none.pt",
    ),
    (
        "plot-attention",
        ["--checkpoint", "none.pt", "--data", ".", "--source", "1 2", "--out", "a.png"],
        "checkpoint not found: none.pt",
    ),
    ("user-dir", ["extra"], "takes no arguments"),
]


@pytest.mark.parametrize("name, argv, message", BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)])
def test_a_bad_name_or_value_is_one_line_exit_2_and_nothing_is_created(tmp_path, name, argv, message):
    done = command(name, *argv, cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert list(tmp_path.iterdir()) == []  # no work folder, no run folder, no lock, no record


def test_a_variant_may_set_task_and_scheduler_options(tmp_path):
    """The check parses a variant after the recipe, as fairseq-train will: the task's and the lr
    scheduler's options are known (the variant fairseq-habits sets both)."""
    from monoattn_lab.cli.common import Parser, check_train_options

    parser = Parser(prog="test")
    check_train_options(parser, "gru_monoattn", "habits", ["--train-batches", "sorted", "--lr-patience", "3"])
    with pytest.raises(SystemExit):
        check_train_options(parser, "gru_monoattn", "typo", ["--train-batch", "sorted"])


def test_the_commands_that_pass_model_options_list_them_grouped(tmp_path):
    """fairseq-train --help lists no model options (it answers before --arch adds them); run and
    compare, whose --variant passes them, list those of --arch's model, the conventions' group apart."""
    from fairseq_monoattn.models.options import CONVENTION_OPTIONS

    def flag(name):
        return "--" + name.replace("_", "-")

    plain = command("run", "--help", cwd=tmp_path).stdout
    gru_group, advanced = plain.index("model options of gru_seq2seq"), plain.index("--conventions' group one by one")
    entries = plain.index("the attention entries' settings")
    assert gru_group < advanced < entries and "--conventions {plugin,presets,release}" in plain[gru_group:advanced]
    # the options a process with the plugin alone knows (this one may hold other tests' entries)
    known = subprocess.run(
        [sys.executable, "-c", "from fairseq_monoattn.models.options import option_fields; print(*option_fields())"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "step_temperature" in known and "tanh_step_scale" not in known
    for name in known:
        assert flag(name) in plain, name
    for name in CONVENTION_OPTIONS:  # in the advanced group, each saying where its default comes from
        assert advanced < plain.index(flag(name) + " ") < entries, name
    assert plain.count("part of --conventions (default: from it: plugin") == len(CONVENTION_OPTIONS)
    assert advanced < plain.index("--step-temperature") and "transformer_location" not in plain
    named = " ".join(command("compare", "--arch", "transformer_onestep", "--help", cwd=tmp_path).stdout.split())
    assert "model options of transformer_location" in named and "model options of gru_seq2seq" not in named
    assert "--location-layers {none,last,all,shared}" in named and "--encoder-ffn-embed-dim" in named
    assert "transformer_onestep sets --encoder-embed-dim 64" in named
    preset = " ".join(command("run", "copy", "--arch", "gru_onestep", "--help", cwd=tmp_path).stdout.split())
    assert "gru_onestep sets --conventions presets --mix-temperature 1.0" in preset


def test_the_commands_agree_on_names_and_show_their_defaults(tmp_path):
    helps = {
        name: " ".join(command(name, *sub, "--help", cwd=tmp_path).stdout.split())
        for name, sub in (
            ("run", []),
            ("compare", []),
            ("sweep", ["run"]),
            ("score", []),
            ("plot-attention", []),
            ("aggregate", ["tables"]),
        )
    }
    for name in ("run", "compare", "sweep"):
        text = helps[name]
        for option in ("--arch", "--seeds", "--work", "--results", "--jobs"):
            assert option in text, (name, option)
    for name in ("run", "compare"):
        assert "(default: 25)" in helps[name] and "(default: [1, 2, 3])" in helps[name]
        assert "(default: results/paper)" in helps[name] and "--variant NAME=OPTIONS" in helps[name]
    assert "(default: results/paper)" in helps["aggregate"]
    # a sweep's records go to its own folder: the help names both, and shows no bare None
    assert "default: the sweep's own folder (results/paper for the paper's tables" in helps["sweep"]
    assert "for the Transformer sweeps) (default" not in helps["sweep"]
    for name in ("score", "plot-attention"):
        assert "--checkpoint" in helps[name] and "--user-dir" in helps[name]


def test_the_installed_plugin_folder_serves_as_user_dir_from_anywhere(tmp_path):
    import fairseq_monoattn

    done = command("user-dir", cwd=tmp_path)
    assert done.returncode == 0 and Path(done.stdout.strip()) == Path(fairseq_monoattn.__file__).resolve().parent


def test_prepare_writes_extra_test_lengths_seeded(tmp_path):
    """--test-lengths adds testN splits of exactly N digits; the paper's splits are unchanged by
    them (each split draws from a generator of its own); the same seed gives the same bytes."""
    from fairseq_monoattn.data.prepare import prepare

    plain = prepare("inv_recopy", tmp_path / "plain", seed=3)
    extra = prepare("inv_recopy", tmp_path / "extra", seed=3, test_lengths=[7, 120], test_size=40)
    prepare("inv_recopy", tmp_path / "again", seed=3, test_lengths=[7, 120], test_size=40)
    assert set(extra["splits"]) == set(plain["splits"]) | {"test7", "test120"}
    for split in plain["splits"]:
        for side in ("src", "tgt"):
            name = f"raw/{split}.{side}"
            assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "extra" / name).read_bytes()
    for split in ("test7", "test120"):
        for side in ("src", "tgt"):
            name = f"raw/{split}.{side}"
            assert (tmp_path / "extra" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    targets = (tmp_path / "extra" / "raw" / "test120.tgt").read_text().splitlines()
    assert len(targets) == 40 and {len(line.split()) for line in targets} == {120}  # Inv ReCopy: length = target
    assert extra["splits"]["test120"]["size"] == 40
    assert json.loads((tmp_path / "extra" / "manifest.json").read_text())["splits"]["test7"]["min_length"] == 7
