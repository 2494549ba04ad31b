"""The one class beyond tensors and containers that a fairseq checkpoint of this plugin may hold.

torch >= 2.6 loads checkpoints with ``weights_only=True``.  fairseq stores the training
configuration in the checkpoint, and for a model configured by argparse options (the plugin's
``transformer_*`` presets; fairseq's own ``lstm``) that includes an ``argparse.Namespace``, which
the safe unpickler refuses.  The GRU presets' checkpoints hold none and load as they are.

Importing the plugin allow-lists nothing.  The plugin's own readers (``scoring.read_checkpoint``,
the experiment records) allow the class while they read (:func:`reading_fairseq_checkpoints`);
the plugin's task allows it for the whole process (:func:`allow_fairseq_checkpoints`), since
fairseq-generate and a resumed fairseq-train read the checkpoint with fairseq's own loader after
the task is set up.  Exactly that class is allowed; the safety check itself stays on (no
TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD needed).
"""

import argparse
import contextlib

import torch

SAFE_CLASSES = [argparse.Namespace]


def allow_fairseq_checkpoints() -> None:
    """Allow :data:`SAFE_CLASSES` in every weights_only load of this process (older torch has no
    allow-list and loads everything)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(SAFE_CLASSES)


def reading_fairseq_checkpoints():
    """A ``with`` block inside which weights_only loads accept :data:`SAFE_CLASSES`; the
    allow-list is as before once it ends."""
    scoped = getattr(torch.serialization, "safe_globals", None)
    return scoped(SAFE_CLASSES) if scoped is not None else contextlib.nullcontext()
