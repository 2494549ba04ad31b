"""Sequence accuracy and edit distance: one definition for validation, scoring and tests.

Exact match: the whole output, EOS included, equals the target (no oracle length, no
truncation).  Edit distance: NLTK's Levenshtein distance between output and target tokens
(EOS excluded), as in the paper's appendix.
"""
from dataclasses import asdict, dataclass
from typing import Dict, List, Sequence

import torch
from nltk.metrics.distance import edit_distance as nltk_edit_distance


def strip_pad(tokens: torch.Tensor, pad: int) -> List[int]:
    return tokens[tokens.ne(pad)].tolist()


def is_exact_match(hypothesis: Sequence[int], target: Sequence[int]) -> bool:
    return list(hypothesis) == list(target)


def edit_distance(hypothesis: Sequence[int], target: Sequence[int], eos: int) -> int:
    def body(tokens):
        tokens = list(tokens)
        return tokens[:-1] if tokens and tokens[-1] == eos else tokens

    return nltk_edit_distance(body(hypothesis), body(target))


def greedy_generator(models, target_dictionary, max_len_a: float = 0.0, max_len_b: int = 200):
    """Plain greedy decoding with fairseq's SequenceGenerator: beam 1 and no minimum length
    (EOS may come first; fairseq's default min_len=1 would forbid it).  The output is cut
    at max_len_a * source length + max_len_b tokens (then EOS is forced)."""
    from fairseq.sequence_generator import SequenceGenerator

    return SequenceGenerator(models, target_dictionary, beam_size=1, max_len_a=max_len_a, max_len_b=max_len_b,
                             min_len=0)


def greedy_hypotheses(generator, models, sample) -> List[List[int]]:
    """The best hypothesis of every example of a batch, in the batch's order (EOS included
    when the model emitted one; a hypothesis cut at the length limit ends with the EOS the
    generator forces, which makes it longer than any target it was allowed for)."""
    hypos = generator.generate(models, sample)
    return [h[0]["tokens"].tolist() for h in hypos]


@dataclass
class Tally:
    """Sums, so that counts from batches and workers add up exactly."""
    size: int = 0
    correct: int = 0
    edit_distance: int = 0

    def add(self, hypotheses, targets, eos: int):
        for hypothesis, target in zip(hypotheses, targets):
            self.size += 1
            self.correct += is_exact_match(hypothesis, target)
            self.edit_distance += edit_distance(hypothesis, target, eos)

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
