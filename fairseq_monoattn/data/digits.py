"""The eight generated digit tasks (Copy, ReCopy and their variants, DeDupe, PosRetrieve).

Each task is a *rule* turning a drawn digit sequence into (source tokens, target tokens)
plus a *draw* function saying how a sequence of a given "length" is sampled.  One seeded
split generator serves all of them.

Splits (the paper's): train 10,000 examples of length 5..10, valid 2,000 of 10..15,
test15 / test30 / test100 2,000 of exactly that length, test_iid 2,000 of 5..10; and, for
the accuracy-against-length curves, test10 / test20 / test50 / test200 of 500 each.
Lengths are drawn uniformly per example, tokens uniformly from 0..9.  No source occurs
twice in a split, and no evaluation split shares a source with train.

"Length" is the number of original digits: for inv_recopy / inv_reverse_recopy that is
the target length; for dedupe it is the number of groups.
"""

import random
from pathlib import Path
from typing import Callable, FrozenSet, List, Optional, Sequence, Tuple

from ..catalog import DIGIT_SPLIT_PLANS, SplitPlan
from .common import DataError, Example, Splits, TaskBuilder

DIGITS = tuple(str(d) for d in range(10))
DEDUPE_GROUP_SIZES = (1, 3, 5)

Tokens = List[str]
Rule = Callable[[Tokens], Tuple[Tokens, Tokens]]
Draw = Callable[[random.Random, int], Tokens]


SPLIT_PLANS = DIGIT_SPLIT_PLANS


# --- the rules --------------------------------------------------------------------------


def repetitions(digit: str) -> int:
    """ReCopy writes d once if d <= 3, three times if 4 <= d <= 6, five times if d >= 7."""
    value = int(digit)
    if value <= 3:
        return 1
    return 3 if value <= 6 else 5


def recopy(digits: Sequence[str]) -> Tokens:
    return [digit for digit in digits for _ in range(repetitions(digit))]


def collapse_repeats(tokens: Sequence[str]) -> Tokens:
    """Drop every token equal to the one before it (DeDupe's target)."""
    return [tok for i, tok in enumerate(tokens) if i == 0 or tok != tokens[i - 1]]


def position_lookups(digits: Sequence[str]) -> Tokens:
    """PosRetrieve: for each digit d in order, `d : X[d] ;` (X[d] = `n/a` past the end)."""
    target: Tokens = []
    for digit in digits:
        position = int(digit)
        found = digits[position] if position < len(digits) else "n/a"
        target += [digit, ":", found, ";"]
    return target


RULES = {
    "copy": lambda x: (list(x), list(x)),
    "reverse_copy": lambda x: (list(x), x[::-1]),
    "recopy": lambda x: (list(x), recopy(x)),
    "reverse_recopy": lambda x: (list(x), recopy(x[::-1])),
    "inv_recopy": lambda x: (recopy(x), list(x)),
    "inv_reverse_recopy": lambda x: (recopy(x[::-1]), list(x)),
    "dedupe": lambda x: (list(x), collapse_repeats(x)),
    "posretrieve": lambda x: (list(x), position_lookups(x)),
}


# --- how a sequence of a given length is drawn ------------------------------------------


def draw_digits(rng: random.Random, length: int) -> Tokens:
    return [rng.choice(DIGITS) for _ in range(length)]


def draw_groups(rng: random.Random, length: int) -> Tokens:
    """`length` groups, each one random digit repeated 1, 3 or 5 times (uniform)."""
    tokens: Tokens = []
    for _ in range(length):
        digit = rng.choice(DIGITS)
        tokens += [digit] * rng.choice(DEDUPE_GROUP_SIZES)
    return tokens


DRAWS = {"dedupe": draw_groups}


# --- the shared split generator ---------------------------------------------------------


def split_rng(seed: int, task: str, split: str) -> random.Random:
    """Independent generator per (seed, task, split); string seeds are stable across runs."""
    return random.Random(f"{seed}/{task}/{split}")


def generate_split(
    task: str, seed: int, plan: SplitPlan, excluded_sources: FrozenSet[str] = frozenset()
) -> List[Example]:
    """Draw `plan.size` examples with distinct sources not in `excluded_sources`."""
    rule, draw = RULES[task], DRAWS.get(task, draw_digits)
    rng = split_rng(seed, task, plan.name)
    examples: List[Example] = []
    seen = set()
    attempts_left = 100 * plan.size
    while len(examples) < plan.size:
        attempts_left -= 1
        if attempts_left < 0:
            raise DataError(f"{task}/{plan.name}: cannot find {plan.size} distinct sources")
        length = rng.randint(plan.min_length, plan.max_length)
        source, target = rule(draw(rng, length))
        source_text = " ".join(source)
        if source_text in seen or source_text in excluded_sources:
            continue
        seen.add(source_text)
        examples.append(Example(source_text, " ".join(target), length))
    return examples


def build_digit_task(task: str, seed: int, test_lengths: Sequence[int] = (), test_size: int = 500) -> Splits:
    """All splits of one digit task, and ``testN`` of ``test_size`` examples for each N of
    ``test_lengths`` that is not a split already; evaluation splits never repeat a train source.
    Every split is drawn from a generator of its own name, so extra lengths change no other split."""
    splits: Splits = {}
    train_sources: FrozenSet[str] = frozenset()
    names = {plan.name for plan in SPLIT_PLANS}
    extra = [SplitPlan(f"test{n}", test_size, n, n) for n in dict.fromkeys(test_lengths) if f"test{n}" not in names]
    for plan in (*SPLIT_PLANS, *extra):
        splits[plan.name] = generate_split(task, seed, plan, train_sources)
        if plan.name == "train":
            train_sources = frozenset(ex.source for ex in splits["train"])
    return splits


def builder_for(task: str) -> TaskBuilder:
    def build(
        seed: int, data_dir: Optional[Path] = None, test_lengths: Sequence[int] = (), test_size: int = 500
    ) -> Splits:
        if data_dir is not None:
            raise DataError(f"task {task} is generated and reads no files; drop --data-dir")
        return build_digit_task(task, seed, test_lengths, test_size)

    build.__name__ = f"build_{task}"
    return build


build_copy = builder_for("copy")
build_reverse_copy = builder_for("reverse_copy")
build_recopy = builder_for("recopy")
build_reverse_recopy = builder_for("reverse_recopy")
build_inv_recopy = builder_for("inv_recopy")
build_inv_reverse_recopy = builder_for("inv_reverse_recopy")
build_dedupe = builder_for("dedupe")
build_posretrieve = builder_for("posretrieve")
