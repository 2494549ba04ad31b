"""Warnings, each logged once per model name, when a model is trained in a way known to break
the paper's results (docs/results/training-settings.md has the runs behind each).

The models themselves say when a location preset is trained on sorted batches
(:func:`note_sorted_batches`), whichever task built them: fairseq's tasks (``translation``, any
other) always make batches of examples of similar length, and the plugin's
``length_generalization`` task does with ``--train-batches sorted``.  The note is logged at the
model's first forward pass in training mode, so a checkpoint loaded for generation or scoring
never logs it.  The task's own notes (``warn_about_training``) go through :func:`warn_once` too."""

import logging
from typing import Optional

logger = logging.getLogger(__name__)

WARNED = set()


def warn_once(name: str, note: str) -> None:
    """Log ``name: note`` as a warning, the first time only."""
    if (name, note) not in WARNED:
        WARNED.add((name, note))
        logger.warning(f"{name}: {note}")


SORTED_BATCHES_HURT = (
    "sorted batches broke MonoAttn on Inv ReCopy in the paper's recipe (median 40.9 / 0.1 / 0 at 15 / 30 / 100 "
    "after 4 epochs, against 94.2 / 66.5 / 6.7 with random batches)"
)


def draws_random_batches(task) -> bool:
    """Whether ``task`` trains on new random batches of mixed lengths every epoch: the plugin's
    task says so (``random_training_batches``); fairseq's tasks sort the examples by length."""
    return bool(getattr(task, "random_training_batches", False))


def sorted_batches_note(cfg, task) -> Optional[str]:
    """What to tell a user who trains a location preset (``cfg.location_attention``) with
    ``task``'s sorted batches; None when it does not apply."""
    if not getattr(cfg, "location_attention", False) or draws_random_batches(task):
        return None
    if hasattr(task, "random_training_batches"):  # the plugin's task, with --train-batches sorted
        return f"{SORTED_BATCHES_HURT}: add --train-batches random"
    name = getattr(getattr(task, "cfg", None), "_name", None) or type(task).__name__
    return (
        f"the {name} task makes batches of examples of similar length (fairseq's tasks sort them by length and "
        f"have no option for mixed lengths), and {SORTED_BATCHES_HURT}: for length generalisation train with "
        f"--task length_generalization (the translation task's data and options, new random batches every epoch "
        f"by default) and select checkpoints with --eval-accuracy --best-checkpoint-metric accuracy "
        f"--maximize-best-checkpoint-metric"
    )


def model_name(cfg) -> str:
    return getattr(cfg, "_name", None) or getattr(cfg, "arch", None) or "the model"


def note_sorted_batches(model, cfg, task) -> None:
    """Have ``model`` (built from ``cfg`` for ``task``) log :func:`sorted_batches_note` once, at its
    first forward pass in training mode."""
    model.sorted_batches_note = sorted_batches_note(cfg, task)
    model.sorted_batches_name = model_name(cfg)
    if model.sorted_batches_note:
        model.register_forward_pre_hook(_note_in_training)


def _note_in_training(model, args) -> None:
    if model.training and model.sorted_batches_note:
        warn_once(model.sorted_batches_name, model.sorted_batches_note)
        model.sorted_batches_note = None
