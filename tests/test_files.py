"""Files written whole or not at all."""

import json
import os

import pytest

from fairseq_monoattn.files import atomic_output, write_json_atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "scores.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as temporary:
            temporary.write_text("half of the new")
            assert temporary.parent == tmp_path and str(os.getpid()) in temporary.name
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["scores.json"]


def test_a_finished_write_replaces_the_file_and_creates_its_folder(tmp_path):
    target = tmp_path / "new" / "folder" / "plot.png"
    with atomic_output(target, suffix=".png") as temporary:
        assert temporary.name.endswith(".png") and not target.exists()
        temporary.write_bytes(b"\x89PNG")
    assert target.read_bytes() == b"\x89PNG" and os.listdir(target.parent) == ["plot.png"]
    write_json_atomic(tmp_path / "record.json", {"accuracy": 0.5, "splits": [1, 2]})
    assert json.loads((tmp_path / "record.json").read_text()) == {"accuracy": 0.5, "splits": [1, 2]}
    assert (tmp_path / "record.json").read_text().endswith("\n")
