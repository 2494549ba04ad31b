"""Values that are accepted but mean something else, or fail late: each is refused when the model
is built or the preset registered (before any training), as one line naming the option."""

import math
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from fairseq_cli_helpers import TINY, ForkedFunction, write_copy_dataset
from forked_commands import command

from fairseq_monoattn import register_preset
from fairseq_monoattn.models import transformer_monoattn
from fairseq_monoattn.models.gru_seq2seq import REGISTERED_PRESETS
from fairseq_monoattn.models.options import OptionError
from fairseq_monoattn.models.presets import PRESETS
from fairseq_monoattn.testing import build

PLUGIN = Path(__file__).resolve().parents[1] / "fairseq_monoattn"
TEMPERATURES = ("mix_temperature", "step_temperature", "direction_temperature")
# presets that read all three: a content/location mix, a sigmoid (or mono) step and a direction gate
READ_ALL_THREE = ("gru_mix_monoattn", "gru_mix_onestep", "transformer_mix_onestep")


TRAIN = ("--task", "length_generalization", "--criterion", "seq_acc", "--optimizer", "adam", "--lr", "1e-3",
         "--batch-size", "8", "--max-epoch", "1")  # fmt: skip


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def error_lines(done):
    """The error lines of a fairseq command (hydra's DEBUG lines aside), none if it printed a traceback."""
    lines = done.stderr.splitlines()
    return (
        []
        if "Traceback" in done.stderr
        else [line for line in lines if line.startswith("error: ") or ": error: " in line]
    )


@pytest.mark.parametrize("arch", READ_ALL_THREE)
@pytest.mark.parametrize("option", TEMPERATURES)
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan], ids=["zero", "negative", "inf", "nan"])
def test_a_temperature_that_is_not_positive_and_finite_is_refused_when_the_model_is_built(arch, option, value):
    """Before, 0 and negatives built a model (a constant or reversed sigmoid) and inf died with NaN
    gradients once training started."""
    flag = "--" + option.replace("_", "-")
    with pytest.raises(OptionError, match=f"^{flag} must be > 0 and finite, got {value}$"):
        build(arch, **{option: value})


@pytest.mark.parametrize("arch", READ_ALL_THREE)
def test_positive_finite_temperatures_still_build(arch):
    model = build(arch, mix_temperature=0.5, step_temperature=1e3, direction_temperature=2.0)
    attention = next(m for m in model.modules() if type(m).__name__ == "CrossAttention")
    assert attention.mix_temperature == 0.5 and attention.location.step.temperature == 1e3
    assert attention.direction_gate.temperature == 2.0


def test_the_command_line_refuses_an_infinite_temperature_in_one_line(tmp_path):
    data = write_copy_dataset(tmp_path / "data", TINY)
    done = command("fairseq-train", data / "bin", "--user-dir", PLUGIN, "--arch", "gru_monoattn", *TRAIN,
                   "--step-temperature", "inf")  # fmt: skip
    assert done.returncode == 2 and "--step-temperature: must be > 0 and finite, got inf" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(step_activation="sofplus"), "--step-activation must be one of sigmoid, mono, relu, softstair, none, "),
        (dict(reference="previus"), "--reference must be one of previous, gated, initial-bias, got 'previus'"),
        (dict(attention_scoring="contnet"), "--attention-scoring must be one of none, content, relative, rotary, "),
        (dict(mix_temperature=math.inf), "--mix-temperature must be > 0 and finite, got inf"),
    ],
    ids=["step", "reference", "scoring", "temperature"],
)
def test_a_preset_with_an_unknown_entry_or_a_bad_value_is_refused_when_registered(change, named):
    """Before, a preset naming an unknown entry was registered and failed only when used."""
    with pytest.raises(OptionError, match=f"^preset 'gru_typo': {named}"):
        register_preset("gru_typo", dict(PRESETS["gru_onestep"], **change))
    assert "gru_typo" not in REGISTERED_PRESETS
    from fairseq.models import ARCH_MODEL_REGISTRY

    with pytest.raises(OptionError, match=f"^preset 'transformer_typo': {named}"):
        register_preset("transformer_typo", dict(transformer_monoattn.TRANSFORMER_PRESETS["transformer_onestep"],
                                                 **change), model="transformer_location")  # fmt: skip
    assert "transformer_typo" not in ARCH_MODEL_REGISTRY and "gru_typo" not in ARCH_MODEL_REGISTRY


