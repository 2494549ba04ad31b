"""Fixes to fairseq 0.12 for the plugin's experiments, applied where a user chose the plugin.

Importing the plugin (``--user-dir``) changes none of them: it registers the plugin's models,
architectures, task, criterion and optimizer, nothing else, so fairseq's own tasks and models run
as stock fairseq beside it.  :func:`apply_fixes` applies them all; it runs when the plugin's task
is set up (``LengthGeneralizationTask.setup_task``: fairseq-train, fairseq-generate and the
plugin's own loaders with ``--task length_generalization``) and in the plugin's commands that
decode checkpoints (fairseq-monoattn-score, fairseq-monoattn-plot-attention).  fairseq's trainer,
training loop and checkpoint code look the functions of items 2-8 up globally, so they are
replaced in fairseq's modules, and like items 1 they hold for the rest of the process once
applied, for every task in it.  Each keeps fairseq's results (the tests compare them with
fairseq's own functions):

1. Checkpoints of argparse-configured models load with torch's ``weights_only=True``
   (``checkpoint_classes.py``), the plugin's errors are printed as one line (``errors.py``), and
   glibc keeps freed memory for the next update (``allocator.py``).

2. ``fairseq.data.data_utils.batch_by_size`` silently drops the last batch when its size is
   not a multiple of ``--required-batch-size-multiple`` (default 8): up to 7 validation or
   test examples vanish (fairseq issue #5036).  fairseq's main branch does this since commit
   d871f616 (2022-12-12, "data2vec v2.0"), so fairseq-fixed 0.12.3.1 (what this project
   installs on Python >= 3.11) does; the fairseq 0.12.2 and 0.12.3 releases do not.  Exact-match
   accuracy must count every example, so where the installed fairseq drops the batch (found
   by trying it, not by its version string) the remainder is kept as one more batch.

3. ``--log-file``: every progress bar (one per epoch and per validation) adds another file
   handler for the same file, so the n-th epoch's lines are written n times.  One handler
   per file is kept.

4. fairseq's trainer reseeds torch before every update (``utils.set_torch_seed``).  Where torch
   has no device but the CPU, ``torch.manual_seed`` still queues the seed for CUDA and XPU,
   recording the caller's Python stack each time, a cost at every update inside fairseq-train,
   where seeding the CPU generator is almost free.  On such a machine the CPU generator
   alone is seeded: the same generator state, so the same runs bit for bit.

5. fairseq writes a checkpoint's first file atomically (a temporary file, then a rename), but
   makes the others (``checkpoint_last.pt`` after ``checkpoint_best.pt``) by copying over them
   in place: a run killed during that copy leaves a truncated ``checkpoint_last.pt``, and the
   run cannot resume.  Local copies go to a temporary file beside the destination and are
   renamed over it, so the destination is always the old file or the new one.

6. fairseq's gradient clipping (``--clip-norm``, ``utils.clip_grad_norm_``) takes the norm of
   each gradient in a Python loop, a call a parameter, where ``torch._foreach_norm`` takes the
   same per-tensor norms (so the same total norm to float rounding) in one call.
   Gradients on the CPU take the ``_foreach`` path; elsewhere fairseq's own code runs.

7. A model configured by argparse options alone (fairseq's legacy Transformer, so this plugin's
   ``transformer_location`` presets) has its configuration in the checkpoint as an
   ``argparse.Namespace``: a process without this plugin (fairseq's
   ``scripts/average_checkpoints.py``) loads it with torch's ``weights_only=True`` and is refused.
   Once one of the plugin's Transformers is built (``TransformerMonoAttnModel.build_model`` applies
   this fix, whatever the task), the trainer's checkpoints of this plugin's models store it as a
   plain dict instead, as the GRU model's dataclass configuration is stored (``build_model`` reads
   the dict back); the checkpoints of every other model are left as fairseq writes them.

8. A checkpoint of a preset or model that a user's package registers, loaded without that package
   (no --user-dir, or another), fails inside fairseq's model lookup with a KeyError "'_name'" (its
   error message cannot print the model config).  fairseq records the package the checkpoint was
   trained with (cfg.common.user_dir): a checkpoint of this plugin's models (its configuration
   has the plugin's model options) whose architecture nothing registers is refused as it is read,
   naming the architecture and the package to pass (fairseq-monoattn-score and -plot-attention
   check every checkpoint they read; fairseq-generate once the plugin's task is set up, since a
   process that loads no package of the checkpoint's never runs the plugin's code).  Other
   checkpoints load as fairseq loads them.
"""

