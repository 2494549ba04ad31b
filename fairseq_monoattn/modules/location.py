"""Location attention: a Gaussian focus over normalised source positions.

For decoder step t with location features l (a linear map of the query state h_{t-1}):

    steps_t = act(rho_t),   rho_t = f_step(l)       act: see STEP_ACTIVATIONS
    mu_t    = ref_t + steps_t / max(1, L - 1)       one step = one source position
    mu_t    = clamp(mu_t)                           optional leaky clamp to [0, 1]
    sigma_t = (ReLU(f_sigma(l)) + sigma_min) / L
    g_ti    = exp( -(norm(i) - mu_t)^2 / (2 sigma_t^2) )              over real positions i
    lambda_ti = g_ti / sum_j g_tj                   (NORMALIZATIONS: how the sum is taken)

The reference position ref_t is one of
    "previous":     ref_t = pa_{t-1}                     (OneStep, Mono, RMono)
    "gated":        ref_t = gate_t * pa_{t-1} + bias_t   (LocAttn)
    "initial-bias": ref_1 = bias_1, ref_t = pa_{t-1}     (LocAttn S)
with gate_t = sigmoid(f_gate(l)), bias_t = sigmoid(f_bias(l)) and pa_{t-1} the previously
attended position (pa_0 = 0, the START position).
"""
from typing import NamedTuple, Optional

import torch
from torch import nn
import torch.nn.functional as F

from .choices import check_choice
from .positions import normalized_positions

REFERENCES = ("previous", "gated", "initial-bias")
STEP_ACTIVATIONS = ("sigmoid", "mono", "relu", "softstair", "none")
# "softmax": lambda = softmax of the log-Gaussian over real positions; the focus always lands on
#            the nearest real position, however far mu is past the end.
# "sum":     lambda = g / (sum g + 1e-20), as the authors' release computes it; when mu is so far
#            past every real position that every g underflows to 0, lambda is all zeros (no
#            context, and the next reference position pa_t = 0 is START again).
NORMALIZATIONS = ("softmax", "sum")
SUM_EPSILON = 1e-20


def softstair(x: torch.Tensor, temperature: float) -> torch.Tensor:
    """softstair(x) = floor(x) + sigmoid(tau * (x - floor(x) - 0.5)): pushes x to an integer."""
    floor = torch.floor(x)
    return floor + torch.sigmoid(temperature * (x - floor - 0.5))


def leaky_clamp(x: torch.Tensor, slope: float) -> torch.Tensor:
    """clamp(mu) = max(0 + m mu, min(1 + m mu, mu)): [0, 1] with a leaky slope m outside."""
    return torch.maximum(slope * x, torch.minimum(1 + slope * x, x))


class LocationHeads(NamedTuple):
    """The scalar logits a step reads off the location features, one (B,) tensor each."""
    step: torch.Tensor  # rho_t, before the step activation
    width: torch.Tensor  # f_sigma, before ReLU
    bias: Optional[torch.Tensor] = None  # f_bias ("gated", "initial-bias")
    gate: Optional[torch.Tensor] = None  # f_gate ("gated")


class LocationAttention(nn.Module):
    """The Gaussian focus.  It owns no projection of h: the caller reads the ``num_heads``
    logits [step, width, (bias), (gate)] off h and passes them in as one (B, num_heads)
    tensor (see cross_attention.py, which shares one matmul of h between all its parts)."""

    def __init__(self, cfg):
        """cfg: the model's config (reference, step_activation, clamp_center, sigma_min,
        step_temperature, softstair_temperature, clamp_slope, mono_gate_init,
        location_normalization)."""
        super().__init__()
        check_choice("reference", cfg.reference, REFERENCES)
        check_choice("step-activation", cfg.step_activation, STEP_ACTIVATIONS)
        check_choice("location-normalization", cfg.location_normalization, NORMALIZATIONS)
        reference = self.reference = str(cfg.reference)
        step_activation = self.step_activation = str(cfg.step_activation)
        self.clamp_center = cfg.clamp_center
        self.sigma_min = cfg.sigma_min
        self.step_temperature = cfg.step_temperature
        self.softstair_temperature = cfg.softstair_temperature
        self.clamp_slope = cfg.clamp_slope
        self.normalization = str(cfg.location_normalization)
        mono_gate_init = cfg.mono_gate_init
        self.head_names = ("step", "width") + {"previous": (), "initial-bias": ("bias",),
                                               "gated": ("bias", "gate")}[reference]
        if step_activation == "mono":
            # Mono: steps = s * ReLU(rho) + (1 - s) * sigmoid(T rho), s = sigmoid(p), p learned.
            self.mono_gate_logit = nn.Parameter(torch.tensor(float(mono_gate_init)))

    @property
    def num_heads(self) -> int:
        return len(self.head_names)

    def split_heads(self, logits: torch.Tensor) -> LocationHeads:
        """(B, num_heads) logits -> named heads."""
        return LocationHeads(**dict(zip(self.head_names, logits.unbind(1))))

    def activate(self, rho: torch.Tensor) -> torch.Tensor:
        kind = self.step_activation
        if kind == "sigmoid":
            return torch.sigmoid(self.step_temperature * rho)
        if kind == "relu":
            return F.relu(rho)
        if kind == "mono":
            s = torch.sigmoid(self.mono_gate_logit)
            return s * F.relu(rho) + (1 - s) * torch.sigmoid(self.step_temperature * rho)
        if kind == "softstair":
            return softstair(rho, self.softstair_temperature)
        return rho  # "none": the raw step

    def reference_position(self, heads: LocationHeads, previous_position, step: int):
        if self.reference == "previous":
            return previous_position
        bias = torch.sigmoid(heads.bias)
        if self.reference == "initial-bias":
            return bias if step == 1 else previous_position
        return torch.sigmoid(heads.gate) * previous_position + bias

    @staticmethod
    def prepare(lengths: torch.Tensor, width: int, dtype: torch.dtype = torch.float32):
        """Per-sequence constants: norm(i), the size of one step 1 / max(1, L - 1), and L."""
        lengths = lengths.to(dtype)
        return {
            "positions": normalized_positions(lengths, width, dtype),
            "step_size": 1.0 / (lengths - 1).clamp(min=1),
            "lengths": lengths,
        }

    def forward(self, head_logits, previous_position, memory, padding_mask, step: int):
        """head_logits (B, num_heads), previous_position (B,), memory from prepare(), padding_mask
        (B, S) -> weights (B, S) over real positions (summing to 1, or all 0 when the "sum"
        normalisation underflows), and the centre mu (B,)."""
        heads = self.split_heads(head_logits)
        mu = self.reference_position(heads, previous_position, step) + self.activate(heads.step) * memory["step_size"]
        if self.clamp_center:
            mu = leaky_clamp(mu, self.clamp_slope)
        sigma = (F.relu(heads.width) + self.sigma_min) / memory["lengths"]
        z = (memory["positions"] - mu.unsqueeze(1)) / sigma.unsqueeze(1)
        log_gaussian = -0.5 * z * z
        if self.normalization == "softmax":
            weights = log_gaussian.masked_fill(padding_mask, float("-inf")).softmax(dim=-1)
        else:
            gaussian = log_gaussian.exp().masked_fill(padding_mask, 0.0)
            weights = gaussian / (gaussian.sum(dim=-1, keepdim=True) + SUM_EPSILON)
        return weights, mu
