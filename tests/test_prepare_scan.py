"""SCAN length split: counts of the shipped files, the TAB split, the upstream-only split,
and the messages for malformed or missing data."""

import re
import shutil
from collections import Counter

import pytest

from fairseq_monoattn.data.common import DataError
from fairseq_monoattn.data.scan import DEFAULT_DATA_DIR, build_scan, read_tab_file, read_upstream_file

UPSTREAM_TRAIN = DEFAULT_DATA_DIR / "tasks_train_length.txt"
UPSTREAM_TEST = DEFAULT_DATA_DIR / "tasks_test_length.txt"
TAB_DIR = DEFAULT_DATA_DIR / "machine-tasks"


def pairs(examples):
    return [(ex.source, ex.target) for ex in examples]


@pytest.fixture(scope="module")
def upstream():
    return {"train": read_upstream_file(UPSTREAM_TRAIN), "test": read_upstream_file(UPSTREAM_TEST)}


@pytest.fixture
def upstream_only(tmp_path):
    """A folder with just the two upstream files."""
    for path in (UPSTREAM_TRAIN, UPSTREAM_TEST):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def test_shipped_files_and_licence_are_there():
    assert "BSD" in (DEFAULT_DATA_DIR / "LICENSE").read_text()
    assert (DEFAULT_DATA_DIR / "PROVENANCE.md").is_file()


def test_upstream_counts(upstream):
    assert (len(upstream["train"]), len(upstream["test"])) == (16_990, 3_920)
    assert upstream["train"][0].source == "walk" and upstream["train"][0].target == "I_WALK"


def test_default_is_the_authors_tab_split(upstream):
    splits = build_scan(1, None)
    assert {name: len(ex) for name, ex in splits.items()} == {"train": 13_070, "valid": 3_920, "test": 3_920}
    assert Counter(pairs(splits["train"] + splits["valid"])) == Counter(pairs(upstream["train"]))
    assert pairs(splits["test"]) == pairs(upstream["test"])  # leading spaces stripped
    assert all(ex.length == len(ex.source.split()) for split in splits.values() for ex in split)


def test_tab_folder_can_be_given_directly():
    assert pairs(build_scan(5, TAB_DIR)["valid"]) == pairs(read_tab_file(TAB_DIR / "tasks_validation_length.txt"))


def test_upstream_only_folder_gets_a_seeded_iid_valid(upstream_only, upstream):
    splits = build_scan(1, upstream_only)
    assert [len(splits[name]) for name in ("train", "valid", "test")] == [13_070, 3_920, 3_920]
    assert Counter(pairs(splits["train"] + splits["valid"])) == Counter(pairs(upstream["train"]))
    assert pairs(splits["test"]) == pairs(upstream["test"])
    valid = pairs(splits["valid"])
    assert pairs(build_scan(1, upstream_only)["valid"]) == valid
    assert pairs(build_scan(2, upstream_only)["valid"]) != valid
    positions = {pair: i for i, pair in enumerate(pairs(upstream["train"]))}
    valid_positions = [positions[pair] for pair in valid]
    assert valid_positions == sorted(valid_positions)  # kept in file order
    assert valid_positions[-1] > 16_000  # drawn from the whole file, not a prefix


def test_prepared_scan(prepared):
    data = prepared("scan")
    sizes = {name: stats["size"] for name, stats in data.manifest["splits"].items()}
    assert sizes == {"train": 13_070, "valid": 3_920, "test": 3_920}
    assert data.lines("test", "src")[0] == "run around left twice and run around right"
    assert data.manifest["splits"]["train"]["max_target_tokens"] == 22
    assert data.manifest["splits"]["test"]["max_target_tokens"] == 48


def break_line(path, number, text):
    lines = path.read_text().split("\n")
    lines[number - 1] = text
    path.write_text("\n".join(lines))


@pytest.mark.parametrize("bad_line", ["walk OUT: I_WALK", "IN: walk I_WALK", "IN: OUT: I_WALK", ""])
def test_malformed_upstream_line_names_file_and_line(upstream_only, bad_line):
    path = upstream_only / "tasks_test_length.txt"
    break_line(path, 7, bad_line)
    with pytest.raises(DataError, match=re.escape(f"{path}:7: ")):
        build_scan(1, upstream_only)


def test_malformed_tab_line_names_file_and_line(tmp_path):
    shutil.copytree(TAB_DIR, tmp_path / "machine-tasks")
    path = tmp_path / "machine-tasks" / "tasks_validation_length.txt"
    break_line(path, 12, "walk twice I_WALK I_WALK")
    with pytest.raises(DataError, match=re.escape(f"{path}:12: expected '<command> TAB <actions>'")):
        build_scan(1, tmp_path)


def test_missing_or_empty_folder_says_what_is_expected(tmp_path):
    for folder in (tmp_path / "nowhere", tmp_path):
        with pytest.raises(DataError, match="tasks_validation_length.txt.*tasks_train_length.txt"):
            build_scan(1, folder)


def test_incomplete_tab_folder_names_the_missing_file(tmp_path):
    shutil.copy(TAB_DIR / "tasks_validation_length.txt", tmp_path)
    shutil.copy(TAB_DIR / "tasks_train_length.txt", tmp_path)
    with pytest.raises(DataError, match="missing tasks_test_length.txt"):
        build_scan(1, tmp_path)


def test_empty_file_is_refused(upstream_only):
    (upstream_only / "tasks_test_length.txt").write_text("")
    with pytest.raises(DataError, match="no examples"):
        build_scan(1, upstream_only)