def test_a_transformer_preset_with_an_unknown_layer_choice_is_refused_when_registered():
    values = dict(transformer_monoattn.TRANSFORMER_PRESETS["transformer_onestep"], location_layers="first")
    with pytest.raises(OptionError, match="^preset 'transformer_typo': --location-layers must be one of none, last"):
        register_preset("transformer_typo", values, model="transformer_location")


@pytest.mark.parametrize(
    "model, change, named",
    [
        ("transformer_location", dict(encoder_layer=2), "unknown options --encoder-layer"),
        ("transformer_location", dict(embedding_init="zeros"), "unknown options --embedding-init"),  # the GRU's
        ("transformer_location", dict(activation_fn="gelu2"), "--activation-fn must be one of relu, gelu, "),
        ("gru_seq2seq", dict(location_layers="last"), "unknown options --location-layers"),  # the Transformer's
        ("lstm", {}, "model must be one of gru_seq2seq, transformer_location, got 'lstm'"),
    ],
    ids=["misspelt", "gru-option", "fairseq-choice", "transformer-option", "model"],
)
def test_a_preset_setting_an_option_its_model_lacks_is_refused_when_registered(model, change, named):
    """Before, a Transformer preset's misspelt or foreign option was set on the arguments and never read."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    base = transformer_monoattn.TRANSFORMER_PRESETS["transformer_onestep"] if model != "gru_seq2seq" else {}
    with pytest.raises(OptionError, match=f"^preset 'any_typo': {re.escape(named)}"):
        register_preset("any_typo", dict(base, **change), model=model)
    assert "any_typo" not in ARCH_MODEL_REGISTRY and "any_typo" not in REGISTERED_PRESETS


# A user's package whose entry validates its settings, and a preset naming an entry it misspells.
ODD_STEP = """
from dataclasses import dataclass, field

import torch

import fairseq_monoattn
from fairseq_monoattn.models.gru_seq2seq import register_preset
from fairseq_monoattn.models.presets import PRESETS
from fairseq_monoattn.registry import StepActivation, register_step_activation


@dataclass
class OddStepSettings:
    odd_step_width: int = field(default=1, metadata={"help": "an odd number of positions"})

    def __post_init__(self):
        if self.odd_step_width % 2 == 0:
            raise ValueError(f"odd_step_width must be odd, got {self.odd_step_width}")


@register_step_activation("odd", settings=OddStepSettings)
class OddStep(StepActivation):
    def __init__(self, settings):
        super().__init__()
        self.width = settings.odd_step_width

    def forward(self, rho):
        return self.width * torch.sigmoid(rho)


register_preset("gru_odd_onestep", dict(PRESETS["gru_onestep"], step_activation="odd"))
"""


def user_package(root: Path, name: str, text: str) -> Path:
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(text))
    return package


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_copy_dataset(tmp_path_factory.mktemp("data") / "copy", TINY) / "bin"


@pytest.mark.parametrize("arch", ["gru_odd_onestep", "transformer_onestep"], ids=["gru-preset", "transformer-preset"])
def test_an_entry_whose_settings_refuse_a_value_is_one_line_naming_the_entry_and_option(tmp_path, tiny_data, arch):
    """Before, the settings dataclass's ValueError was a 30-line traceback out of the model's build."""
    package = user_package(tmp_path, "odd_steps", ODD_STEP)
    done = command("fairseq-train", tiny_data, "--user-dir", package, "--arch", arch, *TRAIN,
                   "--step-activation", "odd", "--odd-step-width", "2", "--save-dir", tmp_path / "ck")  # fmt: skip
    assert done.returncode == 1 and error_lines(done) == [
        "error: --step-activation odd: --odd-step-width 2: odd_step_width must be odd, got 2"
    ], done.stderr[-3000:]
    assert not list(tmp_path.glob("ck/*.pt"))  # refused before training started


def test_a_users_preset_naming_an_unknown_entry_is_one_line_when_its_package_is_imported(tmp_path, tiny_data):
    text = ODD_STEP.replace('step_activation="odd"', 'step_activation="od"')
    package = user_package(tmp_path, "odd_typo", text)
    done = command("fairseq-train", tiny_data, "--user-dir", package, "--arch", "gru_onestep", *TRAIN,
                   "--save-dir", tmp_path / "ck")  # fmt: skip
    assert done.returncode == 1 and error_lines(done) == [
        "error: preset 'gru_odd_onestep': --step-activation must be one of sigmoid, mono, relu, softstair, none, "
        "odd, got 'od'"
    ], done.stderr[-3000:]


# A user's package registering a Transformer preset with a misspelt option
TRANSFORMER_TYPO = """
from fairseq_monoattn import register_preset
from fairseq_monoattn.models.transformer_monoattn import TRANSFORMER_PRESETS

