"""Lookup / Reverse Lookup: the paper's splits of the shipped files, and the generator."""

import random
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_monoattn.data.common import DataError
from fairseq_monoattn.data.lookup import (
    DEFAULT_DATA_DIRS,
    GeneratorConfig,
    build_lookup,
    build_reverse_lookup,
    generate,
    parse_source,
    read_tsv,
)

REPO = Path(__file__).resolve().parents[1]
SHIPPED = dict(DEFAULT_DATA_DIRS)
BUILDERS = {"lookup": build_lookup, "reverse_lookup": build_reverse_lookup}
EXPECTED_SIZES = {"train": 9081, "valid": 975, "test_iid": 2492, "test7": 4500, "test9": 5000, "test11": 5000}
EXPECTED_LENGTHS = {"test_iid": {6}, "test7": {7}, "test9": {9}, "test11": {11}}


def test_the_shipped_files_are_the_ones_listed_in_their_checksums():
    """The package ships the paper's Lookup files (see their PROVENANCE.md), byte for byte."""
    import hashlib

    for folder in SHIPPED.values():
        sums = dict(line.split()[::-1] for line in (folder / "SHA256SUMS").read_text().splitlines())
        assert sorted(sums) == sorted(p.name for p in (folder / "data").glob("*.tsv"))
        for name, digest in sums.items():
            assert hashlib.sha256((folder / "data" / name).read_bytes()).hexdigest() == digest, name


def tables_from_single_rows(examples, reverse):
    """Each table's mapping, read off the rows that apply one table (input -> result)."""
    tables = {}
    for ex in examples:
        bits, comp = parse_source(ex.source, reverse)
        if len(comp) == 1:
            tables.setdefault(comp[0], {})[bits] = ex.target.split()[1]
    return tables


def expected_target(source, tables, reverse):
    """Independent statement of the rule: bits, then each table's result in turn."""
    tokens = source.split()[:-1]  # drop '.'
    if reverse:
        tokens = tokens[::-1]  # bits first, then tables nearest-first
    value, out = tokens[0], [tokens[0]]
    for name in tokens[1:]:
        value = tables[name][value]
        out.append(value)
    return " ".join(out)


def assert_bijections(tables, names, bits=3):
    strings = {format(i, f"0{bits}b") for i in range(2**bits)}
    assert sorted(tables) == sorted(names)
    for name, mapping in tables.items():
        assert set(mapping) == strings, name
        assert set(mapping.values()) == strings, name


# --- shipped files ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped_splits():
    return {task: BUILDERS[task](7, None) for task in SHIPPED}


@pytest.mark.parametrize("task", sorted(SHIPPED))
def test_split_sizes_and_lengths(shipped_splits, task):
    splits = shipped_splits[task]
    assert list(splits) == list(EXPECTED_SIZES)
    assert {name: len(examples) for name, examples in splits.items()} == EXPECTED_SIZES
    for name, lengths in EXPECTED_LENGTHS.items():
        assert {ex.length for ex in splits[name]} == lengths, name
    assert {ex.length for ex in splits["train"]} == {3, 4, 5, 6}
    assert all(ex.length == len(ex.source.split()) for ex in splits["valid"])


@pytest.mark.parametrize("task", sorted(SHIPPED))
def test_every_row_follows_the_composition_rule(shipped_splits, task):
    reverse = task == "reverse_lookup"
    splits = shipped_splits[task]
    tables = tables_from_single_rows(splits["train"], reverse)
    assert_bijections(tables, [f"t{i}" for i in range(1, 9)])
    checked = 0
    for name, examples in splits.items():
        for ex in examples:
            assert ex.target == expected_target(ex.source, tables, reverse), (name, ex)
            checked += 1
    assert checked == sum(EXPECTED_SIZES.values())


def test_reverse_is_forward_mirrored_with_the_same_tables(shipped_splits):
    forward, reverse = shipped_splits["lookup"], shipped_splits["reverse_lookup"]
    assert tables_from_single_rows(forward["train"], False) == tables_from_single_rows(reverse["train"], True)
    for name in ("test_iid", "test7", "test9", "test11"):
        for f, r in zip(forward[name], reverse[name]):
            bits, comp = parse_source(f.source, False)
            assert r.source == " ".join(list(reversed(comp)) + [bits, "."])
            assert r.target == f.target


