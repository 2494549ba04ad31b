"""Let torch >= 2.6 (``torch.load(weights_only=True)`` by default) read fairseq checkpoints.

fairseq 0.12 stores the training configuration in the checkpoint; for models with argparse
options that includes an ``argparse.Namespace``, which the safe unpickler refuses.  We add
exactly the classes a checkpoint of this plugin holds to the allow-list instead of turning
the safety check off (no TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD needed).
"""
import argparse

import torch

SAFE_CLASSES = [argparse.Namespace]


def allow_fairseq_checkpoints():
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 has no allow-list and loads everything
        add(SAFE_CLASSES)


allow_fairseq_checkpoints()