register_preset("transformer_deep_onestep", dict(TRANSFORMER_PRESETS["transformer_onestep"], decoder_layer=6),
                model="transformer_location")
"""


def test_a_users_transformer_preset_with_an_unknown_option_is_one_line_when_its_package_is_imported(
    tmp_path, tiny_data
):
    package = user_package(tmp_path, "deep_typo", TRANSFORMER_TYPO)
    done = command("fairseq-train", tiny_data, "--user-dir", package, "--arch", "transformer_onestep", *TRAIN,
                   "--save-dir", tmp_path / "ck")  # fmt: skip
    assert done.returncode == 1 and error_lines(done) == [
        "error: preset 'transformer_deep_onestep': unknown options --decoder-layer"
    ], done.stderr[-3000:]
    assert not list(tmp_path.glob("ck/*.pt"))


# --- checkpoints that other tools read ----------------------------------------------------------

# fairseq's scripts/average_checkpoints.py, as far as loading goes: torch.load with torch's default
# (weights_only=True since torch 2.6) in a process that never imports the plugin, which would
# allow-list argparse.Namespace (fairseq_compat.py); the parameters summed, then divided.
AVERAGE = """
import sys
import torch

paths, out = sys.argv[1:-1], sys.argv[-1]
states = [torch.load(path, map_location="cpu", weights_only=True) for path in paths]
average = {key: sum(state["model"][key].double() for state in states) / len(states) for key in states[0]["model"]}
states[-1]["model"] = {key: value.to(states[0]["model"][key].dtype) for key, value in average.items()}
torch.save(states[-1], out)
print(sorted(name for name in sys.modules if name.startswith("fairseq")))
"""


def test_transformer_checkpoints_load_and_average_without_the_plugin(tmp_path, tiny_data):
    """Before, the Transformer presets' checkpoints held their configuration as an argparse.Namespace,
    which torch 2.6+'s weights_only loader refuses outside the plugin (GRU checkpoints loaded)."""
    import sys

    import torch
    from fairseq import checkpoint_utils

    from monoattn_lab.outdated import check_checkpoint_matches

    checkpoints = []
    for seed in (1, 2):
        save = tmp_path / f"seed{seed}"
        train = ["fairseq-train", tiny_data, "--user-dir", PLUGIN, "--arch", "transformer_onestep_recency", *TRAIN,
                 "--seed", seed, "--save-dir", save, "--no-epoch-checkpoints"]  # fmt: skip
        done = command(*train)
        assert done.returncode == 0, done.stderr[-3000:]
        checkpoints.append(save / "checkpoint_last.pt")
        check_checkpoint_matches(checkpoints[-1], list(map(str, train)))  # resuming reads the stored configuration
    averaged = tmp_path / "averaged.pt"
    done = subprocess.run([sys.executable, "-c", AVERAGE, *map(str, checkpoints), str(averaged)], capture_output=True,
                          text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"  # neither the plugin nor fairseq was imported
    # the averaged checkpoint is the Transformer the presets describe, with the mean of the weights
    (model,), _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(averaged)], arg_overrides={"data": str(tiny_data)}
    )
    states = [torch.load(path, map_location="cpu", weights_only=True)["model"] for path in checkpoints]
    for key, value in model.state_dict().items():
        mean = (sum(state[key].double() for state in states) / 2).to(value.dtype)
        assert torch.equal(value, mean), key
    assert model.decoder.recency_bias == 1.0 and model.decoder.recency_exempts_start is True
    assert model.encoder.embed_positions is None and model.decoder.layers[-1].encoder_attn.gate_summary == "none"
    assert not torch.equal(states[0]["decoder.embed_tokens.weight"], states[1]["decoder.embed_tokens.weight"])


