"""The tests' command server runs a console script as a new process would."""

import subprocess

import pytest
from forked_commands import command, new_process, server_running

pytestmark = pytest.mark.skipif(not server_running(), reason="no command server (no os.fork)")


@pytest.mark.parametrize(
    "argv",
    [
        ["fairseq-monoattn-aggregate", "tables", "--results", "nowhere"],  # the lab's one-line error, exit 2
        ["fairseq-monoattn-score", "--checkpoint", "none.pt", "--data", ".", "--splits", "t", "--out", "s.json"],
        ["fairseq-train", "data", "--arch", "no_such_arch"],  # argparse's error, exit 2
        ["fairseq-monoattn-user-dir"],  # prints the plugin's folder, exit 0
    ],
    ids=["aggregate", "score", "fairseq-train", "user-dir"],
)
def test_a_forked_command_exits_and_writes_as_the_installed_command(tmp_path, argv):
    forked = command(*argv, cwd=tmp_path)
    real = new_process(*argv, cwd=tmp_path, timeout=300)
    assert forked.returncode == real.returncode
    # the same output but for fairseq's import-time notes, which the server printed when it
    # imported fairseq, before any command
    for stream in ("stdout", "stderr"):
        ours, theirs = (getattr(done, stream).splitlines() for done in (forked, real))
        assert ours == [line for line in theirs if "tensorboardX" not in line], stream
    assert list(tmp_path.iterdir()) == []


def test_a_forked_command_runs_in_its_folder_and_is_killed_at_its_timeout(tmp_path):
    out = tmp_path / "copy"
    done = command("fairseq-monoattn-prepare", "copy", "--out", "copy", "--seed", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (out / "manifest.json").is_file()  # relative to cwd
    with pytest.raises(subprocess.TimeoutExpired):
        command("fairseq-train", "--help", timeout=0.01)
    after = command("fairseq-monoattn-aggregate", "tables", "--results", "nowhere", cwd=tmp_path)
    assert after.returncode == 2 and "--results nowhere: no such folder" in after.stderr  # still serving
