"""examples/gpu_check.sh: on a machine without a GPU it says so and runs nothing; its training
figures (examples/gpu_check.py) are made from fairseq-train's logged words/s, a preset's against
fairseq's model of its size, checked here on the CPU with few updates."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHON=sys.executable, PYTHONWARNINGS="ignore")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would run")
def test_without_a_gpu_the_script_says_so_and_runs_nothing(tmp_path):
    out = tmp_path / "figures"
    done = subprocess.run(["bash", str(REPO / "examples" / "gpu_check.sh"), str(out)], capture_output=True,
                          text=True, env=ENV)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        "gpu_check: skipped: torch sees no CUDA device on this machine (torch.cuda.is_available() is False); "
        "nothing was run"
    ]
    assert not out.exists()


def gpu_check(*argv, cwd):
    return subprocess.run([sys.executable, str(REPO / "examples" / "gpu_check.py"), *argv], capture_output=True,
                          text=True, env=ENV, cwd=cwd)  # fmt: skip


@pytest.mark.long(40)
def test_the_device_tests_then_the_training_figures_a_preset_against_its_reference(tmp_path):
    """The device tests run first (here one CPU test of them, picked by --select; on a GPU the
    cuda ones), their summary in --tests; then the figures."""
    out, tests = tmp_path / "training.tsv", tmp_path / "tests.txt"
    done = gpu_check("--cpu", "--presets", "gru_onestep", "--updates", "6", "--interval", "2", "--out", str(out),
                     "--work", str(tmp_path / "work"), "--tests", str(tests), "--select", "the_check_can_fail",
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    verdict, summary = tests.read_text().splitlines()
    assert verdict == "device tests (the_check_can_fail): 1 passed, 0 failed"
    assert re.fullmatch(r"1 passed, \d+ deselected in [\d.]+s( \(.*\))?", summary), summary
    header, row = out.read_text().splitlines()
    assert header == "preset\twps\treference\treference wps\tratio"
    preset, wps, reference, reference_wps, ratio = row.split("\t")
    assert (preset, reference) == ("gru_onestep", "lstm")
    assert float(wps) > 0 and float(reference_wps) > 0
    assert float(ratio) == pytest.approx(float(wps) / float(reference_wps), abs=0.01 + 0.01 * float(ratio))


def test_no_device_test_selected_stops_before_training(tmp_path):
    tests = tmp_path / "tests.txt"
    done = gpu_check("--cpu", "--updates", "4", "--interval", "2", "--out", str(tmp_path / "x.tsv"), "--work",
                     str(tmp_path / "work"), "--tests", str(tests), "--select", "no_such_test",
                     cwd=tmp_path)  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("gpu_check: no device test ran for -k no_such_test (pytest exit 5")
    assert tests.read_text().splitlines()[0] == "device tests (no_such_test): 0 passed, 0 failed"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tests.txt"]  # no data, no figures


def test_bad_options_are_one_line_before_any_work(tmp_path):
    done = gpu_check("--cpu", "--updates", "3", "--interval", "2", "--out", str(tmp_path / "x.tsv"), cwd=tmp_path)
    assert done.returncode == 2 and "--updates 3: at least twice --interval (2)" in done.stderr
    done = gpu_check("--cpu", "--select", "cuda", "--out", str(tmp_path / "x.tsv"), cwd=tmp_path)
    assert done.returncode == 2 and "--select chooses among the device tests: it needs --tests" in done.stderr
    if not torch.cuda.is_available():
        done = gpu_check("--out", str(tmp_path / "x.tsv"), cwd=tmp_path)
        assert done.returncode == 2 and "torch sees no CUDA device here; pass --cpu" in done.stderr
    assert not list(tmp_path.iterdir())
