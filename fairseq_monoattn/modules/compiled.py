"""The plugin's C++ kernels (``fairseq_monoattn/csrc``), loaded where they are built.

``setup.py`` builds them as ``fairseq_monoattn._kernels`` where torch can be imported at build time
and a C++ compiler works (``pip install --no-build-isolation --use-pep517 -e .``, ``make install``);
elsewhere the package installs without them. Each computes the same function as the reference
code it stands in for, with fewer operator calls and no Python in its backward pass; the fast
path (``fairseq_monoattn/fast_path.py``) is the one place that calls them and says when:

    packed_gru_forward / packed_gru_backward   the encoder's bidirectional GRU loop (gru.py)
    packing_plan                               where each row and position of a batch goes when
                                               the encoder steps it packed (gru.py)
    gru_step                                   the decoder's GRU update, one node (gru.py)
    softmax_gaussian                           the softmax focus, one node (normalizations.py)
    location_focus                             a step's whole location focus from its heads, one
                                               node (location.py; the built-in entries)
    mixed_focus                                the mix of the content and the location focus,
                                               one node (cross_attention.py)
    step_product, step_read, step_score        the per-step products (step_linear.py), with
    PendingFactors                             the factors their backward passes file (a custom
                                               class torch knows, so a node's context keeps it)
    decoder_loop                               the GRU decoder's whole time loop in training,
                                               one node (models/gru_seq2seq.py; the built-in
                                               content scorer and location entries, one layer)

Each autograd node is a ``torch::autograd::Function``: the C++ uses torch's public extension API
only (torch/extension.h, no internal autograd headers). They take CPU tensors of float32 or float64
(``KINDS``) outside autocast; ``FAIRSEQ_MONOATTN_COMPILED=0`` switches them off for models built
afterwards. Outputs and gradients are the reference's to float rounding (another order of the same
operations, and the C library's exp in the location focus and the mix): tests/test_fast_path_twins.py
names each kernel with the Python code it stands for and compares the two.
"""

import os

import torch

try:
    from .. import _kernels as kernels
except ImportError:  # installed without a compiler, or with build isolation (no torch to build against)
    kernels = None

ENABLED = os.environ.get("FAIRSEQ_MONOATTN_COMPILED", "1") != "0"
KINDS = {("cpu", torch.float32), ("cpu", torch.float64)}


def available() -> bool:
    """Whether the C++ kernels are built and not switched off."""
    return kernels is not None and ENABLED


def in_use() -> str:
    """Which code the models run in this installation: "C++" or "Python"."""
    return "C++" if available() else "Python"


# the line a training's log carries once (GRUDecoder), which a run's record keeps (experiments/runs.py)
TRAINING_CODE_LINE = "decoder training code: "


def describe() -> str:
    """``in_use`` with the reason when it is Python."""
    if kernels is None:
        return "the C++ kernels are not built: Python code"
    return "the C++ kernels" if ENABLED else "the C++ kernels switched off (FAIRSEQ_MONOATTN_COMPILED=0): Python code"


def autocast_on_cpu() -> bool:
    """Whether autocast is on for the CPU (whose precisions the kernels do not take)."""
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()