import argparse
import functools
import logging
import os
import shutil
from typing import Mapping

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq import utils as fairseq_utils
from fairseq.data import data_utils
from fairseq.file_io import PathManager
from fairseq.logging import progress_bar

from .allocator import keep_freed_memory
from .checkpoint_classes import allow_fairseq_checkpoints
from .errors import PluginError, install_excepthook
from .files import atomic_output

logger = logging.getLogger(__name__)


def drops_last_batch(batch_by_size) -> bool:
    """Whether ``batch_by_size`` loses examples when the last batch is not a multiple of
    required_batch_size_multiple (10 examples, batches of at most 8, multiple 8)."""
    batches = batch_by_size(
        np.arange(10, dtype=np.int64),
        None,
        num_tokens_vec=np.ones(10, dtype=np.int64),
        max_sentences=8,
        required_batch_size_multiple=8,
    )
    return sum(len(b) for b in batches) < 10


def keep_last_batch():
    original = data_utils.batch_by_size
    if getattr(original, "keeps_last_batch", False) or not drops_last_batch(original):
        return

    @functools.wraps(original)
    def batch_by_size(
        indices,
        num_tokens_fn,
        num_tokens_vec=None,
        max_tokens=None,
        max_sentences=None,
        required_batch_size_multiple=1,
        fixed_shapes=None,
    ):
        batches = original(
            indices,
            num_tokens_fn,
            num_tokens_vec,
            max_tokens,
            max_sentences,
            required_batch_size_multiple,
            fixed_shapes,
        )
        indices = np.asarray(indices, dtype=np.int64)
        batched = sum(len(b) for b in batches)
        if fixed_shapes is None and batched < len(indices):
            covered = np.concatenate(batches) if batches else np.empty(0, dtype=np.int64)
            remainder = indices[~np.isin(indices, covered)]
            if len(remainder):
                batches = list(batches) + [remainder]
        return batches

    batch_by_size.keeps_last_batch = True
    data_utils.batch_by_size = batch_by_size


def one_log_file_handler():
    original = progress_bar.progress_bar
    if getattr(original, "one_handler_per_file", False):
        return

    @functools.wraps(original)
    def progress_bar_once(*args, log_file=None, **kwargs):
        if log_file is not None:
            path = os.path.abspath(log_file)
            if any(getattr(h, "baseFilename", None) == path for h in progress_bar.logger.handlers):
                log_file = None  # this file already receives the progress lines
        return original(*args, log_file=log_file, **kwargs)

    progress_bar_once.one_handler_per_file = True
    progress_bar.progress_bar = progress_bar_once


def cpu_only() -> bool:
    """Whether the CPU is the only device torch (and fairseq) could seed here: no accelerator
    (CUDA, XPU, MPS or another backend) and no XLA.  False where torch cannot tell."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or getattr(fairseq_utils, "xm", None) is not None:
        return False
    return accelerator.current_accelerator() is None and not torch.cuda.is_available()


def seed_the_cpu_alone():
    original = fairseq_utils.set_torch_seed
    if getattr(original, "cpu_alone", False) or not cpu_only():
        return

    class set_torch_seed(original):
        """fairseq's set_torch_seed (the generator state saved for ``with``, then the seed) for
        the CPU generator alone, the only one there is."""

        cpu_alone = True

        def __init__(self, seed):
            assert isinstance(seed, int)
            self.rng_state = fairseq_utils.get_rng_state()
            torch.default_generator.manual_seed(seed)

    fairseq_utils.set_torch_seed = set_torch_seed


def atomic_checkpoint_copies():
    original = PathManager.copy
    if getattr(original, "atomic", False):
        return

    def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        """fairseq's ``PathManager.copy``; a local destination is written whole or not at all."""
        if PathManager.path_requires_pathmanager(dst_path) or (os.path.exists(dst_path) and not overwrite):
            return original(src_path, dst_path, overwrite=overwrite)
        with atomic_output(dst_path) as partial:
            shutil.copyfile(src_path, partial)
        return True

    copy.atomic = True
    PathManager.copy = staticmethod(copy)