def test_a_checkpoint_of_a_users_preset_loaded_without_its_package_names_the_package(tmp_path, tiny_data):
    """Before: "'_name'" from fairseq-monoattn-score and plot-attention, fairseq's own broken
    "Available models" KeyError from fairseq-generate."""
    extension = Path(__file__).resolve().parents[1] / "examples" / "extension" / "attention_extras"
    save = tmp_path / "ck"
    done = command("fairseq-train", tiny_data, "--user-dir", extension, "--arch", "gru_tanh_onestep", *TRAIN,
                   "--save-dir", save, "--no-epoch-checkpoints")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    checkpoint = save / "checkpoint_last.pt"
    named = (f"{checkpoint} was trained with --arch gru_tanh_onestep, from the package {extension} "
             f"(cfg.common.user_dir): pass --user-dir {extension}")  # fmt: skip
    out = tmp_path / "scores.json"
    score = command("fairseq-monoattn-score", "--checkpoint", checkpoint, "--data", tiny_data, "--splits", "test9",
                    "--out", out)  # fmt: skip
    assert score.returncode == 2 and error_lines(score) == [f"error: {named}"] and not out.exists(), score.stderr
    plot = command("fairseq-monoattn-plot-attention", "--checkpoint", checkpoint, "--data", tiny_data, "--source",
                   "1 2", "--out", tmp_path / "a.png")  # fmt: skip
    assert plot.returncode == 2 and error_lines(plot) == [f"fairseq-monoattn-plot-attention: error: {named}"]
    generate = command("fairseq-generate", tiny_data, "--user-dir", PLUGIN, "--path", checkpoint, "--task",
                       "length_generalization", "--gen-subset", "test9", "--beam", "1")  # fmt: skip
    assert generate.returncode == 1 and error_lines(generate) == [f"error: {named}"], generate.stderr[-3000:]
    # with the package the same checkpoint scores
    score = command("fairseq-monoattn-score", "--checkpoint", checkpoint, "--data", tiny_data, "--splits", "test9",
                    "--out", out, "--user-dir", extension)  # fmt: skip
    assert score.returncode == 0 and out.exists(), score.stderr[-3000:]


def test_only_the_plugins_checkpoints_are_checked_for_their_architecture():
    from fairseq_monoattn.fairseq_compat import UnregisteredArchitecture, check_architecture_registered

    plugin_model = dict(_name="gru_gone", location_attention=False, attention_scoring="content", step_activation="mono")
    with pytest.raises(
        UnregisteredArchitecture, match="^x.pt was trained with --arch gru_gone, that no package imported here "
    ):
        check_architecture_registered({"cfg": {"model": plugin_model, "common": {"user_dir": None}}}, "x.pt")
    # fairseq's own models (and any model without the plugin's options) are left to fairseq
    check_architecture_registered({"cfg": {"model": {"_name": "some_other_model"}, "common": {}}}, "x.pt")
    check_architecture_registered({"cfg": {"model": dict(plugin_model, _name="gru_onestep")}}, "x.pt")


# --- a full disk --------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True], ids=["new", "replacing"])
def test_a_write_that_fails_while_preparing_is_one_line_naming_the_file_and_nothing_is_left(tmp_path, force):
    """Before, a full disk was a 29-line traceback."""
    import resource
    import signal

    from fairseq_monoattn.cli import prepare

    out = tmp_path / "copy"
    before = None
    if force:  # a complete data set that the new one would replace
        assert command("fairseq-monoattn-prepare", "copy", "--out", out).returncode == 0
        before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}

    def file_size_limit():  # files may not grow past 3000 bytes: the kernel refuses the write, as a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # does (EFBIG, not ENOSPC), the process not killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    argv = ["copy", "--out", str(out)] + (["--force"] if force else [])
    # prepare's entry point in a child forked from this process (fairseq imported already, which
    # binarizing needs: a new interpreter spent most of this test importing it); its error's one
    # line is far below the limit its output file is under too
    child = ForkedFunction(prepare.main, argv, output=tmp_path.parent / f"{tmp_path.name}.out", cwd=tmp_path,
                           before=file_size_limit)  # fmt: skip
    done = subprocess.CompletedProcess(argv, child.wait(600), "", child.read_output())
    assert done.returncode == 2 and error_lines(done) == [
        f"error: {out / 'bin' / 'train.src-tgt.src.bin'}: cannot write it: File too large; --out was left as it was"
    ], done.stderr[-3000:]
    assert sorted(path.name for path in tmp_path.iterdir()) == (["copy"] if force else [])  # no staging folder left
    if force:
        assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


