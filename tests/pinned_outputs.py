"""The function of every preset (and of a few other option combinations), pinned on one fixed
batch so that refactoring and speed work cannot change it unnoticed.

For each configuration the model is built in float64 from a fixed seed (so the order in which
parameters draw their initial values is pinned too: a seed must keep giving the same run), then
evaluated twice in float64. Built in float64, not built in float32 and cast: torch draws float32
normal and uniform values on the CPU's vector path, whose rounding differs between CPUs (AVX-512,
AVX2, none) by an ulp of float32, 1e-7 relative, far above the pins' tolerance; in float64 the
draws differ by float64 rounding only, so the pins hold on any x86-64 CPU.

* ``init``: as built; teacher-forced log-probabilities of the gold tokens, the expected source
  position of every step's attention, the direction gate; the gradient of the summed negative
  log-likelihood, per parameter (in creation order) as (norm, projection on a fixed random
  direction).
* ``perturbed``: every parameter moved by seeded noise (in creation order) and the mono gate
  set into its sensitive range, so that branches the initialisation leaves flat (a saturated
  gate, a zero bias) shape the numbers too.

The Transformer presets are pinned the same way, with fairseq's ``utils.softmax`` and
``utils.log_softmax`` computing in float64 while they are evaluated (fairseq computes them in
float32 whatever the input's type, which would leave float32 rounding in float64 pins); their
attention is fairseq's alignment (``extra["attn"]``, the location weights of a location layer).

Values are keyed by the parameters' creation order, not their names: a renamed parameter
changes ``parameter_names`` only (and checkpoints need the old name mapped on loading).

    python tests/pinned_outputs.py --write     # regenerate tests/fixtures/pinned_outputs.json

Regenerate only for a change that is meant to change a function, and say so in the commit.
"""

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

import torch
from fairseq import utils as fairseq_utils
from fairseq.modules import FairseqDropout, SinusoidalPositionalEmbedding

from fairseq_monoattn.testing import batch, build, digit_dictionary

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "pinned_outputs.json"

D = digit_dictionary()
SOURCES = [list("314"), list("2718281"), list("141421356237"), list("57721566490153286060")]
TARGETS = [s[::-1] + s[:2] for s in SOURCES]  # lengths differ from the sources'

# (name, arch, option overrides): every preset, and combinations the presets do not cover
EXTRA = [
    ("base", "gru_seq2seq", {}),
    ("onestep-sum", "gru_onestep", {"location_normalization": "sum"}),
    ("onestep-direct-heads", "gru_onestep", {"location_projection": False, "linear_init": "pytorch"}),
    ("locattn-per-head-pytorch", "gru_locattn", {"location_head_init": "per-head", "linear_init": "pytorch"}),
    ("mono-trainable-gate", "gru_monoattn", {"mono_gate_init": 0.0}),
    (
        "mix-relative-gated",
        "gru_mix_onestep",
        {"attention_scoring": "relative", "reference": "gated", "mix_temperature": 5.0},
    ),
    ("mix-rotary-pr", "gru_mix_monoattn_pr", {"attention_scoring": "rotary"}),
    (
        "two-layers-shared",
        "gru_mix_locattn_s",
        {
            "encoder_layers": 2,
            "decoder_layers": 2,
            "share_all_embeddings": True,
            "source_eos": True,
            "embedding_init": "scaled-normal",
            "boundary_init": "normal",
        },
    ),
    (
        "release-conventions",
        "gru_mix_locattn_s",
        {
            "decoder_start": "bos",
            "attention_query_bias": False,
            "value_path": "two",
            "location_normalization": "sum-per-column",
        },
    ),
    (
        "wider-decoder",
        "gru_content",
        {
            "decoder_hidden_size": 96,
            "attention_dim": 48,
            "decoder_dropout": 0.3,
            "share_decoder_input_output_embed": False,
        },
    ),
]


# Transformer combinations the presets do not cover
TRANSFORMER_EXTRA = [
    (
        "transformer-shared-gated-mix",
        "transformer_mix_onestep",
        {"location_layers": "shared", "direction_temperature": 50.0},
    ),
    (
        "transformer-all-dwell-keep-end",
        "transformer_monoattn",
        {"location_layers": "all", "dwell_count": True, "dwell_init": -0.5, "direction_gate_keep_end": True},
    ),
    (
        "transformer-window-hard-gate",
        "transformer_onestep",
        {"decoder_self_attention_window": 3, "direction_gate_hard": True},
    ),
]


