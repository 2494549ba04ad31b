"""fairseq-hydra-train with the shipped config (examples/config/paper_recipe.yaml), then
fairseq-generate on its checkpoint; and the config equals the command-line recipe."""

from pathlib import Path

import pytest
import torch
from fairseq_cli_helpers import USER_DIR, hypotheses, rebinarized, run_command, swapped, write_copy_dataset
from forked_commands import command
from omegaconf import OmegaConf

from fairseq_monoattn.recipes import PAPER_RECIPE, PAPER_RECIPE_CFQ

CONFIG_DIR = Path(__file__).resolve().parents[1] / "examples" / "config"


@pytest.mark.long(9)
def test_hydra_train_then_generate_a_preset(tmp_path):
    data = write_copy_dataset(tmp_path / "data", {"train": (64, 2, 4), "valid": (9, 3, 5), "test": (11, 3, 5)})
    save = tmp_path / "ck"
    run_command(
        "fairseq-hydra-train",
        "--config-dir",
        str(CONFIG_DIR),
        "--config-name",
        "paper_recipe",
        f"task.data={data / 'bin'}",
        f"common.user_dir={USER_DIR}",
        f"checkpoint.save_dir={save}",
        "optimization.max_epoch=2",
        "model._name=gru_monoattn",
        "+model.step_activation=relu",
        "common.log_format=json",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    )
    checkpoint = torch.load(save / "checkpoint_best.pt", weights_only=True)
    model = checkpoint["cfg"]["model"]
    # the preset (location attention, direction gate, no content scores), the user's change on top,
    # and the defaults of GRUSeq2SeqConfig for everything else
    assert (model["_name"], model["location_attention"], model["direction_gate"]) == ("gru_monoattn", True, True)
    assert (model["attention_scoring"], model["step_activation"], model["sigma_min"]) == ("none", "relu", 0.27)
    last = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert last["optimizer_history"][-1]["num_updates"] == 2 * 2  # 2 epochs of 64 examples in batches of 32
    output = run_command(
        "fairseq-generate",
        str(data / "bin"),
        "--path",
        str(save / "checkpoint_best.pt"),
        "--user-dir",
        USER_DIR,
        "--task",
        "length_generalization",
        "--gen-subset",
        "test",
        "--beam",
        "1",
        "--batch-size",
        "4",
    )
    assert sorted(hypotheses(output.splitlines())) == list(range(11))  # every example, none dropped
    # the checkpoint keeps its dictionaries: the test split binarized with two target symbols swapped is refused
    other = rebinarized(data, tmp_path / "re", swapped, split="test", sides=("tgt",))
    refused = command("fairseq-generate", other, "--path", save / "checkpoint_best.pt", "--user-dir", USER_DIR,
                      "--task", "length_generalization", "--gen-subset", "test", "--beam", "1")  # fmt: skip
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert line.startswith(f"error: {save / 'checkpoint_best.pt'} was trained with another target dictionary than "
                           f"{other / 'dict.tgt.txt'}: symbol 4 is")  # fmt: skip


@pytest.mark.parametrize(
    "config_name, recipe_options", [("paper_recipe", PAPER_RECIPE), ("paper_recipe_cfq", PAPER_RECIPE_CFQ)]
)
def test_the_hydra_config_is_the_command_line_recipe(tmp_path, config_name, recipe_options):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    data = write_copy_dataset(tmp_path / "data", {"train": (8, 2, 3), "valid": (3, 2, 3)})
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [str(data / "bin"), "--arch", "gru_onestep", *recipe_options, "--user-dir", USER_DIR],
    )
    recipe = convert_namespace_to_omegaconf(args)
    config = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{config_name}.yaml"))  # "???" stays text
    for section, values in config.items():
        for key, value in values.items():
            if (
                value == "???"
                or key == "_name"
                and section == "model"
                or (section, key)
                in {("common", "log_format"), ("common", "log_interval"), ("checkpoint", "no_epoch_checkpoints")}
            ):
                continue
            assert recipe[section][key] == value, (section, key)
    # and the other way round: every option of the recipe is set in the file (a section's own
    # option, --task or --optimizer, is its _name)
    named = {key for values in config.values() for key in values} | {s for s, v in config.items() if "_name" in v}
    for option in (o for o in recipe_options if o.startswith("--")):
        assert option[2:].replace("-", "_") in named, option
