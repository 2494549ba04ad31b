"""The paper's training recipe as fairseq-train options.

    fairseq-train DATA/bin --user-dir fairseq_monoattn --arch gru_onestep \\
        $(python -c "from fairseq_monoattn.recipes import PAPER_RECIPE; print(' '.join(PAPER_RECIPE))") \\
        --save-dir CHECKPOINTS --seed 1

Adam, lr 1e-3, no weight decay, gradient norm clipped at 5, 32 examples per batch drawn anew
at random every epoch (``--train-batches random``, as the authors' DataLoader; fairseq's own
batches group similar lengths and keep their contents); the lr is halved on the fifth epoch
without improvement of greedy valid accuracy (the release's ReduceLROnPlateau(patience=4);
the paper's text says "four contiguous epochs"); at most 100 epochs, early stop after 50
without improvement; checkpoint_best.pt is the epoch with the best greedy valid accuracy.
Batches are exactly 32 examples (no rounding to multiples of 8) and no example is skipped:
do not add ``--skip-invalid-size-inputs-valid-test``.  Validation decodes 256 examples at a
time (``--batch-size-valid``): the model is padding-invariant, so this changes no number,
only the time.  So does ``--num-workers 0``: the batches of digit strings are made in the
training process, not handed over from a data-loading process.

Recipes by name (``recipe_options``): ``paper``; ``paper-teacher-forced`` (the release's
checkpoint selection); ``paper-cfq`` (the paper's CFQ setup: its model size and batches of 128).
"""

from dataclasses import dataclass
from typing import Dict, List, Mapping, Union

# The length_generalization task's own defaults for the options that change training (the task's
# dataclass reads them from here, so that a command's training can be planned without fairseq).
# "random" batches are the paper's (the authors' DataLoader); fairseq's "sorted" ones break MonoAttn.
TASK_DEFAULTS: Dict[str, Union[str, int]] = {"train_batches": "random", "stop_after_perfect": 0}

OPTIMIZATION = [
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--weight-decay",
    "0",
    "--clip-norm",
    "5",
    "--batch-size",
    "32",
    "--required-batch-size-multiple",
    "1",
    "--batch-size-valid",
    "256",
    "--train-batches",
    "random",
    # batches made in the training process itself: a separate data-loading process (fairseq's
    # default, one per epoch and split) costs about 6 % of a CPU epoch and changes no number
    "--num-workers",
    "0",
]
SCHEDULE = [
    "--lr-scheduler",
    "reduce_lr_on_plateau",
    "--lr-shrink",
    "0.5",
    "--lr-patience",
    "4",
    "--max-epoch",
    "100",
    "--patience",
    "50",
]
SELECTION = [
    "--task",
    "length_generalization",
    "--criterion",
    "seq_acc",
    "--eval-accuracy",
    "--best-checkpoint-metric",
    "accuracy",
    "--maximize-best-checkpoint-metric",
]
PAPER_RECIPE: List[str] = OPTIMIZATION + SCHEDULE + SELECTION

# The selector of the authors' release: teacher-forced exact match from the criterion, no decoding.
TEACHER_FORCED_SELECTION: List[str] = [
    "--task",
    "length_generalization",
    "--criterion",
    "seq_acc",
    "--best-checkpoint-metric",
    "exact_match",
    "--maximize-best-checkpoint-metric",
]
PAPER_RECIPE_TEACHER_FORCED: List[str] = OPTIMIZATION + SCHEDULE + TEACHER_FORCED_SELECTION

# The paper's CFQ setup: "two layered GRUs for the encoder/decoder and twice the hidden size /
# embedding size" (embeddings 128, d = 256: 128 per encoder direction), dropout 0.4 on the
# encodings and batches of 128 (the release's CFQ configuration).  The model size rides with the
# recipe because the paper gives it for the dataset, not for a model: every preset takes it.
CFQ_MODEL_SIZE: List[str] = [
    "--encoder-embed-dim",
    "128",
    "--decoder-embed-dim",
    "128",
    "--encoder-hidden-size",
    "128",
    "--encoder-layers",
    "2",
    "--dropout",
    "0.4",
]


def with_value(options: List[str], option: str, value) -> List[str]:
    """A copy of ``options`` with another value for ``option`` (which it must hold)."""
    options = list(options)
    options[options.index(option) + 1] = str(value)
    return options


PAPER_RECIPE_CFQ: List[str] = with_value(PAPER_RECIPE, "--batch-size", 128) + CFQ_MODEL_SIZE

RECIPES = {"paper": PAPER_RECIPE, "paper-teacher-forced": PAPER_RECIPE_TEACHER_FORCED, "paper-cfq": PAPER_RECIPE_CFQ}


@dataclass(frozen=True)
class DatasetOptions:
    """Model options a probing task's data calls for, whatever the preset and the recipe, and why."""

    options: Dict[str, object]
    reason: str


# The runner gives them to every model that has them (after the recipe, before a variant's own
# options, so a variant can undo them) and records them; the task warns a plain fairseq-train of
# a preset on the prepared data without them.
DATASET_OPTIONS: Dict[str, DatasetOptions] = {
    # of the probing tasks, only the authors' DeDupe data keeps the source's end-of-sequence
    # token, so the GRU encoder keeps fairseq's source </s> there (fairseq's Transformer always does)
    "dedupe": DatasetOptions({"source_eos": True}, "the authors' DeDupe sources end in an end-of-sequence token"),
}


def option_words(options: Mapping[str, object]) -> List[str]:
    """Model options {name: value} as fairseq-train words: ``--name-with-dashes value`` each."""
    return [word for name, value in options.items() for word in ("--" + name.replace("_", "-"), str(value))]


def dataset_options(task: str, model_fields=None) -> List[str]:
    """:data:`DATASET_OPTIONS` of ``task`` as fairseq-train options, those of them a model with
    the options ``model_fields`` has (all of them if None)."""
    wanted = DATASET_OPTIONS[task].options if task in DATASET_OPTIONS else {}
    return option_words({k: v for k, v in wanted.items() if model_fields is None or k in model_fields})


def recipe_options(name: str = "paper", max_epoch: int = None, stop_after_perfect: int = 0) -> List[str]:
    """A named recipe's options, with another epoch budget and the early stop at perfect greedy
    valid accuracy (``--stop-after-perfect K``, 0 = off) if asked for."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    options = list(RECIPES[name]) if max_epoch is None else with_value(RECIPES[name], "--max-epoch", max_epoch)
    if stop_after_perfect:
        options += ["--stop-after-perfect", str(stop_after_perfect)]
    return options