def configurations():
    from fairseq_monoattn.models.presets import PRESETS
    from fairseq_monoattn.models.transformer_monoattn import TRANSFORMER_PRESETS

    return [(name, name, {}) for name in [*PRESETS, *TRANSFORMER_PRESETS]] + EXTRA + TRANSFORMER_EXTRA


@contextlib.contextmanager
def softmax_in_input_precision():
    """fairseq's utils.softmax / log_softmax in the input's dtype (they compute in float32)."""
    saved = fairseq_utils.softmax, fairseq_utils.log_softmax
    fairseq_utils.softmax = lambda x, dim, onnx_trace=False: torch.softmax(x, dim=dim)
    fairseq_utils.log_softmax = lambda x, dim, onnx_trace=False: torch.log_softmax(x, dim=dim)
    try:
        yield
    finally:
        fairseq_utils.softmax, fairseq_utils.log_softmax = saved


def _round(values):
    return [float(v) for v in values]


def evaluate(model, sample):
    """Log-probabilities of the gold tokens (B, T), attention's expected position (B, T), gate
    (B,) or None, and per parameter (grad norm, grad . fixed direction)."""
    model.zero_grad()
    logits, extra = model(**sample["net_input"])
    lprobs = model.get_normalized_probs((logits, None), log_probs=True)
    target = sample["target"]
    gold = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(target.eq(D.pad()), 0.0)
    (-gold.sum()).backward()
    attention = extra["attention"] if "attention" in extra else extra["attn"][0]
    expected_position = (attention * torch.arange(attention.size(-1), dtype=attention.dtype)).sum(-1)
    generator = torch.Generator().manual_seed(123)
    gradients = []
    for parameter in model.parameters():
        direction = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
        grad = parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
        gradients.append([float(grad.norm()), float((grad * direction).sum())])
    direction = extra.get("direction")
    return {
        "gold_log_probs": [_round(row) for row in gold.detach()],
        "expected_position": [_round(row) for row in expected_position.detach()],
        "direction_gate": None if direction is None else _round(direction.detach()),
        "gradients": gradients,
    }


def perturb(model):
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
            if parameter.dim() == 0:  # Mono's gate logit, the one scalar parameter
                parameter.fill_(0.4)  # s = sigmoid(0.4): both parts of Mono's step count


def sinusoids_in_float64(model):
    """fairseq's sinusoidal position table, computed in float32 and cast, recomputed in float64:
    sin(p w_i) and cos(p w_i) with w_i = 10000^(-i / (d/2 - 1)), row padding_idx zero."""
    for module in model.modules():
        if isinstance(module, SinusoidalPositionalEmbedding):
            rows, dim = module.weights.shape
            half = dim // 2
            frequencies = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(10000) / (half - 1)))
            angles = torch.arange(rows, dtype=torch.float64).unsqueeze(1) * frequencies.unsqueeze(0)
            table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
            table[module.padding_idx] = 0
            assert table.shape == module.weights.shape  # even dimension
            module.weights = table


@contextlib.contextmanager
def float64_parameters():
    """Modules built inside create (and draw) their parameters in float64."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def pinned(arch, overrides):
    with float64_parameters():
        model = build(arch, D, seed=11, **overrides)
    model = model.double()  # buffers made in an explicit float32 too
    sinusoids_in_float64(model)
    model.train()  # dropout off below, but the training-time code path
    for module in model.modules():
        if isinstance(module, (torch.nn.Dropout, FairseqDropout)):
            module.p = 0.0
    sample = batch(D, SOURCES, TARGETS)
    with softmax_in_input_precision():
        result = {"init": evaluate(model, sample)}
        perturb(model)
        result["perturbed"] = evaluate(model, sample)
    result["parameter_names"] = [name for name, _ in model.named_parameters()]  # in creation order
    return result


def compute_all():
    torch.set_default_dtype(torch.float32)
    return {name: pinned(arch, overrides) for name, arch, overrides in configurations()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write {FIXTURE}")
    args = parser.parse_args(argv)
    values = compute_all()
    if args.write:
        FIXTURE.write_text(json.dumps(values, indent=0, sort_keys=True) + "\n")
        print(f"wrote {FIXTURE} ({len(values)} configurations)")
    else:
        json.dump(values, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
