"""Every architecture trains and decodes through fairseq's command line."""

import pytest
import torch
from fairseq_cli_helpers import USER_DIR, generate, hypotheses, run_command, train, write_copy_dataset
from model_helpers import ALL_ARCHS


@pytest.fixture(scope="module")
def tiny_copy(tmp_path_factory):
    sizes = {"train": (64, 3, 6), "valid": (11, 6, 8), "test": (13, 9, 12)}
    return write_copy_dataset(tmp_path_factory.mktemp("tiny") / "copy", sizes)


COMMON = [
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--clip-norm",
    "5",
    "--batch-size",
    "16",
    "--no-progress-bar",
    "--log-interval",
    "1",
    "--seed",
    "1",
    "--num-workers",
    "0",
]


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_every_arch_trains_and_decodes(arch, tiny_copy, tmp_path):
    save = tmp_path / "checkpoints"
    train(
        [
            str(tiny_copy / "bin"),
            "--arch",
            arch,
            *COMMON,
            "--max-update",
            "3",
            "--save-dir",
            str(save),
            "--no-epoch-checkpoints",
        ]
    )
    assert (save / "checkpoint_last.pt").is_file()
    lines = generate(
        [
            str(tiny_copy / "bin"),
            "--path",
            str(save / "checkpoint_last.pt"),
            # the plugin's task keeps the last 5 of the 13 (fairseq's translation task drops them)
            # and reads the Transformer presets' checkpoints (docs/fairseq.md)
            "--task",
            "length_generalization",
            "--beam",
            "2",
            "--batch-size",
            "8",
            "--max-len-b",
            "30",
            "--print-alignment",
            "--num-workers",
            "0",
        ],
        tmp_path,
        "test",
    )
    assert sorted(hypotheses(lines)) == list(range(13))  # every example decoded, none dropped
    assert sum(line.startswith("A-") for line in lines) == 13


@pytest.mark.long(16)
def test_real_commands_resume_and_generate_with_safe_checkpoint_loading(tiny_copy, tmp_path):
    """The console scripts, torch's weights_only loading (no environment variable), resuming."""
    data, save = str(tiny_copy / "bin"), str(tmp_path / "ck")
    common = [data, "--user-dir", USER_DIR, "--arch", "gru_monoattn", *COMMON, "--save-dir", save]
    log = run_command("fairseq-train", *common, "--max-epoch", "1")
    assert "end of epoch 1" in log and "end of epoch 2" not in log
    state = torch.load(tmp_path / "ck" / "checkpoint_last.pt", weights_only=True)  # no unsafe globals
    assert state["args"] is None and state["cfg"]["model"]["_name"] == "gru_monoattn"
    log = run_command("fairseq-train", *common, "--max-epoch", "2")
    assert "Loaded checkpoint" in log and "epoch 2 @" in log
    out = run_command(
        "fairseq-generate",
        data,
        "--user-dir",
        USER_DIR,
        "--path",
        f"{save}/checkpoint_last.pt",
        "--task",
        "length_generalization",  # every example, the last batch too
        "--gen-subset",
        "test",
        "--beam",
        "1",
        "--batch-size",
        "8",
    )
    assert sorted(hypotheses(out.splitlines())) == list(range(13))
