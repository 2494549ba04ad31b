"""SCAN length cutoffs (Newman et al., 2020): all of SCAN re-split at each cutoff; every target
re-derived by an interpreter of SCAN's grammar written here; train/valid/test partition the
commands by their number of actions; valid is a seeded i.i.d. tenth of the commands within the
cutoff; the messages for missing or repeated data."""

import re
import shutil

import pytest

from fairseq_monoattn.catalog import SCAN_CUTOFFS, TASKS
from fairseq_monoattn.data import scan
from fairseq_monoattn.data.common import DataError

UPSTREAM_TRAIN = scan.DEFAULT_DATA_DIR / "tasks_train_length.txt"
UPSTREAM_TEST = scan.DEFAULT_DATA_DIR / "tasks_test_length.txt"


# --- SCAN's grammar (Lake & Baroni, 2018), interpreted independently of the data files ----

PRIMITIVES = {"walk": ["I_WALK"], "look": ["I_LOOK"], "run": ["I_RUN"], "jump": ["I_JUMP"], "turn": []}
TURNS = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}


def interpret_phrase(words):
    """x | x left/right | x opposite/around left/right, then twice/thrice."""
    times = 1
    if words[-1] in ("twice", "thrice"):
        times, words = (2 if words[-1] == "twice" else 3), words[:-1]
    action = PRIMITIVES[words[0]]
    if len(words) == 1:
        once = action
    elif len(words) == 2:
        once = [TURNS[words[1]]] + action
    elif words[1] == "opposite":
        once = [TURNS[words[2]]] * 2 + action
    else:
        assert words[1] == "around", words
        once = ([TURNS[words[2]]] + action) * 4
    return once * times


def interpret(command):
    words = command.split()
    for joiner, swap in (("and", False), ("after", True)):
        if joiner in words:
            at = words.index(joiner)
            first, second = interpret_phrase(words[:at]), interpret_phrase(words[at + 1 :])
            return second + first if swap else first + second
    return interpret_phrase(words)


@pytest.fixture(scope="module")
def everything():
    return scan.read_upstream_file(UPSTREAM_TRAIN) + scan.read_upstream_file(UPSTREAM_TEST)


@pytest.fixture(scope="module")
def cutoffs():
    return {cutoff: getattr(scan, f"build_scan_cutoff{cutoff}")(1, None) for cutoff in SCAN_CUTOFFS}


def test_the_length_split_files_hold_all_of_scan_once(everything):
    assert len(everything) == 20_910 and len({ex.source for ex in everything}) == 20_910
    assert all(interpret(ex.source) == ex.target.split() for ex in everything)
    lengths = {len(ex.target.split()) for ex in everything}
    assert sorted(n for n in lengths if n >= 22) == [22, 24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48]
    assert tuple(sorted(n for n in lengths if 22 <= n < 48)) == SCAN_CUTOFFS


def test_interpreter_reads_the_grammar():
    assert interpret("jump around left twice after walk") == ["I_WALK"] + ["I_TURN_LEFT", "I_JUMP"] * 8
    assert interpret("turn opposite right and look") == ["I_TURN_RIGHT", "I_TURN_RIGHT", "I_LOOK"]


@pytest.mark.parametrize("cutoff", SCAN_CUTOFFS)
def test_every_cutoff_partitions_scan_by_its_actions(cutoffs, everything, cutoff):
    splits = cutoffs[cutoff]
    assert list(splits) == ["train", "valid", "test"]
    for split, examples in splits.items():
        for ex in examples:
            assert interpret(ex.source) == ex.target.split(), split
            assert ex.length == len(ex.target.split())
    assert (
        max(ex.length for ex in splits["train"] + splits["valid"]) <= cutoff < min(ex.length for ex in splits["test"])
    )
    pairs = {split: [(ex.source, ex.target) for ex in examples] for split, examples in splits.items()}
    assert sum(map(len, pairs.values())) == 20_910
    assert set(pairs["train"]) | set(pairs["valid"]) | set(pairs["test"]) == {(e.source, e.target) for e in everything}
    within = sum(len(ex.target.split()) <= cutoff for ex in everything)
    assert len(pairs["valid"]) == round(0.1 * within) and len(pairs["train"]) == within - len(pairs["valid"])
    assert not set(pairs["train"]) & set(pairs["valid"])
    order = {ex.source: i for i, ex in enumerate(everything)}
    for split in pairs:
        positions = [order[source] for source, _ in pairs[split]]
        assert positions == sorted(positions), split  # file order kept


def test_cutoff_22_is_the_standard_length_split(cutoffs):
    splits = cutoffs[22]
    assert [ex.source for ex in splits["test"]] == [ex.source for ex in scan.read_upstream_file(UPSTREAM_TEST)]
    train = {ex.source for ex in scan.read_upstream_file(UPSTREAM_TRAIN)}
    assert {ex.source for ex in splits["train"] + splits["valid"]} == train


def test_valid_is_a_seeded_iid_sample(cutoffs):
    valid = cutoffs[26]["valid"]
    assert {ex.length for ex in valid} >= set(range(3, 27)) - {23}  # drawn from every length
    again = scan.build_scan_cutoff26(1, None)["valid"]
    other = scan.build_scan_cutoff26(2, None)
    assert again == valid and other["valid"] != valid and len(other["valid"]) == len(valid)
    assert other["test"] == cutoffs[26]["test"]  # the seed moves valid only


def test_catalog_names_a_task_per_cutoff():
    names = [name for name in TASKS if name.startswith("scan_cutoff")]
    assert names == [f"scan_cutoff{cutoff}" for cutoff in (22, 24, 25, 26, 27, 28, 30, 32, 33, 36, 40)]
    assert all(TASKS[name].paper_splits == ("test",) for name in names)


def test_prepared_cutoff_manifest_counts_actions(prepared):
    manifest = prepared("scan_cutoff26").manifest
    stats = {name: (s["size"], s["min_length"], s["max_length"]) for name, s in manifest["splits"].items()}
    assert stats["test"] == (2624, 27, 48) and stats["train"][0] + stats["valid"][0] == 18_286
    assert stats["train"][2] == stats["valid"][2] == 26


def test_missing_upstream_file_is_named(tmp_path):
    shutil.copy(UPSTREAM_TRAIN, tmp_path)
    with pytest.raises(DataError, match=f"{re.escape(str(tmp_path))}: .*missing tasks_test_length.txt"):
        scan.build_scan_cutoff26(1, tmp_path)
    with pytest.raises(DataError, match="no such folder"):
        scan.build_scan_cutoff26(1, tmp_path / "nowhere")


def test_a_command_found_twice_is_refused_with_both_places(tmp_path):
    shutil.copy(UPSTREAM_TRAIN, tmp_path)
    first_line = UPSTREAM_TRAIN.read_text().splitlines()[0]
    test_lines = UPSTREAM_TEST.read_text().splitlines()
    (tmp_path / "tasks_test_length.txt").write_text("\n".join(test_lines[:4] + [first_line] + test_lines[4:]) + "\n")
    test_file = tmp_path / "tasks_test_length.txt"
    with pytest.raises(DataError, match=re.escape(f"{test_file}:5: command 'walk' is also at ")):
        scan.build_scan_cutoff26(1, tmp_path)
