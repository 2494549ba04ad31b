"""The transduction tasks of Delétang et al. (ICLR 2023), "Neural Networks and the Chomsky
Hierarchy": Reverse String, Stack Manipulation, Duplicate String, Odds First, Bucket Sort and
Binary Addition, the tasks of their benchmark that answer with an output sequence, written here
from the paper's task
definitions and their repository's (google-deepmind/neural_networks_chomsky_hierarchy,
``tasks/dcf/`` and ``tasks/cs/``) vocabularies and sampling.

Each task is a *rule* from a drawn token sequence to (source tokens, target tokens) and a *draw*
of a sequence of a given length, drawn by the project's seeded split generator
(``generated.py``).  The splits are the catalog's ``deletang_split_plans``: train 10,000 examples
of lengths uniform in 1..40, valid 500 of 1..40 (i.i.d., no source of train), and test50,
test100, ..., test500, 100 examples each of exactly that length.  "Length" is the number of source
tokens.  The original samples a fresh batch at every training step; a fixed seeded training file
is this project's form (like the digit tasks).

The original encodes tokens as integers; here they are written as the same digits, and the
original's termination token (the answer's end, followed by padding that its accuracy masks out)
is the EOS that fairseq appends to every target, except in Stack Manipulation: its answer, the
final stack, is empty when the actions pop every bit, and a target cannot be empty, so there the
termination token is written out (``catalog.DELETANG_TASKS[task].termination_token``).
"""

import functools
import random
from typing import Dict, List, Sequence

from ..catalog import DELETANG_TASKS, deletang_split_plans
from .common import DataError, Splits, TaskBuilder
from .generated import Draw, Rule, Tokens, generate_splits, task_builder, uniform_tokens

# Reverse String, Duplicate String and Odds First: binary strings (the paper's vocabulary size 2).
BITS = ("0", "1")
# Bucket Sort: tokens 0..4 (the paper's vocabulary size 5).
BUCKET_SORT_TOKENS = tuple(str(d) for d in range(5))
# Binary Addition's operator between the two numbers (the original's input token 2).
PLUS = "+"
# Stack Manipulation's actions, the original's input tokens 2, 3 and 4.
POP, PUSH_ZERO, PUSH_ONE = "2", "3", "4"
STACK_ACTIONS = (POP, PUSH_ZERO, PUSH_ONE)
PUSHED = {PUSH_ZERO: "0", PUSH_ONE: "1"}


# --- the rules --------------------------------------------------------------------------


def odds_first(tokens: Sequence[str]) -> Tokens:
    """The tokens at odd positions (1-based: s1 s3 s5 ...), then those at even positions (s2 s4
    ...), as the original's task description puts it and its worked examples read (00110101 ->
    0100 0111).  The original's sampler concatenates input[1::2] before input[::2] (0-based), which
    puts s2 s4 ... first; this project follows the description."""
    return list(tokens[0::2]) + list(tokens[1::2])


def little_endian_bits(value: int, width: int = 0) -> Tokens:
    """``value`` in binary, least significant bit first, padded with zeros to ``width`` bits (no
    padding with width 0; zero is ``0``)."""
    bits = format(value, "b").zfill(width)
    return list(reversed(bits))


def little_endian_value(bits: Sequence[str]) -> int:
    return int("".join(reversed(bits)), 2)


def binary_sum(expression: Sequence[str]) -> Tokens:
    """The sum of ``n + m`` (both little-endian), little-endian and without zeros past its most
    significant bit, as the original's answer before its termination token."""
    plus = list(expression).index(PLUS)
    first, second = expression[:plus], expression[plus + 1 :]
    return little_endian_bits(little_endian_value(first) + little_endian_value(second))


