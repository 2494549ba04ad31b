"""The eight digit tasks: every rule re-checked on every written example, split sizes,
exact length ranges, distinct sources, test_iid disjoint from train, determinism."""

import hashlib
import itertools
import os
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fairseq_monoattn.data import digits

DIGIT_TASKS = [
    "copy",
    "reverse_copy",
    "recopy",
    "reverse_recopy",
    "inv_recopy",
    "inv_reverse_recopy",
    "dedupe",
    "posretrieve",
]
EXPECTED_SPLITS = {  # split: (size, min length, max length), as docs/data.md lists them
    "train": (10_000, 5, 10),
    "valid": (2_000, 10, 15),
    "test15": (2_000, 15, 15),
    "test30": (2_000, 30, 30),
    "test100": (2_000, 100, 100),
    "test_iid": (2_000, 5, 10),
    "test10": (500, 10, 10),
    "test20": (500, 20, 20),
    "test50": (500, 50, 50),
    "test200": (500, 200, 200),
}
DIGIT_TOKENS = set("0123456789")


# --- the rules, written again independently of preprocess/digits.py ---------------------


def times_written(digit: str) -> int:
    return {"0": 1, "1": 1, "2": 1, "3": 1, "4": 3, "5": 3, "6": 3, "7": 5, "8": 5, "9": 5}[digit]


def expand(tokens):
    out = []
    for tok in tokens:
        out.extend([tok] * times_written(tok))
    return out


def expected_posretrieve(src):
    out = []
    for tok in src:
        out += [tok, ":", src[int(tok)] if int(tok) < len(src) else "n/a", ";"]
    return out


def check_rule(task, src, tgt):
    if task == "copy":
        assert tgt == src
    elif task == "reverse_copy":
        assert tgt == list(reversed(src))
    elif task == "recopy":
        assert tgt == expand(src)
    elif task == "reverse_recopy":
        assert tgt == expand(list(reversed(src)))
    elif task == "inv_recopy":
        assert src == expand(tgt)
    elif task == "inv_reverse_recopy":
        assert src == expand(list(reversed(tgt)))
    elif task == "dedupe":
        assert tgt == [key for key, _ in itertools.groupby(src)]
        assert all(a != b for a, b in zip(tgt, tgt[1:]))
    elif task == "posretrieve":
        assert tgt == expected_posretrieve(src)
    else:
        raise AssertionError(task)


def original_digits(task, src, tgt):
    """The digit sequence whose length is the task's "length" (not for dedupe)."""
    return tgt if task.startswith("inv_") else src


# --- tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("task", DIGIT_TASKS)
def test_rule_holds_on_every_example_of_every_split(prepared, task):
    data = prepared(task)
    for split in EXPECTED_SPLITS:
        for src, tgt in data.pairs(split):
            assert set(src) <= DIGIT_TOKENS
            check_rule(task, src, tgt)


@pytest.mark.parametrize("task", DIGIT_TASKS)
def test_split_sizes_and_manifest_length_ranges(prepared, task):
    data = prepared(task)
    assert list(data.manifest["splits"]) == list(EXPECTED_SPLITS)
    for split, (size, low, high) in EXPECTED_SPLITS.items():
        stats = data.manifest["splits"][split]
        assert (stats["size"], stats["min_length"], stats["max_length"]) == (size, low, high)
        assert len(data.lines(split, "src")) == len(data.lines(split, "tgt")) == size


@pytest.mark.parametrize("task", [t for t in DIGIT_TASKS if t != "dedupe"])
def test_written_lengths_cover_exactly_the_range(prepared, task):
    data = prepared(task)
    for split, (_, low, high) in EXPECTED_SPLITS.items():
        lengths = {len(original_digits(task, src, tgt)) for src, tgt in data.pairs(split)}
        assert lengths == set(range(low, high + 1)), split


@pytest.mark.parametrize("task", DIGIT_TASKS)
def test_sources_distinct_and_test_iid_disjoint_from_train(prepared, task):
    data = prepared(task)
    sources = {split: data.lines(split, "src") for split in EXPECTED_SPLITS}
    for split, lines in sources.items():
        assert len(set(lines)) == len(lines), split
    assert not set(sources["test_iid"]) & set(sources["train"])


