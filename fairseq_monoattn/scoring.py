"""Scoring a trained checkpoint on whole splits: greedy sequence accuracy, mean edit distance,
for models with a direction gate the gate's value on the split's inputs, and how sharp the
cross-attention is on the split's targets (the attention peak).

    from fairseq_monoattn.scoring import score
    results = score("ck/checkpoint_best.pt", "data/bin", ["test15", "test30", "test100"], "scores.json")

The metrics themselves are defined once in :mod:`fairseq_monoattn.metrics`.
"""

import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import torch

from .checkpoint_classes import reading_fairseq_checkpoints
from .dictionaries import DictionaryMismatch
from .files import write_json_atomic
from .limits import SCORING_BATCH_SIZE
from .metrics import (
    GreedyDecoder,
    Tally,
    greedy_generator,
    greedy_hypotheses,
    output_length_limit,
    strip_pad_rows,
    teacher_forced_rows,
    told_length_generator,
    without_eos,
    wrong_rows,
)

# The direction gate mixes the encodings the cross-attention reads (its keys and values).
GATE_APPLIES_TO = "cross-attention keys and values: g * e + (1 - g) * reverse(e)"


# Greedy outputs in float32 depend, through rounding, on the batch an example is decoded in (the
# matrix kernels a batch size selects, sums over the padded width): about 1e-7 at the first step,
# grown by the recurrence, enough to flip an argmax between two near-tied tokens (seen in 1 to 3
# of 2,000 outputs for some presets, never a padding leak: docs/training.md).  Scoring in float64
# shrinks that to about 1e-12 below fairseq's float32 log-probabilities, so a score does not
# depend on --batch-size; "float32" scores as the model trains.
PRECISIONS = {"float64": torch.float64, "float32": torch.float32}


class CheckpointError(ValueError):
    """A checkpoint or data folder that cannot be used, worded for the command line and naming
    the file; ``usage``: the command was given bad input (exit status 2) rather than failing."""

    def __init__(self, message: str, usage: bool = True):
        super().__init__(message)
        self.usage = usage


def split_files(data_bin: Path, split: str) -> List[Path]:
    """The index files of both sides of a binarized split (fairseq's src-tgt naming)."""
    return [Path(data_bin) / f"{split}.src-tgt.{side}.idx" for side in ("src", "tgt")]


def check_checkpoint_and_data(checkpoint: Path, data_bin: Path) -> None:
    """The checkpoint is a file and the data folder holds fairseq dictionaries."""
    if not checkpoint.is_file():
        raise CheckpointError(f"checkpoint not found: {checkpoint}")
    if not data_bin.is_dir():
        raise CheckpointError(f"data folder not found: {data_bin} (pass the binarized folder, e.g. DIR/bin)")
    if not any(data_bin.glob("dict.*.txt")):
        raise CheckpointError(f"no fairseq dictionaries (dict.*.txt) in {data_bin}")


def check_score_inputs(checkpoint, data_bin, splits, out, force: bool = False, user_dir=None) -> None:
    """Everything :func:`score` needs, checked before any decoding: the checkpoint, the data
    folder, both sides of every split, a writable --out (not an existing file unless ``force``)."""
    checkpoint, data_bin, out = Path(checkpoint), Path(data_bin), Path(out)
    check_checkpoint_and_data(checkpoint, data_bin)
    missing = [str(path) for split in splits for path in split_files(data_bin, split) if not path.is_file()]
    if missing:
        raise CheckpointError(f"missing split files: {', '.join(missing)}")
    if user_dir is not None and not (Path(user_dir) / "__init__.py").is_file():
        raise CheckpointError(f"--user-dir {user_dir}: not a Python package (no __init__.py)")
    if out.exists() and not force:
        raise CheckpointError(f"{out} exists; pass --force to replace it")
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if out.is_dir():
        raise CheckpointError(f"cannot write {out}: it is a folder")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        reason = "not a folder" if not folder.is_dir() else "not writable"
        raise CheckpointError(f"cannot write {out}: {folder} is {reason}")