def test_valid_takes_500_seeded_rows_of_longer_seen_1():
    folder = SHIPPED["lookup"] / "data"
    longer = [source for source, _ in read_tsv(folder / "longer_seen_1.tsv", False)]
    first, again, other = (build_lookup(seed, SHIPPED["lookup"]) for seed in (3, 3, 4))
    assert first == again
    moved = [ex.source for ex in first["valid"][475:]]
    assert len(moved) == 500 and all(len(s.split()) == 7 for s in moved)
    assert [ex.source for ex in first["valid"][:475]] == [s for s, _ in read_tsv(folder / "validation.tsv", False)]
    # valid part + test7 = longer_seen_1, each in file order
    test7 = [ex.source for ex in first["test7"]]
    assert sorted(moved + test7) == sorted(longer)
    assert moved == [s for s in longer if s in set(moved)]
    assert [ex.source for ex in other["valid"][475:]] != moved


def test_each_task_gets_its_own_default_folder():
    # no --data-dir: each task reads its own folder
    default = build_reverse_lookup(1, None)
    assert default["test7"][0].source.startswith("t")
    assert default == build_reverse_lookup(1, DEFAULT_DATA_DIRS["reverse_lookup"])
    # but the forward folder named explicitly is refused
    with pytest.raises(DataError, match="looks like Lookup data"):
        build_reverse_lookup(1, Path(str(DEFAULT_DATA_DIRS["lookup"])))


def test_data_dir_may_be_the_data_subfolder():
    direct = build_lookup(1, SHIPPED["lookup"] / "data")
    assert direct == build_lookup(1, SHIPPED["lookup"])


# --- bad input ------------------------------------------------------------------------------


