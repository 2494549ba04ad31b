"""The command line: runs as a script from any folder and as the installed
`fairseq-monoattn-prepare`, exit code 2 with a one-line message (no traceback) for bad input,
--out protected unless --force."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_monoattn.catalog import TASKS
from fairseq_monoattn.data.common import DataError
from fairseq_monoattn.data.prepare import prepare
from fairseq_monoattn.data.scan import DEFAULT_DATA_DIR as SCAN_FILES

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "preprocess" / "prepare.py"
ALL_TASKS = [
    "copy",
    "reverse_copy",
    "lookup",
    "reverse_lookup",
    "recopy",
    "reverse_recopy",
    "inv_recopy",
    "inv_reverse_recopy",
    "dedupe",
    "posretrieve",
    "scan",
    "cfq",
    "reverse_string",
    "stack_manipulation",
    "duplicate_string",
    "odds_first",
    "bucket_sort",
    "binary_addition",
    *(f"scan_cutoff{cutoff}" for cutoff in (22, 24, 25, 26, 27, 28, 30, 32, 33, 36, 40)),
]


INSTALLED = Path(sys.executable).parent / "fairseq-monoattn-prepare"


def run(args, cwd, program=(sys.executable,)):
    return subprocess.run([*map(str, program), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_registry_names_every_task():
    assert list(TASKS) == ALL_TASKS
    assert all(task.description for task in TASKS.values())


def test_script_from_another_folder_replaces_out_with_force(tmp_path):
    (tmp_path / "scan-data").mkdir()
    (tmp_path / "scan-data" / "old.txt").write_text("old")
    result = run([SCRIPT, "scan", "--out", "scan-data", "--seed", "4", "--force"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "train" in result.stdout and "13070" in result.stdout and "3920" in result.stdout
    assert sorted(p.name for p in (tmp_path / "scan-data").iterdir()) == ["bin", "manifest.json", "raw"]
    manifest = json.loads((tmp_path / "scan-data" / "manifest.json").read_text())
    assert manifest["task"] == "scan" and manifest["seed"] == 4


def test_unknown_task_lists_the_valid_ones(tmp_path):
    result = run([SCRIPT, "copyy", "--out", tmp_path / "out"], cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "unknown task 'copyy'" in result.stderr
    assert all(name in result.stderr for name in ALL_TASKS)
    assert not (tmp_path / "out").exists()


def test_installed_command_refuses_existing_out_and_leaves_it(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("precious")
    result = run(["copy", "--out", tmp_path / "out"], cwd=tmp_path, program=[INSTALLED])
    assert result.returncode == 2
    assert "--force" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]
    assert (tmp_path / "out" / "notes.txt").read_text() == "precious"


def test_malformed_scan_line_reported_with_file_and_line(tmp_path):
    data_dir = tmp_path / "scan"
    shutil.copytree(SCAN_FILES / "machine-tasks", data_dir)
    bad_file = data_dir / "tasks_train_length.txt"
    lines = bad_file.read_text().split("\n")
    lines[99] = "jump twice"
    bad_file.write_text("\n".join(lines))
    result = run([SCRIPT, "scan", "--out", tmp_path / "out", "--data-dir", data_dir], cwd=tmp_path)
    assert result.returncode == 2
    assert f"{bad_file}:100:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_generated_task_rejects_a_data_dir(tmp_path):
    with pytest.raises(DataError, match="reads no files"):
        prepare("copy", tmp_path / "out", data_dir=tmp_path)
    assert not (tmp_path / "out").exists()
