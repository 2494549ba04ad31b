"""Sequence accuracy and edit distance: one definition for validation, scoring and tests.

Exact match: the whole output, EOS included, equals the target (no oracle length, no
truncation).  Edit distance: NLTK's Levenshtein distance between output and target tokens
(EOS excluded), as in the paper's appendix.
"""
from dataclasses import asdict, dataclass
from pathlib import Path
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


# --- scoring a whole split of a trained checkpoint ------------------------------------

class CheckpointError(ValueError):
    """A missing checkpoint or data folder, worded for the command line."""


def load_checkpoint(checkpoint, data_bin):
    """(models in eval mode, task, cfg) from a checkpoint through fairseq's own loader, the
    task reading its dictionaries and splits from ``data_bin``."""
    from fairseq import checkpoint_utils

    import fairseq_monoattn  # noqa: F401  (registers the plugin before the checkpoint is read)

    checkpoint, data_bin = Path(checkpoint), Path(data_bin)
    if not checkpoint.is_file():
        raise CheckpointError(f"checkpoint not found: {checkpoint}")
    if not data_bin.is_dir():
        raise CheckpointError(f"data folder not found: {data_bin} (pass the binarized folder, e.g. DIR/bin)")
    if not any(data_bin.glob("dict.*.txt")):
        raise CheckpointError(f"no fairseq dictionaries (dict.*.txt) in {data_bin}")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data_bin)}
    )
    for model in models:
        model.eval()
    return models, task, cfg


def longest_target(dataset) -> int:
    return int(max(dataset.tgt_sizes))


def score_split(models, task, split: str, batch_size: int = 64, max_output_len=None, progress=None):
    """Greedy decoding of every example of ``split``; returns (Tally, hypotheses by example
    id, the output length limit used).

    Nothing is filtered or skipped: batches ignore fairseq's position limits, keep the last
    partial batch, and every example id must come back exactly once.  The output length
    limit (default: twice the split's longest target plus 10 tokens) is the same for every
    example; a hypothesis that reaches it is wrong, and it is what edit distance sees.
    """
    task.load_dataset(split)
    dataset = task.dataset(split)
    if max_output_len is None:
        max_output_len = 2 * longest_target(dataset) + 10
    generator = greedy_generator(models, task.target_dictionary, max_len_b=max_output_len)
    batches = task.get_batch_iterator(
        dataset=dataset, max_sentences=batch_size, max_positions=None, ignore_invalid_inputs=False,
        required_batch_size_multiple=1, seed=1, num_workers=0,
    ).next_epoch_itr(shuffle=False)
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    tally, found = Tally(), {}
    for sample in (progress(batches) if progress else batches):
        with torch.no_grad():
            hypotheses = greedy_hypotheses(generator, models, sample)
        targets = [strip_pad(t, pad) for t in sample["target"]]
        tally.add(hypotheses, targets, eos)
        for example_id, hypothesis in zip(sample["id"].tolist(), hypotheses):
            if example_id in found:
                raise RuntimeError(f"{split}: example {example_id} was decoded twice")
            found[example_id] = hypothesis
    if len(found) != len(dataset):
        missing = sorted(set(range(len(dataset))) - set(found))[:10]
        raise RuntimeError(f"{split}: {len(dataset) - len(found)} of {len(dataset)} examples were not decoded "
                           f"(first ids: {missing})")
    return tally, found, max_output_len
