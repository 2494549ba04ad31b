"""CFQ: conversion of the official 10-example sample, release layouts, streaming reader."""

import io
import json
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from fairseq_monoattn.data.cfq import build_cfq, iter_json_array, preprocess_question, preprocess_sparql, read_pairs
from fairseq_monoattn.data.common import DataError

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "cfq"  # the official 10-example sample

# Written out by hand from the rules (punctuation split off in questions; in SPARQL
# count ( * ), leading ns: dropped, leading m. -> m_, one line).
RECORD_0 = (
    "Did M1 ' s female actor edit and produce M0",
    "SELECT count ( * ) WHERE { "
    "?x0 film.actor.film/ns:film.performance.character M1 . "
    "?x0 film.editor.film M0 . "
    "?x0 film.producer.film|ns:film.production_company.films M0 . "
    "?x0 people.person.gender m_02zsn }",
)
RECORD_5 = (
    "Did M1 ' s Spanish executive producer edit M0",
    "SELECT count ( * ) WHERE { ?x0 film.editor.film M0 . "
    "?x0 film.producer.films_executive_produced M1 . "
    "?x0 people.person.nationality m_06mkj }",
)
RECORD_8_SOURCE = "Did M3 ' s cinematographer and star edit , direct , and write M0 , M1 , and M2"


def test_question_and_sparql_rules():
    assert preprocess_question("What  is M0's\tname,  (really)?") == "What is M0 ' s name , ( really ) ?"
    assert (
        preprocess_sparql("SELECT DISTINCT ?x0 WHERE {\n?x0 a ns:m.0jsg2m .\nM1 ns:film.film.edited_by ?x0\n}")
        == "SELECT DISTINCT ?x0 WHERE { ?x0 a m_0jsg2m . M1 film.film.edited_by ?x0 }"
    )
    assert (
        preprocess_sparql("SELECT count(*) WHERE {\n?x0 ns:a.b/ns:c.d M0\n}")
        == "SELECT count ( * ) WHERE { ?x0 a.b/ns:c.d M0 }"
    )


def test_sample_conversion_and_split_sizes():
    splits = build_cfq(0, SAMPLE)
    assert list(splits) == ["train", "valid", "test"]
    assert [len(splits[name]) for name in splits] == [6, 2, 2]
    # split.json: train 1..6, dev 7 8, test 9 0 (in that order)
    test_last = splits["test"][1]
    assert (test_last.source, test_last.target) == RECORD_0
    assert test_last.length == 10
    train_5 = splits["train"][4]
    assert (train_5.source, train_5.target) == RECORD_5
    assert splits["valid"][1].source == RECORD_8_SOURCE
    for examples in splits.values():
        for ex in examples:
            assert ex.length == len(ex.source.split())
            assert "\n" not in ex.target and "  " not in ex.target
            assert " ns:" not in ex.target and "count(*)" not in ex.target
            assert ex.target.startswith("SELECT")


# --- release layouts ------------------------------------------------------------------------

QUERY_COMPLEXITY = {"trainIdxs": [4, 0, 9, 2, 7], "devIdxs": [1, 8], "testIdxs": [6, 3, 5]}