# --- precisions this machine cannot train in ----------------------------------------------------


@pytest.mark.skipif(torch_has_cuda(), reason="float16 training works where torch has a CUDA device")
def test_half_precision_without_its_device_is_one_line_before_training_and_fairseqs_own_tasks_unchanged(
    tmp_path, tiny_data
):
    """Before, fairseq-train --fp16 on a machine without CUDA died in fairseq's FP16Optimizer ('Torch
    not compiled with CUDA enabled'), --bf16 in the trainer ('NoneType' has no 'xla_device')."""
    import torch

    train = ["fairseq-train", tiny_data, "--user-dir", PLUGIN, "--arch", "gru_onestep", *TRAIN]
    for flag, named in [
        ("--fp16", "error: --fp16: fairseq trains in float16 on a CUDA device only, and torch has no CUDA device here"),
        ("--bf16", "error: --bf16: fairseq-train's --bf16 implies --tpu, a TPU through torch_xla, which is not "
                   "installed here; drop --bf16 (fairseq-hydra-train's common.bf16=true trains in bfloat16 without "
                   "a TPU)"),
    ]:  # fmt: skip
        done = command(*train, flag, "--save-dir", tmp_path / flag)
        assert done.returncode == 1 and len(error_lines(done)) == 1, done.stderr[-3000:]
        assert error_lines(done)[0].startswith(named) and not list(tmp_path.glob(f"{flag}/*.pt"))
    # fairseq's own task: fairseq's behaviour, the plugin says nothing
    done = command("fairseq-train", tiny_data, "--user-dir", PLUGIN, "--arch", "lstm", "--task", "translation",
                   "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "8", "--max-epoch", "1", "--fp16",
                   "--save-dir", tmp_path / "translation")  # fmt: skip
    assert done.returncode != 0 and "error: --fp16" not in done.stderr and "CUDA" in done.stderr
    # a checkpoint trained in float16 (on a GPU) still loads and scores here
    done = command(*train, "--save-dir", tmp_path / "ck", "--no-epoch-checkpoints")
    assert done.returncode == 0, done.stderr[-3000:]
    state = torch.load(tmp_path / "ck" / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["task"]["fp16"] is False  # the task's copy of common.fp16, resolved when saved
    state["cfg"]["common"]["fp16"] = state["cfg"]["task"]["fp16"] = True  # as fairseq-train --fp16 saves it
    torch.save(state, tmp_path / "fp16.pt")
    out = tmp_path / "scores.json"
    done = command("fairseq-monoattn-score", "--checkpoint", tmp_path / "fp16.pt", "--data", tiny_data, "--splits",
                   "test9", "--out", out)  # fmt: skip
    assert done.returncode == 0 and out.exists(), done.stderr[-3000:]


# --- hydra --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, named",
    [
        (["model._name=gru_monoatn"], "model._name=gru_monoatn: no model or preset of that name is registered; "
                                      "close matches: gru_monoattn, gru_rmonoattn, gru_mix_monoattn"),
        (["model._name=gru_monoattn", "+model.step_temperature=inf"], "--step-temperature must be > 0 and finite"),
    ],
    ids=["misspelt-preset", "bad-value"],
)  # fmt: skip
def test_hydra_training_refuses_a_misspelt_preset_or_a_bad_value_in_one_line(tmp_path, tiny_data, overrides, named):
    """Before: a misspelt preset was KeyError "'_name'" (from fairseq's own error message), and every
    plugin error under hydra a traceback."""
    config = Path(__file__).resolve().parents[1] / "examples" / "config"
    done = command("fairseq-hydra-train", "--config-dir", config, "--config-name", "paper_recipe",
                   f"task.data={tiny_data}", f"common.user_dir={PLUGIN}", f"checkpoint.save_dir={tmp_path / 'ck'}",
                   "optimization.max_epoch=1", f"hydra.run.dir={tmp_path / 'hydra'}", *overrides)  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(("INFO", "DEBUG"))]
    assert lines[0].startswith("Error executing job with overrides:")  # hydra's own line
    assert lines[1].startswith(named) and lines[2].startswith("Set the environment variable HYDRA_FULL_ERROR"), lines
    assert not list(tmp_path.glob("ck/*.pt"))