def load_checkpoint(checkpoint, data_bin, user_dir=None, dtype: Optional[torch.dtype] = None):
    """(models in eval mode, task, cfg) from a checkpoint through fairseq's own loader, the
    task reading its dictionaries and splits from ``data_bin``.  A checkpoint that cannot be read,
    or whose dictionaries are not the data's, is a CheckpointError naming both files."""
    from fairseq import checkpoint_utils

    import fairseq_monoattn

    fairseq_monoattn.register()  # before the checkpoint is read
    if user_dir is not None:
        from argparse import Namespace

        from fairseq import utils

        utils.import_user_module(Namespace(user_dir=str(user_dir)))
    checkpoint, data_bin = Path(checkpoint), Path(data_bin)
    check_checkpoint_and_data(checkpoint, data_bin)
    state = read_checkpoint(checkpoint, {"data": str(data_bin)})
    try:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides={"data": str(data_bin)}, state=state
        )
    except DictionaryMismatch as error:  # it names the checkpoint and the data's dictionary file
        raise CheckpointError(str(error)) from None
    except (RuntimeError, KeyError, ValueError) as error:
        raise CheckpointError(f"{checkpoint}: cannot build its model on {data_bin}: {error}", usage=False) from None
    for model in models:
        model.eval()
        if dtype is not None:
            model.to(dtype)
    return models, task, cfg


class PerExampleTally:
    """One value per example of a split, kept so batches add up; summarised as mean, min, max
    (None when the model gave no value)."""

    def __init__(self):
        self.values: List[float] = []

    def add(self, values: Optional[torch.Tensor]) -> None:
        """A batch's values (B,), or None from a model that gives none."""
        if values is not None:
            self.values.extend(values.tolist())

    def as_dict(self) -> Optional[Dict[str, object]]:
        if not self.values:
            return None
        values = self.values
        return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}


class GateTally(PerExampleTally):
    """Direction-gate values g (B,) of every example of a split, and the share read forward
    (g > 0.5); models without a gate give None."""

    def as_dict(self) -> Optional[Dict[str, object]]:
        summary = super().as_dict()
        if summary is not None:
            summary.update(
                forward_share=sum(v > 0.5 for v in self.values) / len(self.values), applies_to=GATE_APPLIES_TO
            )
        return summary


class AttentionPeakTally(PerExampleTally):
    """How sharp the cross-attention is: peak = mean over the output steps of max_i a_ti, the
    largest weight the step puts on one source position (1: every step reads one position;
    1/n: spread evenly over n).  Models whose decoder returns no ``attention`` give None."""


def attention_peaks(attention: Optional[torch.Tensor], target: torch.Tensor, pad: int) -> Optional[torch.Tensor]:
    """The attention peak (B,) of teacher-forced weights ``attention`` (B, T, n + 2) on ``target``
    (B, T): the mean over the target's real steps of each step's largest weight."""
    if attention is None:
        return None
    steps = target.ne(pad).to(attention.dtype)  # (B, T): the target's real steps
    peaks = attention.max(dim=-1).values  # (B, T)
    return (peaks * steps).sum(dim=1) / steps.sum(dim=1)


def teacher_forced_extra(model, sample) -> Dict[str, object]:
    """The decoder's ``extra`` of one teacher-forced pass on each example's own target: the
    gate (``direction``) and the weights (``attention``) both come from this one pass."""
    _, extra = model(**sample["net_input"])
    return extra if isinstance(extra, dict) else {}