def final_stack(tokens: Sequence[str]) -> Tokens:
    """The stack that ``tokens`` leave, top first, then the termination token: ``tokens`` are a
    stack of bits given bottom first, then actions run left to right (POP takes the top bit off,
    and does nothing on an empty stack; PUSH 0 and PUSH 1 put that bit on top)."""
    stack: Tokens = []
    for position, token in enumerate(tokens):
        if token in BITS:
            if position and tokens[position - 1] not in BITS:
                raise ValueError(f"stack bit {token!r} after an action at position {position + 1}")
            stack.append(token)
        elif token == POP:
            if stack:
                stack.pop()
        elif token in PUSHED:
            stack.append(PUSHED[token])
        else:
            raise ValueError(f"not a stack bit or action: {token!r}")
    return stack[::-1] + [DELETANG_TASKS["stack_manipulation"].termination_token]


RULES: Dict[str, Rule] = {
    "reverse_string": lambda x: (list(x), x[::-1]),
    "stack_manipulation": lambda x: (list(x), final_stack(x)),
    "duplicate_string": lambda x: (list(x), list(x) + list(x)),
    "odds_first": lambda x: (list(x), odds_first(x)),
    "bucket_sort": lambda x: (list(x), sorted(x)),  # one-character tokens: text order is number order
    "binary_addition": lambda x: (list(x), binary_sum(x)),
}


# --- how a sequence of a given length is drawn ------------------------------------------


def draw_addition(rng: random.Random, length: int) -> Tokens:
    """``n + m`` in ``length`` tokens, as the original draws it for lengths of 3 or more: n's width
    uniform in 1..length-2 bits, m's the rest; each number uniform in 1..2^width - 1, written
    little-endian with exactly its width of bits (so a number may end in zeros, its high bits)."""
    if length < 3:
        raise ValueError(f"an addition needs at least 3 tokens, got {length}")
    first_width = rng.randint(1, length - 2)
    second_width = length - 1 - first_width
    first = rng.randint(1, 2**first_width - 1)
    second = rng.randint(1, 2**second_width - 1)
    return little_endian_bits(first, first_width) + [PLUS] + little_endian_bits(second, second_width)


def draw_stack(rng: random.Random, length: int) -> Tokens:
    """A stack and its actions in ``length`` tokens, as the original draws them: one token is a
    lone bit (a stack and no actions); otherwise the stack's height is uniform in 1..length-1, each
    of its bits uniform, and each of the other tokens an action uniform over POP, PUSH 0, PUSH 1."""
    if length < 1:
        raise ValueError(f"a stack needs at least 1 token, got {length}")
    height = 1 if length == 1 else rng.randint(1, length - 1)
    return [rng.choice(BITS) for _ in range(height)] + [rng.choice(STACK_ACTIONS) for _ in range(length - height)]


DRAWS: Dict[str, Draw] = {
    "reverse_string": uniform_tokens(BITS),
    "stack_manipulation": draw_stack,
    "duplicate_string": uniform_tokens(BITS),
    "odds_first": uniform_tokens(BITS),
    "bucket_sort": uniform_tokens(BUCKET_SORT_TOKENS),
    "binary_addition": draw_addition,
}


# --- the splits -------------------------------------------------------------------------


def build_deletang_task(task: str, seed: int, test_lengths: Sequence[int] = (), test_size: int = 500) -> Splits:
    """All splits of one task, and ``testN`` of ``test_size`` examples for each N of
    ``test_lengths`` that is not a split already."""
    shortest = DELETANG_TASKS[task].shortest
    too_short: List[int] = [n for n in test_lengths if n < shortest]
    if too_short:
        raise DataError(f"--test-lengths: {task} has no examples shorter than {shortest} tokens, got {too_short}")
    plans = deletang_split_plans(shortest)
    return generate_splits(task, seed, plans, RULES[task], DRAWS[task], test_lengths, test_size)


def builder_for(task: str) -> TaskBuilder:
    return task_builder(task, functools.partial(build_deletang_task, task))


build_reverse_string = builder_for("reverse_string")
build_stack_manipulation = builder_for("stack_manipulation")
build_duplicate_string = builder_for("duplicate_string")
build_odds_first = builder_for("odds_first")
build_bucket_sort = builder_for("bucket_sort")
build_binary_addition = builder_for("binary_addition")
