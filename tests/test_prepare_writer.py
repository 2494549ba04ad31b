"""The shared writer on small hand-made splits: dictionaries, tokens only seen outside train,
normalisation, and the safety rules for the output folder."""

import json

import pytest

from fairseq_monoattn.data import writer
from fairseq_monoattn.data.common import DataError, Example
from fairseq_monoattn.data.writer import write_dataset


def tiny_splits():
    return {
        "train": [Example("b a", "X Y", 2), Example("a  c", "Y", 2), Example("a", "Y Y", 1)],
        "test": [Example("d a e", "Z X", 3), Example("e", "W", 1)],
    }


def folder_snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def leftovers(parent, out):
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_dictionaries_train_first_then_other_tokens(tmp_path):
    manifest = write_dataset(tiny_splits(), tmp_path / "out", "toy", 3)
    bin_dir = tmp_path / "out" / "bin"
    # train source counts: a 3, b 1, c 1; then d, e from test (e twice)
    assert (bin_dir / "dict.src.txt").read_text() == "a 3\nb 1\nc 1\ne 2\nd 1\n"
    assert (bin_dir / "dict.tgt.txt").read_text() == "Y 4\nX 1\nW 1\nZ 1\n"
    assert manifest["dictionaries"]["src"] == {"size": 4 + 5, "not_in_train": ["e", "d"]}
    assert manifest["dictionaries"]["tgt"]["not_in_train"] == ["W", "Z"]
    assert manifest["splits"]["test"] == {
        "size": 2,
        "min_length": 1,
        "max_length": 3,
        "max_source_tokens": 3,
        "max_target_tokens": 2,
    }
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest


def test_raw_lines_are_single_spaced_with_lf(tmp_path):
    write_dataset(tiny_splits(), tmp_path / "out", "toy", 3)
    assert (tmp_path / "out" / "raw" / "train.src").read_bytes() == b"b a\na c\na\n"


def test_empty_target_is_refused_and_nothing_is_left(tmp_path):
    splits = tiny_splits()
    splits["test"].append(Example("a", "  ", 1))
    with pytest.raises(DataError, match="'test', example 3: empty target"):
        write_dataset(splits, tmp_path / "out", "toy", 3)
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_keeps_the_old_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_dataset(tiny_splits(), out, "toy", 3)
    before = folder_snapshot(out)

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(writer, "binarize", broken)
    with pytest.raises(
        DataError, match=f"^{out}/bin/train.src-tgt.src.bin: cannot write it: disk full; --out was left"
    ):
        write_dataset(tiny_splits(), out, "toy", 4, force=True)
    assert folder_snapshot(out) == before
    assert leftovers(tmp_path, out) == []


def test_existing_folder_refused_without_force_and_replaced_with_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(DataError, match="--force"):
        write_dataset(tiny_splits(), out, "toy", 3)
    assert folder_snapshot(out) == {"keep.txt": b"mine"}
    write_dataset(tiny_splits(), out, "toy", 3, force=True)
    assert not (out / "keep.txt").exists()
    assert json.loads((out / "manifest.json").read_text())["seed"] == 3
    assert leftovers(tmp_path, out) == []


def test_empty_existing_folder_is_used_and_a_file_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    write_dataset(tiny_splits(), tmp_path / "empty", "toy", 3)
    assert (tmp_path / "empty" / "manifest.json").is_file()
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="not a folder"):
        write_dataset(tiny_splits(), tmp_path / "file", "toy", 3, force=True)


def test_train_split_is_required(tmp_path):
    with pytest.raises(DataError, match="train"):
        write_dataset({"test": tiny_splits()["test"]}, tmp_path / "out", "toy", 3)


def test_binary_splits_hold_what_fairseqs_encode_line_gives(tmp_path):
    """The writer looks the ids up itself (fairseq's Dictionary.encode_line is slow); the .bin/.idx
    it writes must hold exactly encode_line's ids, EOS appended, in fairseq's smallest dtype."""
    from fairseq.data import data_utils

    lines = ["b a", "a c  b", "ä a", "c", "b b b b b b b b b b b b b"]
    dictionary = writer.make_dictionary([("a", 5), ("b", 4), ("c", 2), ("ä", 1)])
    writer.binarize(lines, dictionary, tmp_path / "split")
    dataset = data_utils.load_indexed_dataset(str(tmp_path / "split"), dictionary, "mmap")
    assert len(dataset) == len(lines)
    for i, line in enumerate(lines):
        expected = dictionary.encode_line(line, add_if_not_exist=False, append_eos=True).long()
        assert dataset[i].tolist() == expected.tolist() and expected[-1] == dictionary.eos()
    with pytest.raises(AssertionError, match="unknown token"):
        writer.binarize(["a z"], dictionary, tmp_path / "unknown")