def foreach_grad_norm():
    original = fairseq_utils.clip_grad_norm_
    if getattr(original, "foreach", False):
        return

    @functools.wraps(original)
    def clip_grad_norm_(params, max_norm, aggregate_norm_fn=None) -> torch.Tensor:
        """fairseq's ``clip_grad_norm_``: the total norm of the gradients, which are scaled
        down to ``max_norm`` when it is larger; per-tensor norms taken in one call on the CPU."""
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        grads = [p.grad.detach() for p in params if p is not None and getattr(p, "grad", None) is not None]
        if len(grads) < 2 or any(hasattr(p, "expert") for p in params):
            return original(params, max_norm, aggregate_norm_fn)
        if any(g.device.type != "cpu" or g.dtype != torch.float32 or g.is_sparse for g in grads):
            return original(params, max_norm, aggregate_norm_fn)
        # ||g|| = sqrt(sum_i ||g_i||^2), as fairseq stacks the per-tensor norms
        total_norm = torch.norm(torch.stack(torch._foreach_norm(grads)))
        if aggregate_norm_fn is not None:
            total_norm = aggregate_norm_fn(total_norm)
        if max_norm > 0:
            clip_coef = (float(max_norm) / (total_norm + 1e-6)).clamp_(max=1)
            torch._foreach_mul_(grads, clip_coef)
        return total_norm

    clip_grad_norm_.foreach = True
    fairseq_utils.clip_grad_norm_ = clip_grad_norm_


def plugin_architecture(model_cfg) -> bool:
    """Whether a model configuration names an architecture of this plugin."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
    model = ARCH_MODEL_REGISTRY.get(arch) if isinstance(arch, str) else None
    return model is not None and model.__module__.startswith(__package__ + ".")


def plain_model_config_in_checkpoints():
    from fairseq.trainer import Trainer

    original = Trainer.state_dict
    if getattr(original, "plain_model_config", False):
        return

    @functools.wraps(original)
    def state_dict(self):
        """fairseq's checkpoint state; a Namespace configuring one of this plugin's models as a dict."""
        state = original(self)
        cfg = state.get("cfg")
        model = cfg.get("model") if isinstance(cfg, dict) else None
        if isinstance(model, argparse.Namespace) and plugin_architecture(model):
            state["cfg"] = dict(cfg, model=dict(vars(model)))
        return state

    state_dict.plain_model_config = True
    Trainer.state_dict = state_dict


# options every model of this plugin records in its checkpoints (GRU and Transformer alike)
PLUGIN_MODEL_OPTIONS = ("location_attention", "attention_scoring", "step_activation")


class UnregisteredArchitecture(PluginError, KeyError):
    """A checkpoint of this plugin's models whose architecture no imported package registers."""

    def __str__(self):
        return str(self.args[0])


def _field(section, name):
    return section.get(name) if isinstance(section, Mapping) else getattr(section, name, None)


def check_architecture_registered(state, path) -> None:
    """UnregisteredArchitecture naming ``path``'s architecture and the package (cfg.common.user_dir)
    that registered it, where the checkpoint is one of this plugin's models and its architecture is
    not registered now; any other checkpoint passes."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    cfg = state.get("cfg") if isinstance(state, Mapping) else None
    if cfg is None and isinstance(state, Mapping):  # older checkpoints: one Namespace of every option
        cfg = {"model": state.get("args"), "common": state.get("args")}
    model = _field(cfg, "model") if cfg is not None else None
    if model is None or not all(_field(model, key) is not None for key in PLUGIN_MODEL_OPTIONS):
        return
    arch = _field(model, "arch") or _field(model, "_name")
    if not isinstance(arch, str) or arch in ARCH_MODEL_REGISTRY or arch in MODEL_REGISTRY:
        return
    user_dir = _field(_field(cfg, "common"), "user_dir")
    if user_dir and os.path.realpath(user_dir) != os.path.dirname(os.path.realpath(__file__)):
        where = f"from the package {user_dir} (cfg.common.user_dir): pass --user-dir {user_dir}"
    else:
        where = "that no package imported here registers (the checkpoint names no --user-dir of its own)"
    raise UnregisteredArchitecture(f"{path} was trained with --arch {arch}, {where}")


def name_unregistered_architectures():
    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "names_architecture", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        state = original(path, *args, **kwargs)
        check_architecture_registered(state, path)
        return state

    load_checkpoint_to_cpu.names_architecture = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu


def apply_fixes() -> None:
    """Apply every fix of the module docstring to this process (idempotent)."""
    install_excepthook()
    keep_freed_memory()
    allow_fairseq_checkpoints()
    name_unregistered_architectures()
    atomic_checkpoint_copies()
    foreach_grad_norm()
    keep_last_batch()
    one_log_file_handler()
    seed_the_cpu_alone()