def add_member(tar, name, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def fake_release(path: Path, split_first: bool) -> Path:
    """A cfq1.1.tar.gz with the real layout, from the sample and a made-up split."""
    members = [
        ("cfq/splits/query_complexity_split.json", json.dumps(QUERY_COMPLEXITY).encode()),
        ("cfq/splits/random_split.json", json.dumps({"trainIdxs": [0]}).encode()),
        ("cfq/dataset.json", (SAMPLE / "dataset.json").read_bytes()),
    ]
    if not split_first:
        members.reverse()
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            add_member(tar, name, data)
    return path


@pytest.mark.parametrize("split_first", [True, False])
def test_tar_and_unpacked_folder_give_identical_splits(tmp_path, split_first):
    archive = fake_release(tmp_path / "cfq1.1.tar.gz", split_first)
    from_tar = build_cfq(0, archive)
    assert build_cfq(0, tmp_path) == from_tar  # a folder holding cfq1.1.tar.gz
    unpacked = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            (unpacked / member.name).parent.mkdir(parents=True, exist_ok=True)
            (unpacked / member.name).write_bytes(tar.extractfile(member).read())
    assert build_cfq(0, unpacked) == from_tar
    assert build_cfq(0, unpacked / "cfq") == from_tar  # dataset.json + splits/ directly
    assert [len(from_tar[name]) for name in from_tar] == [5, 2, 3]
    assert (from_tar["train"][1].source, from_tar["train"][1].target) == RECORD_0
    assert (from_tar["test"][2].source, from_tar["test"][2].target) == RECORD_5


def test_missing_data_dir_says_what_and_where(tmp_path):
    with pytest.raises(DataError) as error:
        build_cfq(0, None)
    message = str(error.value)
    assert "cfq1.1.tar.gz" in message and "google-research" in message
    assert "cfq/splits/query_complexity_split.json" in message
    with pytest.raises(DataError, match="dataset.json"):
        build_cfq(0, tmp_path)


def test_archive_without_the_split_is_refused(tmp_path):
    archive = tmp_path / "cfq1.1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        add_member(tar, "cfq/dataset.json", b"[]")
    with pytest.raises(DataError, match="query_complexity_split"):
        build_cfq(0, archive)


# --- errors ---------------------------------------------------------------------------------


def record(question="Did M0 edit M1", query="SELECT count(*) WHERE {\n?x0 ns:a M1\n}"):
    return {"questionPatternModEntities": question, "sparqlPatternModEntities": query}


def write_folder(folder: Path, dataset_text: str, split: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset.json").write_text(dataset_text)
    (folder / "split.json").write_text(json.dumps(split))
    return folder


SMALL_SPLIT = {"trainIdxs": [0], "devIdxs": [1], "testIdxs": [2]}


def test_index_out_of_range(tmp_path):
    folder = write_folder(tmp_path, json.dumps([record()] * 3), {"trainIdxs": [0], "devIdxs": [1], "testIdxs": [3]})
    with pytest.raises(DataError, match=r"testIdxs has index 3.*has 3 records") as error:
        build_cfq(0, folder)
    assert str(error.value).startswith(str(folder / "split.json"))


def test_missing_field(tmp_path):
    records = [record(), {"questionPatternModEntities": "Did M0 win"}, record()]
    folder = write_folder(tmp_path, json.dumps(records), SMALL_SPLIT)
    with pytest.raises(DataError, match="record 1 lacks the field sparqlPatternModEntities"):
        build_cfq(0, folder)


def test_duplicate_field(tmp_path):
    text = (
        '[{"questionPatternModEntities": "a", "sparqlPatternModEntities": "b"},\n'
        ' {"questionPatternModEntities": "a", "questionPatternModEntities": "c",'
        ' "sparqlPatternModEntities": "b"}]'
    )
    folder = write_folder(tmp_path, text, SMALL_SPLIT)
    with pytest.raises(DataError, match="record 1 has the field questionPatternModEntities more than once") as error:
        build_cfq(0, folder)
    assert str(error.value).startswith(str(folder / "dataset.json"))


@pytest.mark.parametrize(
    "text, where",
    [
        ('[{"questionPatternModEntities": "a", "sparqlPatternModEntities": "b"}, {"ques', "record 1"),
        ('[{"questionPatternModEntities": "a" "sparqlPatternModEntities": "b"}]', "record 0"),
        ('[{"questionPatternModEntities": "a", "sparqlPatternModEntities": "b"} {}]', "record 1"),
        ('{"questionPatternModEntities": "a"}', "record 0"),
    ],
)
def test_malformed_json_names_file_record_and_offset(tmp_path, text, where):
    folder = write_folder(tmp_path, text, SMALL_SPLIT)
    with pytest.raises(DataError, match=f"malformed JSON at {where}, character offset") as error:
        build_cfq(0, folder)
    assert str(error.value).startswith(str(folder / "dataset.json"))


def test_malformed_split_file(tmp_path):
    folder = write_folder(tmp_path, "[]", {"trainIdxs": [0], "devIdxs": ["x"], "testIdxs": []})
    with pytest.raises(DataError, match="devIdxs must be a list"):
        build_cfq(0, folder)


# --- streaming ------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 64, 100_000])
def test_records_split_across_chunks(chunk_size):
    data = (SAMPLE / "dataset.json").read_bytes()
    streamed = [obj for _, obj in iter_json_array(io.BytesIO(data), "x", chunk_size)]
    assert streamed == json.loads(data)


def test_multibyte_characters_split_across_chunks():
    records = [record(question="Did M0 visit Zürich – or 東京 ?"), record()] * 3
    data = json.dumps(records, ensure_ascii=False, indent=1).encode("utf-8")
    for chunk_size in (1, 2, 5):
        pairs, count = read_pairs(io.BytesIO(data), "x", chunk_size=chunk_size)
        assert count == 6
        assert pairs[0][0] == "Did M0 visit Zürich – or 東京 ?"
        assert pairs[5][1] == "SELECT count ( * ) WHERE { ?x0 a M1 }"


def synthetic_dataset(records: int) -> bytes:
    """A dataset.json shaped like the release: needed fields among bulky unused ones."""
    padding = {
        "complexityMeasures": {"parseTreeLeafCount": 7},
        "question": "q " * 400,
        "sparql": "SELECT ?x0 WHERE { ?x0 ns:a M0 } " * 40,
    }
    parts = [json.dumps({**padding, **record(question=f"Did M{i} edit M0")}, indent=2) for i in range(records)]
    return ("[\n" + ",\n".join(parts) + "\n]\n").encode()


def test_streaming_memory_is_bounded(tmp_path):
    data = synthetic_dataset(3000)
    assert len(data) > 6_000_000
    wanted = {0, 1234, 2999}
    tracemalloc.start()
    try:
        pairs, count = read_pairs(io.BytesIO(data), "synthetic", wanted.__contains__, chunk_size=1 << 16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 3000 and sorted(pairs) == sorted(wanted)
    assert pairs[1234][0] == "Did M1234 edit M0"
    assert peak < len(data) / 10, (peak, len(data))


def test_build_from_a_large_folder_keeps_only_the_splits(tmp_path, monkeypatch):
    data = synthetic_dataset(3000)
    (tmp_path / "dataset.json").write_bytes(data)
    (tmp_path / "split.json").write_text(json.dumps({"trainIdxs": [5, 3], "devIdxs": [2999], "testIdxs": [0]}))
    monkeypatch.setattr("fairseq_monoattn.data.cfq.CHUNK_SIZE", 1 << 16)
    tracemalloc.start()
    try:
        splits = build_cfq(0, tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [ex.source for ex in splits["train"]] == ["Did M5 edit M0", "Did M3 edit M0"]
    assert peak < len(data) / 10, (peak, len(data))