def write_minimal_folder(folder: Path, line: str = "000 t1 .\t000 011"):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train", "validation", "heldout_inputs", "longer_seen_1", "longer_seen_3", "longer_seen_5"):
        (folder / f"{name}.tsv").write_text(line + "\r\n")


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("000 t1 .", "found 1"),
        ("000 t1 .\t000 011\t0 1 2\textra", "found 4"),
        ("000 t1 .\t  ", "empty field"),
        ("000 t1\t000 011", "must end with"),
        ("000 t1 t2 .\t000 011", "should have 3 tokens"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    write_minimal_folder(tmp_path)
    path = tmp_path / "train.tsv"
    path.write_text("000 t1 .\t000 011\r\n" + bad_line + "\r\n")
    with pytest.raises(DataError, match=message) as error:
        read_tsv(path, reverse=False)
    assert error.value.line == 2
    assert str(error.value).startswith(f"{path}:2: ")


def test_forward_data_given_to_reverse_lookup_is_refused(tmp_path):
    write_minimal_folder(tmp_path)
    with pytest.raises(DataError, match="looks like Lookup data") as error:
        build_reverse_lookup(1, tmp_path)
    assert error.value.line == 1


def test_missing_files_are_listed(tmp_path):
    (tmp_path / "train.tsv").write_text("000 t1 .\t000 011\n")
    with pytest.raises(DataError, match="longer_seen_5.tsv") as error:
        build_lookup(1, tmp_path)
    assert "validation.tsv" in str(error.value) and "data/ subfolder" in str(error.value)


def test_too_few_longer_rows_is_an_error(tmp_path):
    write_minimal_folder(tmp_path / "data")
    with pytest.raises(DataError, match="more than 500"):
        build_lookup(1, tmp_path)


# --- generator ------------------------------------------------------------------------------


def tree_bytes(folder: Path):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("generated")
    made = {}
    for name, config in {
        "a": GeneratorConfig(seed=5),
        "b": GeneratorConfig(seed=5),
        "other": GeneratorConfig(seed=6),
        "reverse": GeneratorConfig(seed=5, reverse=True),
    }.items():
        made[name] = (root / name, generate(root / name, config))
    return made


def test_generated_tables_are_bijections(generated):
    _, tables = generated["a"]
    assert_bijections(tables, [f"t{i}" for i in range(1, 9)])
    assert len({tuple(m.items()) for m in tables.values()}) == 8


@pytest.mark.parametrize("variant", ["a", "reverse"])
def test_generated_rows_follow_the_rule(generated, variant):
    folder, tables = generated[variant]
    reverse = variant == "reverse"
    rows = {p.stem: read_tsv(p, reverse) for p in (folder / "data").glob("*.tsv")}
    assert len(rows) == 22
    derived = tables_from_single_rows([type("Row", (), {"source": s, "target": t}) for s, t in rows["train"]], reverse)
    assert derived == tables
    for stem, file_rows in rows.items():
        assert len(set(file_rows)) == len(file_rows), stem
        for source, target in file_rows:
            assert target == expected_target(source, tables, reverse), (stem, source)


def test_generated_structure(generated):
    folder, _ = generated["a"]
    rows = {p.stem: read_tsv(p, False) for p in (folder / "data").glob("*.tsv")}
    counts = {stem: len(r) for stem, r in rows.items()}
    assert counts["heldout_compositions"] == 50 * 8
    assert counts["heldout_inputs"] == (6**4 - 50) * 2
    assert counts["new_compositions"] == 2**4 * 8
    assert counts["longer_new_1"] == 2**5 * 8
    assert counts["train"] + counts["validation"] == (6 + 36 + 216 + 6**4 - 50) * 8 - counts["heldout_inputs"] + 2 * 8
    for k in range(1, 6):
        assert counts[f"longer_seen_{k}"] == 5000
        tables_used = {t for s, _ in rows[f"longer_seen_{k}"] for t in parse_source(s, False)[1]}
        assert tables_used == {f"t{i}" for i in range(1, 7)}
        assert {len(s.split()) for s, _ in rows[f"longer_seen_{k}"]} == {4 + k + 2}
    train_sources = {s for s, _ in rows["train"]}
    for stem in ("validation", "heldout_inputs", "heldout_compositions", "heldout_tables"):
        assert not train_sources & {s for s, _ in rows[stem]}, stem
    new_in_train = {parse_source(s, False)[1] for s, _ in rows["train"]} & {("t7",), ("t8",)}
    assert new_in_train == {("t7",), ("t8",)}


def test_generator_is_deterministic(generated):
    same_a, same_b = tree_bytes(generated["a"][0]), tree_bytes(generated["b"][0])
    assert same_a == same_b
    other = tree_bytes(generated["other"][0])
    assert other["data/train.tsv"] != same_a["data/train.tsv"]
    assert other["tables.txt"] != same_a["tables.txt"]


def test_generated_reverse_mirrors_forward(generated):
    forward = read_tsv(generated["a"][0] / "data" / "longer_seen_2.tsv", False)
    reverse = read_tsv(generated["reverse"][0] / "data" / "longer_seen_2.tsv", True)
    assert [t for _, t in forward] == [t for _, t in reverse]
    assert [parse_source(s, False) for s, _ in forward] == [parse_source(s, True) for s, _ in reverse]


def test_generated_folder_is_a_data_dir(generated):
    splits = build_lookup(1, generated["a"][0])
    assert len(splits["valid"]) == 474 + 500 and len(splits["test7"]) == 4500
    reverse = build_reverse_lookup(1, generated["reverse"][0])
    assert [ex.target for ex in reverse["test11"]] == [ex.target for ex in splits["test11"]]


def test_generator_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    small = GeneratorConfig(longer=1, bound=600)
    with pytest.raises(DataError, match="--force"):
        generate(tmp_path, small)
    generate(tmp_path, small, force=True)
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert (tmp_path / "data" / "longer_seen_1.tsv").is_file()


def test_generator_command_line(tmp_path):
    out = tmp_path / "llt"
    command = [
        str(Path(sys.executable).parent / "fairseq-monoattn-lookup-tables"),
        "generate",
        "--out",
        str(out),
        "--seed",
        "9",
        "--reverse",
        "--bound",
        "800",
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(build_reverse_lookup(0, out)["test9"]) == 800
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 2 and "--force" in again.stderr


def test_random_sample_is_stable():
    # the valid rows depend on random.Random(seed).sample; guard against a silent change
    assert random.Random(1).sample(range(5000), 3) == [1100, 4662, 516]


def test_missing_default_folder_says_to_pass_data_dir(tmp_path, monkeypatch):
    monkeypatch.setitem(DEFAULT_DATA_DIRS, "lookup", tmp_path / "absent")
    with pytest.raises(DataError, match="pass --data-dir"):
        build_lookup(1, None)