def decode_batch(generator, models, sample, pad: int):
    """A batch's greedy outputs, direction gates (B,) or None and attention peaks on the targets
    (B,) or None.

    With the plugin's ``GreedyDecoder``, the gate and the weights come from the decoding itself:
    an output that equals its target (EOS included) was decoded through the teacher-forced steps,
    so its peak is kept from the decoding (the same numbers as the full pass to float rounding,
    as incremental decoding is), and only the other examples get a teacher-forced pass of the
    decoder on their targets, over the encoder output the decoding read.  A decoder that returns
    no weights while decoding returns none in the full pass either (the plugin's decoders give
    the same ``extra`` keys in both).  Other models are decoded by fairseq's generator and take
    one teacher-forced pass for the gate and the weights."""
    model = models[0]
    if not isinstance(generator, GreedyDecoder):
        hypotheses = greedy_hypotheses(generator, models, sample)
        extra = teacher_forced_extra(model, sample)
        return (
            hypotheses,
            direction_of(model, sample, extra),
            attention_peaks(extra.get("attention"), sample["target"], pad),
        )
    net_input = sample["net_input"]
    encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
    decoded = generator.decode(models, sample, encoder_out, attention_peaks=True)
    direction = decoded.direction if decoded.direction is not None else direction_of(model, sample, {})
    peaks = decoded.attention_peaks
    if peaks is not None:
        rows = wrong_rows(decoded.hypotheses, sample["target"], pad)
        if len(rows):
            _, extra = teacher_forced_rows(model, sample, encoder_out, rows)
            peaks = peaks.index_copy(0, rows, attention_peaks(extra["attention"], sample["target"][rows], pad))
    return decoded.hypotheses, direction, peaks


# the scores of the outputs told each target's length, kept as "length_oracle_" + the key
LENGTH_ORACLE_SCORES = ("correct", "accuracy", "per_token_accuracy", "per_token_accuracy_with_eos")


def told_outputs(generator, models, sample, hypotheses, targets, target_dictionary) -> List[List[int]]:
    """Each output of a batch as the decoding gives it when told its target's length (EOS forbidden
    before it and forced at it: the oracle of Newman et al., 2020), from its greedy output
    (``hypotheses``; ``targets`` without padding).

    The oracle changes a greedy output only from the first step where that output chose EOS
    before the target's length: an output that reached the length is the same up to it, so it is
    cut there and given its EOS; only the outputs that ended earlier are decoded again, told their
    lengths, within the same output length limit (a target longer than the limit keeps its greedy
    output, wrong under the oracle too): by the plugin's ``GreedyDecoder`` in one batch, by
    fairseq's generator for other models in one batch per length."""
    eos = target_dictionary.eos()
    src_tokens = sample["net_input"]["src_tokens"]
    limit = output_length_limit(generator, models, src_tokens)
    told = []
    lengths = {}  # the rows decoded again: {row: the target's length}
    for row, (hypothesis, target) in enumerate(zip(hypotheses, targets)):
        wanted, output = len(without_eos(target, eos)), without_eos(hypothesis, eos)
        if len(output) < wanted <= limit:
            lengths[row] = wanted
        told.append(output[:wanted] + [eos] if len(output) >= wanted else list(hypothesis))
    if isinstance(generator, GreedyDecoder):
        groups = [list(lengths)] if lengths else []
    else:
        groups = [[row for row in lengths if lengths[row] == n] for n in sorted(set(lengths.values()))]
    for rows in groups:
        index = torch.tensor(rows, device=src_tokens.device)
        again = {
            "net_input": {key: sample["net_input"][key].index_select(0, index) for key in ("src_tokens", "src_lengths")}
        }
        if isinstance(generator, GreedyDecoder):
            outputs = generator.decode(models, again, output_lengths=index.new_tensor([lengths[r] for r in rows]))
            outputs = outputs.hypotheses
        else:
            outputs = greedy_hypotheses(
                told_length_generator(models, target_dictionary, lengths[rows[0]]), models, again
            )
        for row, output in zip(rows, outputs):
            told[row] = output
    return told


def direction_of(model, sample, extra) -> Optional[torch.Tensor]:
    """The direction gate g (B,) of a batch: the decoder's ``extra["direction"]`` of the pass just
    made (the GRU's and the Transformer's location decoders), else the model's own
    ``direction_gate`` (a model whose decoder does not hand it over), else None (no gate)."""
    if extra.get("direction") is not None:
        return extra["direction"]
    if hasattr(model, "direction_gate"):
        net_input = sample["net_input"]
        return model.direction_gate(net_input["src_tokens"], net_input.get("src_lengths"))
    return None


