"""Sequence accuracy and edit distance: one definition for validation, scoring and tests.

Exact match: the whole output, EOS included, equals the target (no oracle length, no
truncation).  Edit distance: the Levenshtein distance between output and target tokens (EOS
excluded; unit costs, no transpositions), the value NLTK's ``edit_distance`` gives, as in the
paper's appendix.
"""

from dataclasses import asdict, dataclass
from typing import Dict, Hashable, List, Sequence

import torch


def strip_pad(tokens: torch.Tensor, pad: int) -> List[int]:
    return tokens[tokens.ne(pad)].tolist()


def is_exact_match(hypothesis: Sequence[int], target: Sequence[int]) -> bool:
    return list(hypothesis) == list(target)


def levenshtein(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance (insert, delete, substitute, each costing 1) in O(len(b)) steps on
    bit vectors of len(a) bits (Myers 1999, in Hyyro's 2001 form), instead of the len(a) x len(b)
    table: a 600-token output against its target takes a millisecond, not a quarter second.

    Column j of the table D[i][j] (distance of a[:i] and b[:j]) is kept as its vertical steps
    D[i][j] - D[i-1][j] in {+1, 0, -1}: bit i of ``plus``/``minus`` is set where the step is
    +1/-1.  ``distance`` follows the last row, D[len(a)][j]."""
    if len(a) > len(b):
        a, b = b, a
    if not a:
        return len(b)
    occurs = {}  # token -> bit i set where a[i] == token
    for i, token in enumerate(a):
        occurs[token] = occurs.get(token, 0) | (1 << i)
    mask, last_row = (1 << len(a)) - 1, 1 << (len(a) - 1)
    plus, minus, distance = mask, 0, len(a)  # first column: D[i][0] = i, every step +1
    for token in b:
        match = occurs.get(token, 0)
        vertical_change = match | minus
        # horizontal steps D[i][j] - D[i][j-1]: the carry of (match & plus) + plus runs along the
        # diagonals where a match lets the distance stay put
        horizontal_change = ((((match & plus) + plus) ^ plus) | match) & mask
        h_plus = (minus | ~(horizontal_change | plus)) & mask
        h_minus = plus & horizontal_change
        if h_plus & last_row:
            distance += 1
        elif h_minus & last_row:
            distance -= 1
        # shift the horizontal steps down one row; row 0 (D[0][j] = j) always steps +1
        h_plus = ((h_plus << 1) | 1) & mask
        h_minus = (h_minus << 1) & mask
        plus = (h_minus | ~(vertical_change | h_plus)) & mask
        minus = h_plus & vertical_change
    return distance


def without_eos(tokens: Sequence[int], eos: int) -> List[int]:
    tokens = list(tokens)
    return tokens[:-1] if tokens and tokens[-1] == eos else tokens


def edit_distance(hypothesis: Sequence[int], target: Sequence[int], eos: int) -> int:
    return levenshtein(without_eos(hypothesis, eos), without_eos(target, eos))


def greedy_generator(models, target_dictionary, max_len_a: float = 0.0, max_len_b: int = 200):
    """Plain greedy decoding with fairseq's SequenceGenerator: beam 1 and no minimum length
    (EOS may come first; fairseq's default min_len=1 would forbid it).  The output is cut
    at max_len_a * source length + max_len_b tokens (then EOS is forced)."""
    from fairseq.sequence_generator import SequenceGenerator

    return SequenceGenerator(
        models, target_dictionary, beam_size=1, max_len_a=max_len_a, max_len_b=max_len_b, min_len=0
    )


def greedy_hypotheses(generator, models, sample) -> List[List[int]]:
    """The best hypothesis of every example of a batch, in the batch's order (EOS included
    when the model emitted one; a hypothesis cut at the length limit ends with the EOS the
    generator forces, which makes it longer than any target it was allowed for)."""
    hypos = generator.generate(models, sample)
    return [h[0]["tokens"].tolist() for h in hypos]


@dataclass
class Tally:
    """Sums, so that counts from batches and workers add up exactly.

    Two kinds of wrong output are counted apart, because they tell a stopping failure from a
    reading failure: ``cut_short``, every token right but EOS too early (the output is a
    proper prefix of the target), and ``overran``, the whole target and then more tokens, or
    no EOS at all (the target is a prefix of the output)."""

    size: int = 0
    correct: int = 0
    edit_distance: int = 0
    cut_short: int = 0
    overran: int = 0

    def add(self, hypotheses, targets, eos: int):
        for hypothesis, target in zip(hypotheses, targets):
            self.size += 1
            if is_exact_match(hypothesis, target):
                self.correct += 1  # and edit distance 0
                continue
            output, wanted = without_eos(hypothesis, eos), without_eos(target, eos)
            self.edit_distance += levenshtein(output, wanted)
            if len(output) < len(wanted) and wanted[: len(output)] == output:
                self.cut_short += 1
            elif output[: len(wanted)] == wanted:
                self.overran += 1

    @property
    def accuracy(self) -> float:
        return 100.0 * self.correct / self.size if self.size else 0.0

    @property
    def mean_edit_distance(self) -> float:
        return self.edit_distance / self.size if self.size else 0.0

    def as_dict(self) -> Dict[str, float]:
        return dict(asdict(self), accuracy=self.accuracy, mean_edit_distance=self.mean_edit_distance)


def summed_ratio(meters, numerator: str, denominator: str, scale: float = 1.0) -> float:
    """scale * sum(numerator) / sum(denominator) over fairseq meters of summed counts,
    rounded to 3 decimals as fairseq logs; NaN before anything was counted."""
    total = meters[denominator].sum
    return round(scale * meters[numerator].sum / total, 3) if total > 0 else float("nan")
