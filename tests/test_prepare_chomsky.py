"""The tasks of Delétang et al. (ICLR 2023): every rule re-checked on every example of every
split, the protocol's lengths and sizes, vocabularies, distinct sources, no evaluation source in
train, the original's worked examples, and byte-reproducible files."""

import re
from collections import Counter
from pathlib import Path

import pytest

from fairseq_monoattn.catalog import DELETANG_TASKS, TASKS
from fairseq_monoattn.data import chomsky
from fairseq_monoattn.data.common import DataError

TASK_NAMES = [
    "reverse_string",
    "stack_manipulation",
    "duplicate_string",
    "odds_first",
    "bucket_sort",
    "binary_addition",
]
TEST_SPLITS = [f"test{n}" for n in range(50, 501, 50)]
EXPECTED_SPLITS = {  # split: (size, shortest, longest), as docs/data.md lists them
    "train": (10_000, 1, 40),
    "valid": (500, 1, 40),
    **{f"test{n}": (100, n, n) for n in range(50, 501, 50)},
}
SHORTEST = {"binary_addition": 3}  # an addition needs `n + m`
ALPHABETS = {  # (source tokens, target tokens)
    "reverse_string": ({"0", "1"}, {"0", "1"}),
    # bits, then POP 2, PUSH 0 3, PUSH 1 4 -> bits, then the termination token 2
    "stack_manipulation": ({"0", "1", "2", "3", "4"}, {"0", "1", "2"}),
    "duplicate_string": ({"0", "1"}, {"0", "1"}),
    "odds_first": ({"0", "1"}, {"0", "1"}),
    "bucket_sort": ({"0", "1", "2", "3", "4"}, {"0", "1", "2", "3", "4"}),
    "binary_addition": ({"0", "1", "+"}, {"0", "1"}),
}


# --- the rules, written again independently of fairseq_monoattn/data/chomsky.py ---------


def little_endian(bits):
    return sum(int(bit) << position for position, bit in enumerate(bits))


def run_stack(src):
    """The final stack as a string, bottom first: the leading bits, then each action."""
    bits = len(src) - len("".join(src).lstrip("01"))
    stack = "".join(src[:bits])
    for action in src[bits:]:
        assert action in "234", src
        stack = stack[:-1] if action == "2" else stack + {"3": "0", "4": "1"}[action]
    return stack


