"""Seeded generated splits: the one split generator of every task whose data is drawn, not read
(the digit tasks of ``digits.py`` and the Delétang et al. tasks of ``chomsky.py``).

A task is a *rule* turning a drawn token sequence into (source tokens, target tokens) and a
*draw* saying how a sequence of a given "length" is sampled.  Each split is drawn from a
generator of its own (seed, task, split name), so adding a split leaves every other split
unchanged, and string seeds make the draws the same in every Python process.  Lengths are drawn
uniformly from the split's range, one per example; a source already in the split, or in the
excluded sources (train's, for every evaluation split), is drawn again, length and all.  So a
length with few distinct sequences ends up holding all or nearly all of them, and the examples
it cannot hold go to the other lengths (docs/data.md gives the counts for binary strings).
"""

import random
from pathlib import Path
from typing import Callable, FrozenSet, List, Optional, Sequence, Tuple

from ..catalog import SplitPlan
from .common import DataError, Example, Splits, TaskBuilder

Tokens = List[str]
Rule = Callable[[Tokens], Tuple[Tokens, Tokens]]
Draw = Callable[[random.Random, int], Tokens]


def split_rng(seed: int, task: str, split: str) -> random.Random:
    """Independent generator per (seed, task, split); string seeds are stable across runs."""
    return random.Random(f"{seed}/{task}/{split}")


def uniform_tokens(alphabet: Sequence[str]) -> Draw:
    """A draw of `length` tokens, each uniform over `alphabet`."""
    alphabet = tuple(alphabet)

    def draw(rng: random.Random, length: int) -> Tokens:
        return [rng.choice(alphabet) for _ in range(length)]

    return draw


def generate_split(
    task: str, seed: int, plan: SplitPlan, rule: Rule, draw: Draw, excluded_sources: FrozenSet[str] = frozenset()
) -> List[Example]:
    """Draw `plan.size` examples with distinct sources not in `excluded_sources`."""
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


def generate_splits(
    task: str,
    seed: int,
    plans: Sequence[SplitPlan],
    rule: Rule,
    draw: Draw,
    test_lengths: Sequence[int] = (),
    test_size: int = 500,
) -> Splits:
    """Every split of `plans` (the first is train), and ``testN`` of ``test_size`` examples for
    each N of ``test_lengths`` that is not a split already; evaluation splits never repeat a train
    source."""
    if plans[0].name != "train":
        raise ValueError(f"{task}: the first split plan must be train, got {plans[0].name}")
    names = {plan.name for plan in plans}
    extra = [SplitPlan(f"test{n}", test_size, n, n) for n in dict.fromkeys(test_lengths) if f"test{n}" not in names]
    splits: Splits = {}
    train_sources: FrozenSet[str] = frozenset()
    for plan in (*plans, *extra):
        splits[plan.name] = generate_split(task, seed, plan, rule, draw, train_sources)
        if plan.name == "train":
            train_sources = frozenset(ex.source for ex in splits["train"])
    return splits


def task_builder(task: str, build: Callable[[int, Sequence[int], int], Splits]) -> TaskBuilder:
    """The catalog's ``build(seed, data_dir, test_lengths=(), test_size=500)`` of a generated task
    whose splits ``build(seed, test_lengths, test_size)`` draws; a data folder is refused."""

    def build_task(
        seed: int, data_dir: Optional[Path] = None, test_lengths: Sequence[int] = (), test_size: int = 500
    ) -> Splits:
        if data_dir is not None:
            raise DataError(f"task {task} is generated and reads no files; drop --data-dir")
        return build(seed, test_lengths, test_size)

    build_task.__name__ = f"build_{task}"
    return build_task