@pytest.mark.parametrize("task", ["copy", "inv_recopy"])
def test_train_lengths_and_digits_are_uniform(prepared, task):
    pairs = prepared(task).pairs("train")
    originals = [original_digits(task, src, tgt) for src, tgt in pairs]
    length_counts = Counter(len(d) for d in originals)
    assert all(1_500 < n < 1_830 for n in length_counts.values()), length_counts  # 1,667 each
    digit_counts = Counter(tok for d in originals for tok in d)
    total = sum(digit_counts.values())
    assert all(0.09 < n / total < 0.11 for n in digit_counts.values()), digit_counts


def test_dedupe_length_is_a_number_of_groups_of_1_3_or_5():
    """A run of r equal tokens is k groups of odd sizes <= 5: k = r mod 2, ceil(r/5) <= k <= r."""
    splits = digits.build_dedupe(1, None)
    for split, (_, low, high) in EXPECTED_SPLITS.items():
        for ex in splits[split]:
            runs = [len(list(group)) for _, group in itertools.groupby(ex.source.split())]
            assert low <= ex.length <= high
            assert sum(-(-r // 5) for r in runs) <= ex.length <= sum(runs)
            assert ex.length % 2 == sum(runs) % 2
    ratio = statistics.mean(len(ex.source.split()) / ex.length for ex in splits["train"])
    assert 2.9 < ratio < 3.1  # mean group size of uniform {1, 3, 5} is 3


def test_rules_reproduce_the_papers_examples():
    assert "".join(digits.recopy(list("0123456789"))) == "0123444555666777778888899999"
    assert digits.RULES["recopy"](list("4798")) == ([*"4798"], "4 4 4 7 7 7 7 7 9 9 9 9 9 8 8 8 8 8".split())
    assert digits.RULES["reverse_recopy"](list("4798"))[1] == "8 8 8 8 8 9 9 9 9 9 7 7 7 7 7 4 4 4".split()
    assert digits.RULES["inv_reverse_recopy"](list("4798")) == (
        "8 8 8 8 8 9 9 9 9 9 7 7 7 7 7 4 4 4".split(),
        [*"4798"],
    )
    assert digits.RULES["dedupe"]("4 4 4 7 7 7 7 9 9 9 9 9 8 8 8 8 8".split())[1] == [*"4798"]
    target = digits.RULES["posretrieve"]("5 4 2 7 9 6 9 5 7 3".split())[1]
    assert " ".join(target) == "5 : 6 ; 4 : 9 ; 2 : 2 ; 7 : 5 ; 9 : 3 ; 6 : 9 ; 9 : 3 ; 5 : 6 ; 7 : 5 ; 3 : 7 ;"
    assert digits.RULES["posretrieve"]("1 2".split())[1] == "1 : 2 ; 2 : n/a ;".split()


def test_manifest_hashes_match_raw_files(prepared):
    data = prepared("posretrieve")
    hashes = data.manifest["raw_sha256"]
    assert len(hashes) == 2 * len(EXPECTED_SPLITS)
    for name, digest in hashes.items():
        assert hashlib.sha256((data.out / name).read_bytes()).hexdigest() == digest
    assert data.manifest["dictionaries"]["tgt"]["not_in_train"] == []
    assert data.manifest["task"] == "posretrieve" and data.manifest["seed"] == 1


def all_files(folder: Path):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_gives_identical_bytes_and_another_seed_changes_raw(prepared, tmp_path):
    from fairseq_monoattn.data.prepare import prepare

    first = all_files(prepared("dedupe").out)
    prepare("dedupe", tmp_path / "again", seed=1)
    assert all_files(tmp_path / "again") == first
    assert {name.split("/")[0] for name in first} == {"raw", "bin", "manifest.json"}
    prepare("dedupe", tmp_path / "seed2", seed=2)
    other = all_files(tmp_path / "seed2")
    for name in first:
        if name.startswith("raw/"):
            assert other[name] != first[name], name


def test_generation_does_not_depend_on_the_interpreter_run():
    """String seeding is stable: another process with another hash seed draws the same data."""
    code = (
        "import hashlib; from fairseq_monoattn.data.digits import build_recopy; s = build_recopy(7, None); "
        "print(hashlib.sha256(repr(s).encode()).hexdigest())"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    repo_root = Path(__file__).resolve().parents[1]
    child = subprocess.run(
        [sys.executable, "-c", code], cwd=repo_root, env=env, capture_output=True, text=True, check=True
    )
    here = hashlib.sha256(repr(digits.build_recopy(7, None)).encode()).hexdigest()
    assert child.stdout.strip() == here


def test_first_training_example_is_pinned():
    """Changing the generator changes every published data set: bump DATA_FORMAT_VERSION."""
    assert digits.build_copy(1, None)["train"][0].source == "4 7 5 9 9"