def check_rule(task, src, tgt):
    if task == "reverse_string":
        assert tgt == list(reversed(src))
    elif task == "stack_manipulation":
        assert src[0] in "01"  # a stack of at least one bit
        assert tgt == list(reversed(run_stack(src))) + ["2"]
    elif task == "duplicate_string":
        assert tgt == src + src
    elif task == "odds_first":  # 1-based odd positions s1 s3 ..., then s2 s4 ...
        assert tgt == [src[i] for i in range(0, len(src), 2)] + [src[i] for i in range(1, len(src), 2)]
    elif task == "bucket_sort":
        assert tgt == sorted(src, key=int)
    elif task == "binary_addition":
        assert src.count("+") == 1
        plus = src.index("+")
        first, second = src[:plus], src[plus + 1 :]
        assert first and second and little_endian(first) > 0 and little_endian(second) > 0
        assert little_endian(tgt) == little_endian(first) + little_endian(second)
        assert tgt[-1] == "1"  # no zeros past the most significant bit
    else:
        raise AssertionError(task)


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(task, seed=1, **options):
        key = (task, seed, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = getattr(chomsky, f"build_{task}")(seed, None, **options)
        return cache[key]

    return get


def pairs(examples):
    return [(ex.source.split(), ex.target.split()) for ex in examples]


# --- tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASK_NAMES)
def test_rule_and_vocabulary_hold_on_every_example_of_every_split(built, task):
    splits = built(task)
    assert list(splits) == list(EXPECTED_SPLITS)
    source_tokens, target_tokens = ALPHABETS[task]
    for split, examples in splits.items():
        for src, tgt in pairs(examples):
            assert set(src) <= source_tokens and set(tgt) <= target_tokens, split
            check_rule(task, src, tgt)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_sizes_and_lengths_are_the_protocols(built, task):
    """Train and valid cover every length 1..40 (3..40 for Binary Addition), each test split one
    length; "length" is the number of source tokens."""
    for split, (size, shortest, longest) in EXPECTED_SPLITS.items():
        examples = built(task)[split]
        assert len(examples) == size, split
        assert all(ex.length == len(ex.source.split()) for ex in examples)
        lengths = {ex.length for ex in examples}
        if split == "train":
            assert lengths == set(range(SHORTEST.get(task, shortest), longest + 1))
        else:
            assert min(lengths) >= SHORTEST.get(task, shortest) and max(lengths) <= longest, split
            if shortest == longest:
                assert lengths == {shortest}


@pytest.mark.parametrize("task", TASK_NAMES)
def test_sources_distinct_and_no_evaluation_source_in_train(built, task):
    splits = built(task)
    train = {ex.source for ex in splits["train"]}
    for split, examples in splits.items():
        sources = [ex.source for ex in examples]
        assert len(set(sources)) == len(sources), split
        if split != "train":
            assert not train & set(sources), split


def test_short_lengths_hold_nearly_every_string_and_long_ones_are_uniform(built):
    """Each length is drawn 1/40 of the time and a repeated string is drawn again (a new length
    too): the shortest lengths hold every string, the next nearly all, the long ones the rest
    evenly."""
    counts = Counter(ex.length for ex in built("reverse_string")["train"])
    assert [counts[n] for n in range(1, 6)] == [2, 4, 8, 16, 32]  # every binary string
    assert all(0.8 * 2**n < counts[n] <= 2**n for n in (6, 7))
    long = [counts[n] for n in range(13, 41)]
    mean = sum(long) / len(long)
    assert 10_000 / 40 < mean < 10_000 / 32 and all(0.8 * mean < n < 1.2 * mean for n in long), counts
    bucket = Counter(ex.length for ex in built("bucket_sort")["train"])
    assert [bucket[1], bucket[2]] == [5, 25]  # every string of 0..4 of one and two tokens


def test_tokens_are_uniform(built):
    tokens = Counter(tok for ex in built("bucket_sort")["test500"] for tok in ex.source.split())
    assert all(0.18 < n / 50_000 < 0.22 for n in tokens.values()) and len(tokens) == 5
    bits = Counter(tok for ex in built("duplicate_string")["test100"] for tok in ex.source.split())
    assert 0.47 < bits["1"] / 10_000 < 0.53


def test_rules_reproduce_the_originals_worked_examples():
    rule = chomsky.RULES
    assert rule["reverse_string"](list("011010"))[1] == list("010110")
    assert rule["reverse_string"](list("123021"))[1] == list("120321")
    # 0 1 1 0 PUSH 1 POP POP -> 1 1 0, then the termination token
    assert rule["stack_manipulation"](list("0110422"))[1] == list("1102")
    # 1 1 0 POP POP POP -> the empty stack: the termination token alone
    assert rule["stack_manipulation"](list("110222"))[1] == ["2"]
    # POP on an empty stack does nothing: 1 POP POP PUSH 0 -> 0
    assert rule["stack_manipulation"](list("1223"))[1] == list("02")
    assert rule["duplicate_string"](list("101"))[1] == list("101101")
    assert rule["odds_first"](list("00110101"))[1] == list("0100" + "0111")
    assert rule["odds_first"](list("110"))[1] == list("10" + "1")
    assert rule["bucket_sort"](list("10204112"))[1] == list("00111224")
    assert rule["bucket_sort"](list("1110001"))[1] == list("0001111")
    # 001 + 01101 = 4 + 22 = 26 -> 01011 (the original then writes its termination token 2)
    assert rule["binary_addition"](list("001+01101"))[1] == list("01011")
    # 1001 + 000001 = 9 + 32 = 41 -> 100101
    assert rule["binary_addition"](list("1001+000001"))[1] == list("100101")


def test_binary_addition_draws_as_the_original():
    """n's width uniform in 1..L-2 bits, m's the rest, each number in 1..2^width - 1 written with
    exactly its width (so its last, most significant, bit may be 0)."""
    import random

    rng = random.Random(5)
    widths, high_zero = Counter(), 0
    for _ in range(4000):
        expression = chomsky.draw_addition(rng, 12)
        assert len(expression) == 12
        plus = expression.index("+")
        widths[plus] += 1
        first, second = expression[:plus], expression[plus + 1 :]
        assert little_endian(first) >= 1 and little_endian(second) >= 1
        high_zero += first[-1] == "0"
    assert sorted(widths) == list(range(1, 11))
    assert all(300 < n < 500 for n in widths.values()), widths  # 400 each
    assert 0.25 < high_zero / 4000 < 0.55  # width w: share of numbers < 2^(w-1) is (2^(w-1) - 1) / (2^w - 1)
    with pytest.raises(ValueError, match="at least 3 tokens"):
        chomsky.draw_addition(rng, 2)


def test_stack_manipulation_draws_as_the_original():
    """Length 1 is a lone bit; otherwise the stack's height is uniform in 1..L-1, its bits and the
    actions (POP, PUSH 0, PUSH 1) uniform."""
    import random

    rng = random.Random(5)
    assert {tuple(chomsky.draw_stack(rng, 1)) for _ in range(50)} == {("0",), ("1",)}
    heights, tokens = Counter(), Counter()
    for _ in range(4000):
        drawn = chomsky.draw_stack(rng, 11)
        assert len(drawn) == 11
        height = len("".join(drawn).rstrip("234"))
        assert set(drawn[:height]) <= {"0", "1"} and set(drawn[height:]) <= {"2", "3", "4"}
        heights[height] += 1
        tokens.update(drawn)
    assert sorted(heights) == list(range(1, 11))
    assert all(300 < n < 500 for n in heights.values()), heights  # 400 each
    bits, actions = tokens["0"] + tokens["1"], tokens["2"] + tokens["3"] + tokens["4"]
    assert 0.47 < tokens["1"] / bits < 0.53 and all(0.3 < tokens[a] / actions < 0.36 for a in "234")
    with pytest.raises(ValueError, match="at least 1 token"):
        chomsky.draw_stack(rng, 0)


def test_stack_manipulation_refuses_a_bit_after_an_action():
    with pytest.raises(ValueError, match="stack bit '1' after an action at position 3"):
        chomsky.final_stack(list("0412"))
    with pytest.raises(ValueError, match="not a stack bit or action: '5'"):
        chomsky.final_stack(list("015"))


def test_empty_stacks_are_the_termination_token_alone(built):
    """An answer may be the empty stack; its target is `2` (never empty), and train holds such
    answers at many lengths."""
    train = built("stack_manipulation")["train"]
    empty = [ex for ex in train if ex.target == "2"]
    assert len(empty) > 20 and len({ex.length for ex in empty}) > 5
    assert all(not run_stack(ex.source.split()) for ex in empty)
    assert all(ex.target.endswith(" 2") for ex in train if ex not in empty)


def test_binary_addition_refuses_test_lengths_below_three(tmp_path):
    with pytest.raises(DataError, match=re.escape("binary_addition has no examples shorter than 3 tokens, got [2]")):
        chomsky.build_binary_addition(1, None, test_lengths=(2, 60))


def test_extra_test_lengths_change_no_other_split(built):
    extra = built("odds_first", test_lengths=(41, 100, 777), test_size=20)
    plain = built("odds_first")
    assert list(extra) == [*EXPECTED_SPLITS, "test41", "test777"]  # test100 is a split already
    assert all(extra[split] == plain[split] for split in plain)
    assert {ex.length for ex in extra["test777"]} == {777} and len(extra["test41"]) == 20


def test_seed_changes_the_draws_and_the_same_seed_repeats_them(built):
    for task in TASK_NAMES:
        again = getattr(chomsky, f"build_{task}")(1, None)
        assert again == built(task)
        other = built(task, seed=2)
        assert [ex.source for ex in other["train"]] != [ex.source for ex in built(task)["train"]]
        assert [ex.source for ex in other["test500"]] != [ex.source for ex in built(task)["test500"]]


def test_first_training_example_is_pinned():
    """Changing the generator changes every published data set: bump DATA_FORMAT_VERSION."""
    assert chomsky.build_reverse_string(1, None)["train"][0].source == "0 1 1 0 0 0 1 1 0 0 1 1 1 1 1 1"


def test_catalog_facts():
    for task in TASK_NAMES:
        facts = TASKS[task]
        assert facts.paper_splits == tuple(TEST_SPLITS) and facts.any_test_length
        assert facts.train_lengths == (SHORTEST.get(task, 1), 40)
    scored = {task for task, facts in DELETANG_TASKS.items() if facts.scores_termination}
    assert scored == {"binary_addition", "stack_manipulation"}
    # the original's measure: Binary Addition's termination is the EOS, Stack Manipulation's a token
    keys = {task: facts.accuracy_key for task, facts in DELETANG_TASKS.items()}
    assert keys == {task: "per_token_accuracy" for task in TASK_NAMES} | {
        "binary_addition": "per_token_accuracy_with_eos"
    }
    assert TASKS["stack_manipulation"].train_lengths == (1, 40) and TASKS["stack_manipulation"].reading is None
    assert TASKS["reverse_string"].reading == "reversed"


def all_files(folder: Path):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("task", ["bucket_sort", "stack_manipulation"])
def test_prepared_files_are_byte_reproducible(tmp_path, monkeypatch, task):
    """The same seed writes the same bytes, another seed another train (small splits, the
    protocol's lengths)."""
    from fairseq_monoattn.catalog import SplitPlan
    from fairseq_monoattn.data.prepare import prepare

    small = (SplitPlan("train", 300, 1, 40), SplitPlan("valid", 50, 1, 40), SplitPlan("test500", 20, 500, 500))
    monkeypatch.setattr(chomsky, "deletang_split_plans", lambda shortest: small)
    manifest = prepare(task, tmp_path / "first", seed=1)
    assert {name: stats["size"] for name, stats in manifest["splits"].items()} == {
        "train": 300,
        "valid": 50,
        "test500": 20,
    }
    assert manifest["splits"]["test500"]["max_source_tokens"] == 500
    for split in small:
        sources = (tmp_path / "first" / "raw" / f"{split.name}.src").read_text().splitlines()
        targets = (tmp_path / "first" / "raw" / f"{split.name}.tgt").read_text().splitlines()
        for src, tgt in zip(sources, targets):
            check_rule(task, src.split(), tgt.split())
    files = all_files(tmp_path / "first")
    assert {name.split("/")[0] for name in files} == {"raw", "bin", "manifest.json"}
    prepare(task, tmp_path / "again", seed=1)
    assert all_files(tmp_path / "again") == files
    prepare(task, tmp_path / "seed2", seed=2)
    other = all_files(tmp_path / "seed2")
    assert other.keys() == files.keys()
    assert other["raw/train.src"] != files["raw/train.src"] and other["raw/test500.src"] != files["raw/test500.src"]