def score_split(models, task, split: str, batch_size: int = SCORING_BATCH_SIZE, max_output_len=None, progress=None):
    """Greedy decoding of every example of ``split``; returns (Tally, hypotheses by example
    id, the output length limit used, the direction gate's statistics or None, the attention
    peak's statistics or None, the Tally of the outputs told each target's length: told_outputs).

    Nothing is filtered or skipped: batches ignore fairseq's position limits, keep the last
    partial batch, and every example id must come back exactly once.  The output length
    limit (default: twice the split's longest target plus 10 tokens) is the same for every
    example; a hypothesis that reaches it is wrong, and it is what edit distance sees.
    """
    task.load_dataset(split)
    dataset = task.dataset(split)
    if max_output_len is None:
        max_output_len = 2 * int(max(dataset.tgt_sizes)) + 10
    generator = greedy_generator(models, task.target_dictionary, max_len_b=max_output_len)
    with warnings.catch_warnings():  # fairseq asks its loader to pin memory, which only a GPU has
        warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true but no accelerator")
        batches = task.get_batch_iterator(
            dataset=dataset,
            max_sentences=batch_size,
            max_positions=None,
            ignore_invalid_inputs=False,
            required_batch_size_multiple=1,
            seed=1,
            num_workers=0,
        ).next_epoch_itr(shuffle=False)
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    tally, told, gates, peaks, found = Tally(), Tally(), GateTally(), AttentionPeakTally(), {}
    for sample in progress(batches) if progress else batches:
        with torch.no_grad():
            hypotheses, direction, batch_peaks = decode_batch(generator, models, sample, pad)
        gates.add(direction)
        peaks.add(batch_peaks)
        targets = strip_pad_rows(sample["target"], pad)
        tally.add(hypotheses, targets, eos)
        with torch.no_grad():
            told.add(told_outputs(generator, models, sample, hypotheses, targets, task.target_dictionary), targets, eos)
        for example_id, hypothesis in zip(sample["id"].tolist(), hypotheses):
            if example_id in found:
                raise RuntimeError(f"{split}: example {example_id} was decoded twice")
            found[example_id] = hypothesis
    if len(found) != len(dataset):
        missing = sorted(set(range(len(dataset))) - set(found))[:10]
        raise RuntimeError(
            f"{split}: {len(dataset) - len(found)} of {len(dataset)} examples were not decoded (first ids: {missing})"
        )
    return tally, found, max_output_len, gates.as_dict(), peaks.as_dict(), told


def read_checkpoint(checkpoint: Path, arg_overrides: Optional[dict] = None) -> dict:
    """A checkpoint's state as fairseq reads it (with ``arg_overrides``, e.g. another data
    folder); CheckpointError naming the file when it cannot be read (empty, truncated, not a
    checkpoint)."""
    from fairseq import checkpoint_utils

    checkpoint = Path(checkpoint)
    if checkpoint.stat().st_size == 0:
        raise CheckpointError(f"{checkpoint}: empty file, not a checkpoint")
    from .fairseq_compat import UnregisteredArchitecture, check_architecture_registered

    try:
        with reading_fairseq_checkpoints():  # a Transformer's options (checkpoint_classes.py)
            state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint), arg_overrides)
        check_architecture_registered(state, checkpoint)
    except UnregisteredArchitecture as error:  # names the architecture and the package to pass
        raise CheckpointError(str(error)) from None
    except Exception as error:  # torch's unpickler raises many kinds for a damaged file
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"{checkpoint}: cannot read it as a checkpoint ({type(error).__name__}: {first[:200]})"
        ) from None
    if not isinstance(state, dict) or "model" not in state or ("cfg" not in state and "args" not in state):
        raise CheckpointError(f"{checkpoint}: not a fairseq checkpoint (no model and configuration)")
    return state


