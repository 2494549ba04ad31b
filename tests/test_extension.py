"""The plugin is open: a package of the user's own (examples/extension/attention_extras) adds a
step activation and a content scorer with settings of their own, and presets; fairseq-train,
fairseq-generate, fairseq-monoattn-score, -compare and -run accept them through --user-dir, run
from a folder outside the repository with the plugin installed as a package."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from fairseq import utils
from fairseq_cli_helpers import hypotheses, run_command, tiny_spec, with_tiny_data, write_copy_dataset

from fairseq_monoattn.testing import assert_incremental_equals_full, assert_padding_invariant, build, digit_dictionary

REPO = Path(__file__).resolve().parents[1]
EXTENSION = REPO / "examples" / "extension" / "attention_extras"
D = digit_dictionary()
SOURCES = [list("31415"), list("2718281828459045"), list("7"), list("1234567890123456789012")]


@pytest.fixture(scope="module")
def extension():
    utils.import_user_module(Namespace(user_dir=str(EXTENSION)))
    import attention_extras

    return attention_extras


def test_the_extension_registers_entries_options_and_presets(extension):
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_monoattn.models import gru_seq2seq
    from fairseq_monoattn.models.options import option_defaults, valid_choices
    from fairseq_monoattn.registry import SCORERS, STEP_ACTIVATIONS

    assert "tanh" in STEP_ACTIVATIONS and "additive" in SCORERS
    assert "tanh" in valid_choices("step_activation") and "additive" in valid_choices("attention_scoring")
    assert option_defaults()["tanh_step_scale"] == 1.0 and option_defaults()["additive_hidden"] == 32
    fields = gru_seq2seq.GRUSeq2SeqConfig.__dataclass_fields__  # the model's config took the new options
    assert "tanh_step_scale" in fields and "additive_hidden" in fields
    assert {"gru_tanh_onestep", "gru_mix_additive_tanh"} <= set(ARCH_MODEL_REGISTRY)
    model = build("gru_mix_additive_tanh", D, tanh_step_scale=2.0, additive_hidden=8)
    attention = model.decoder.attention
    assert type(attention.location.step).__name__ == "TanhStep" and attention.location.step.scale == 2.0
    assert type(attention.scorer).__name__ == "AdditiveScores" and attention.scorer.v.in_features == 8


def test_a_users_transformer_preset_builds_with_the_presets_options(extension):
    """The package registers a Transformer preset with the one ``register_preset`` its GRU presets
    use (before, only the plugin's private ``_register`` could add one)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_monoattn
    from fairseq_monoattn.models import gru_seq2seq, transformer_monoattn

    assert gru_seq2seq.register_preset is fairseq_monoattn.register_preset  # the GRU's import path still works
    assert ARCH_MODEL_REGISTRY["transformer_tanh_onestep"] is transformer_monoattn.TransformerMonoAttnModel
    preset = dict(transformer_monoattn.TRANSFORMER_PRESETS["transformer_onestep"], step_activation="tanh",
                  decoder_layers=2)  # fmt: skip
    model = build("transformer_tanh_onestep", D)
    assert {key: getattr(model.args, key) for key in preset} == preset
    assert len(model.decoder.layers) == 2 and model.encoder.layers[0].fc1.out_features == 256
    location = model.decoder.layers[-1].encoder_attn
    assert type(location).__name__ == "LocationEncoderAttention"
    step = location.attention.location.step
    assert type(step).__name__ == "TanhStep" and step.scale == 1.0
    # the command line still changes any option over the preset
    model = build("transformer_tanh_onestep", D, tanh_step_scale=2.0, decoder_layers=3)
    assert len(model.decoder.layers) == 3 and model.decoder.layers[-1].encoder_attn.attention.location.step.scale == 2.0


REGISTERED = """
import sys
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY
print(sorted({"gru_tanh_onestep", "gru_monoattn", "transformer_monoattn"} & set(ARCH_MODEL_REGISTRY)),
      "length_generalization" in TASK_REGISTRY, sys.excepthook.__name__)
"""


@pytest.mark.parametrize(
    "first_import",
    ["import attention_extras", "from fairseq_monoattn.models.gru_seq2seq import register_preset"],
    ids=["the-users-package", "the-plugins-model-module"],
)
def test_the_docs_package_pattern_imports_in_a_plain_python_process(first_import):
    """Before, a package importing fairseq_monoattn's modules (docs/extending.md) was a circular
    ImportError in a process that had not imported fairseq first (a test script, a notebook).
    The import registers the components and leaves Python's own excepthook in place."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([str(EXTENSION.parent), str(REPO)])
    done = subprocess.run(
        [sys.executable, "-c", first_import + "\n" + REGISTERED], capture_output=True, text=True, env=env, cwd=EXTENSION
    )
    assert done.returncode == 0, done.stderr[-3000:]
    registered = ["gru_monoattn", "gru_tanh_onestep", "transformer_monoattn"] if "extras" in first_import else [
        "gru_monoattn", "transformer_monoattn"]  # fmt: skip
    assert done.stdout.split("\n")[-2] == f"{registered} True excepthook", done.stdout


def test_the_new_step_computes_its_equation(extension):
    step = extension.TanhStep(extension.TanhStepSettings(tanh_step_scale=3.0))
    rho = torch.tensor([-50.0, 0.0, 50.0])
    assert step(rho).tolist() == pytest.approx([0.0, 1.5, 3.0])


def test_the_documented_tests_of_the_extension_pass_as_written(tmp_path):
    """docs/extending.md's test of the example package with fairseq_monoattn.testing, run by
    pytest from a file of its own: the scorer's forward_all against forward, and incremental
    decoding (beams 1 and 5) and padding invariance for both of the package's presets."""
    text = (REPO / "docs" / "extending.md").read_text()
    blocks = [b for b in text.split("```python\n")[1:] if "fairseq_monoattn.testing" in b.split("```")[0]]
    assert len(blocks) == 1
    test_file = tmp_path / "test_users_entry.py"
    test_file.write_text(blocks[0].split("```")[0])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([str(EXTENSION.parent), str(REPO)])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 passed" in done.stdout, done.stdout[-3000:]


def test_incremental_decoding_and_padding_invariance_hold_for_the_extensions_transformer_preset(extension):
    """The documented test above covers the package's GRU presets; its Transformer preset too."""
    for beam in (1, 5):
        assert_incremental_equals_full(build("transformer_tanh_onestep", D, seed=3), D, SOURCES, beam)
    assert_padding_invariant(build("transformer_tanh_onestep", D, seed=4), D, SOURCES)


def test_an_entry_cannot_take_a_name_or_an_option_another_has(extension):
    from dataclasses import dataclass

    from fairseq_monoattn.registry import StepActivation, register_step_activation

    with pytest.raises(ValueError, match="'tanh' is registered already"):
        register_step_activation("tanh")(type("Again", (StepActivation,), {}))

    @dataclass
    class Clash:
        sigma_min: float = 1.0

    with pytest.raises(ValueError, match="the model has an option of that name"):
        register_step_activation("clash2", settings=Clash)(type("Clashing2", (StepActivation,), {}))

    @dataclass
    class OtherDefault:
        step_temperature: float = 1.0  # sigmoid's option, another default

    with pytest.raises(ValueError, match="another type or default"):
        register_step_activation("clash3", settings=OtherDefault)(type("Clashing3", (StepActivation,), {}))
    with pytest.raises(TypeError, match="must extend StepActivation"):
        register_step_activation("not-a-step")(type("NotAStep", (torch.nn.Module,), {}))


@pytest.mark.long(14)
def test_train_generate_and_score_from_outside_the_repository(extension, tmp_path):
    """The plugin is installed; the user's package is given as --user-dir; nothing runs from the
    repository."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    data = write_copy_dataset(work / "data", {"train": (96, 2, 5), "valid": (12, 3, 6), "test": (10, 3, 6)})
    save = work / "ck"
    run_command(
        "fairseq-train",
        str(data / "bin"),
        "--user-dir",
        str(EXTENSION),
        "--arch",
        "gru_mix_additive_tanh",
        "--tanh-step-scale",
        "1.5",
        "--task",
        "length_generalization",
        "--criterion",
        "seq_acc",
        "--optimizer",
        "adam",
        "--lr",
        "3e-3",
        "--batch-size",
        "16",
        "--max-epoch",
        "2",
        "--save-dir",
        str(save),
        "--no-epoch-checkpoints",
        "--seed",
        "1",
        cwd=work,
        new_process=True,
    )
    checkpoint = torch.load(save / "checkpoint_last.pt", weights_only=True)
    model_cfg = checkpoint["cfg"]["model"]
    assert (model_cfg["step_activation"], model_cfg["attention_scoring"]) == ("tanh", "additive")
    assert (model_cfg["tanh_step_scale"], model_cfg["additive_hidden"]) == (1.5, 32)
    output = run_command(
        "fairseq-generate",
        str(data / "bin"),
        "--user-dir",
        str(EXTENSION),
        "--path",
        str(save / "checkpoint_last.pt"),
        "--task",
        "length_generalization",
        "--gen-subset",
        "test",
        "--beam",
        "1",
        "--batch-size",
        "4",
        cwd=work,
        new_process=True,
    )
    assert sorted(hypotheses(output.splitlines())) == list(range(10))
    out = work / "scores.json"
    run_command(
        "fairseq-monoattn-score",
        "--checkpoint",
        str(save / "checkpoint_last.pt"),
        "--data",
        str(data / "bin"),
        "--splits",
        "test",
        "--out",
        str(out),
        "--user-dir",
        str(EXTENSION),
        cwd=work,
        new_process=True,
    )
    assert json.loads(out.read_text())["splits"]["test"]["size"] == 10


def documented_commands(*names):
    """The commands of docs/extending.md that start with one of ``names``, as argument lists (a
    line ending in a backslash continues on the next)."""
    text = (REPO / "docs" / "extending.md").read_text().replace("\\\n", " ")
    blocks = text.split("```")[1::2]
    return [
        shlex.split(line) for block in blocks for line in block.splitlines() if line.split()[:1] in [[n] for n in names]
    ]


@pytest.mark.long(60)
def test_the_documented_compare_and_run_commands_train_score_record_and_then_reuse_every_record(tmp_path):
    """docs/extending.md's fairseq-monoattn-compare and -run lines, from a folder outside the
    repository that holds the package where the lines name it, at a tiny budget: every run trains,
    scores and records (the user's package in the record, and which code the decoder trained with:
    the plugin's preset and the user's entries run different code); the same commands again train
    nothing and leave every record as it was."""
    from fairseq_monoattn.modules import compiled

    outside = tmp_path / "elsewhere"
    package = outside / "examples" / "extension" / "attention_extras"
    shutil.copytree(EXTENSION, package)
    with_tiny_data(outside / "work", tiny_spec(task="copy"))  # the copy data the runs look for, tiny
    commands = documented_commands("fairseq-monoattn-compare", "fairseq-monoattn-run")
    assert [argv[0] for argv in commands] == ["fairseq-monoattn-compare", "fairseq-monoattn-run"]
    budget = ["--seeds", "1", "--max-epoch", "1", "--stop-after-perfect", "0"]
    for argv in commands:
        run_command(argv[0], *argv[1:], *budget, cwd=outside)
    results = outside / "results" / "paper" / "copy"
    paths = sorted(results.glob("*/*/seed*.json"))
    assert [str(p.relative_to(results)) for p in paths] == [
        "gru_mix_additive_tanh/default/seed1.json",
        "gru_onestep/sigmoid/seed1.json",
        "gru_onestep/tanh/seed1.json",
    ]
    records = {str(p.relative_to(results).parent): json.loads(p.read_text()) for p in paths}
    for record in records.values():
        assert record["user_dir"] == str(package.resolve())
        assert set(record["splits"]) == {"test9", "test_iid"} and record["splits"]["test9"]["size"] == 13
    assert records["gru_onestep/tanh"]["model_config"]["step_activation"] == "tanh"
    assert records["gru_onestep/sigmoid"]["model_config"]["step_activation"] == "sigmoid"
    assert records["gru_mix_additive_tanh/default"]["model_config"]["attention_scoring"] == "additive"
    built = compiled.available()
    assert records["gru_onestep/sigmoid"]["training_code"] == ["C++ decoder loop" if built else "Python"]
    for users in ("gru_onestep/tanh", "gru_mix_additive_tanh/default"):  # an entry of the user's: step by step
        assert records[users]["training_code"] == ["C++ step nodes" if built else "Python"]
    stamps = [p.stat().st_mtime_ns for p in paths]
    logs = sorted((outside / "work" / "runs").glob("copy/*/*/seed1/stdout.log"))
    sizes = [log.stat().st_size for log in logs]
    assert len(logs) == 3
    for argv, done in zip(commands, ("2/2", "1/1")):
        output = run_command(argv[0], *argv[1:], *budget, cwd=outside)
        assert f"{done} runs done, 0 running, 0 left" in output and "] training" not in output
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    assert [log.stat().st_size for log in logs] == sizes
