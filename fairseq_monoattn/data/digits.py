"""The eight generated digit tasks (Copy, ReCopy and their variants, DeDupe, PosRetrieve).

Each task is a *rule* turning a drawn digit sequence into (source tokens, target tokens)
plus a *draw* function saying how a sequence of a given "length" is sampled.  The seeded
split generator of ``generated.py`` serves all of them.

Splits (the paper's): train 10,000 examples of length 5..10, valid 2,000 of 10..15,
test15 / test30 / test100 2,000 of exactly that length, test_iid 2,000 of 5..10; and, for
the accuracy-against-length curves, test10 / test20 / test50 / test200 of 500 each.
Lengths are drawn uniformly per example, tokens uniformly from 0..9.  No source occurs
twice in a split, and no evaluation split shares a source with train.

"Length" is the number of original digits: for inv_recopy / inv_reverse_recopy that is
the target length; for dedupe it is the number of groups.
"""

import functools
import random
from typing import Sequence

from ..catalog import DIGIT_SPLIT_PLANS
from .common import Splits, TaskBuilder
from .generated import Rule, Tokens, generate_splits, task_builder, uniform_tokens

DIGITS = tuple(str(d) for d in range(10))
DEDUPE_GROUP_SIZES = (1, 3, 5)


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


draw_digits = uniform_tokens(DIGITS)


def draw_groups(rng: random.Random, length: int) -> Tokens:
    """`length` groups, each one random digit repeated 1, 3 or 5 times (uniform)."""
    tokens: Tokens = []
    for _ in range(length):
        digit = rng.choice(DIGITS)
        tokens += [digit] * rng.choice(DEDUPE_GROUP_SIZES)
    return tokens


DRAWS = {"dedupe": draw_groups}


def build_digit_task(task: str, seed: int, test_lengths: Sequence[int] = (), test_size: int = 500) -> Splits:
    """All splits of one digit task, and ``testN`` of ``test_size`` examples for each N of
    ``test_lengths`` that is not a split already (the shared generator of ``generated.py``)."""
    rule: Rule = RULES[task]
    return generate_splits(task, seed, SPLIT_PLANS, rule, DRAWS.get(task, draw_digits), test_lengths, test_size)


def builder_for(task: str) -> TaskBuilder:
    return task_builder(task, functools.partial(build_digit_task, task))


build_copy = builder_for("copy")
build_reverse_copy = builder_for("reverse_copy")
build_recopy = builder_for("recopy")
build_reverse_recopy = builder_for("reverse_recopy")
build_inv_recopy = builder_for("inv_recopy")
build_inv_reverse_recopy = builder_for("inv_reverse_recopy")
build_dedupe = builder_for("dedupe")
build_posretrieve = builder_for("posretrieve")