def score(
    checkpoint,
    data,
    splits,
    out,
    batch_size=SCORING_BATCH_SIZE,
    max_output_len=None,
    predictions=False,
    force=False,
    user_dir=None,
    precision: str = "float64",
):
    """Score ``splits`` of ``checkpoint`` and write ``out`` (JSON; never over an existing file
    unless ``force``).  Returns {split: {size, correct, accuracy, mean_edit_distance, ...}}.
    Every input is checked before decoding starts; nothing is written unless every split is
    scored.  ``precision``: the model's float type while decoding (PRECISIONS)."""
    if precision not in PRECISIONS:
        raise CheckpointError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    from tqdm import tqdm

    logging.getLogger("fairseq").setLevel(logging.WARNING)  # data-loading chatter per split
    out = Path(out)
    check_score_inputs(checkpoint, data, splits, out, force, user_dir)
    out.parent.mkdir(parents=True, exist_ok=True)  # before decoding: the predictions go there split by split
    models, task, _cfg = load_checkpoint(checkpoint, data, user_dir, dtype=PRECISIONS[precision])
    results = {}
    for split in splits:
        start = time.time()

        def bar(batches, split=split):
            return tqdm(
                batches, desc=f"decoding {split}", leave=False, file=sys.stderr, disable=not sys.stderr.isatty()
            )

        tally, hypotheses, limit, gate, peak, told = score_split(
            models, task, split, batch_size, max_output_len, progress=bar
        )
        results[split] = dict(
            tally.as_dict(),
            **{f"length_oracle_{key}": told.as_dict()[key] for key in LENGTH_ORACLE_SCORES},
            max_output_len=limit,
            direction_gate=gate,
            attention_peak=peak,
            seconds=round(time.time() - start, 1),
        )
        if predictions:
            lines = [task.target_dictionary.string(hypotheses[i]) for i in range(len(hypotheses))]
            (out.parent / f"{out.stem}.{split}.txt").write_text("".join(line + "\n" for line in lines))
    write_json_atomic(
        out,
        {
            "checkpoint": str(checkpoint),
            "data": str(data),
            "decoding": "greedy",
            "precision": precision,
            "splits": results,
        },
    )
    return results


def table(scores) -> str:
    """A Markdown table of score()'s results, with the direction gate and the attention peak where
    the model has them."""
    gated = any(s.get("direction_gate") for s in scores.values())
    peaked = any(s.get("attention_peak") for s in scores.values())
    told = any(s.get("length_oracle_accuracy") is not None for s in scores.values())
    rows = [
        "| split | size | accuracy % | mean edit distance | wrong: cut short | wrong: overran |"
        + (" accuracy told the length % |" if told else "")
        + (" direction gate g (mean; forward share) |" if gated else "")
        + (" attention peak (mean) |" if peaked else ""),
        "| --- | ---: | ---: | ---: | ---: | ---: |"
        + (" ---: |" if told else "")
        + (" ---: |" if gated else "")
        + (" ---: |" if peaked else ""),
    ]
    for split, s in scores.items():
        row = (
            f"| {split} | {s['size']} | {s['accuracy']:.2f} | {s['mean_edit_distance']:.2f} "
            f"| {s['cut_short']} | {s['overran']} |"
        )
        if told:
            oracle = s.get("length_oracle_accuracy")
            row += f" {oracle:.2f} |" if oracle is not None else " |"
        if gated:
            gate = s.get("direction_gate")
            row += f" {gate['mean']:.3f}; {100 * gate['forward_share']:.0f}% |" if gate else " |"
        if peaked:
            peak = s.get("attention_peak")
            row += f" {peak['mean']:.3f} |" if peak else " |"
        rows.append(row)
    if gated:
        rows.append(f"\nThe direction gate applies to the {GATE_APPLIES_TO} (g = 1: forward, 0: reversed).")
    rows.append(
        ("" if gated else "\n")  # a blank line ends the table
        + "Cut short: every token right, EOS too early. Overran: the whole target, then more (or no EOS)."
    )
    if told:
        rows.append(
            "Accuracy told the length: exact match when decoding may not end before the target's length and "
            "must end there (Newman et al., 2020)."
        )
    if peaked:
        rows.append(
            "Attention peak: the largest cross-attention weight of each output step on the target, averaged "
            "(1: each step reads one source position)."
        )
    return "\n".join(rows)
