"""Location attention: a Gaussian focus over normalised source positions.

For decoder step t with query state h (all heads below are linear maps of h):

    steps_t = act(f_step(h))                      act: see STEP_ACTIVATIONS
    mu_t    = ref_t + steps_t / max(1, L - 1)     one step = one source position
    mu_t    = clamp(mu_t)                         optional leaky clamp to [0, 1]
    sigma_t = (ReLU(f_sigma(h)) + sigma_min) / L
    lambda_ti = softmax_i( -(norm(i) - mu_t)^2 / (2 sigma_t^2) )   over real positions

The reference position ref_t is one of
    "previous":     ref_t = pa_{t-1}                     (OneStep, Mono, RMono)
    "gated":        ref_t = g_t * pa_{t-1} + b_t          (LocAttn)
    "initial-bias": ref_1 = b_1, ref_t = pa_{t-1} later   (LocAttn S)
with g_t = sigmoid(f_g(h)), b_t = sigmoid(f_b(h)) and pa_{t-1} the previously attended
position (pa_0 = 0, the START position).

The paper computes the heads from l_t = f_l(h_t) with f_l linear; a linear map of a linear
map is linear, so the heads read h directly (same function class, one matmul less per step).
"""
import torch
from torch import nn
import torch.nn.functional as F

from .positions import normalized_positions

REFERENCES = ("previous", "gated", "initial-bias")
STEP_ACTIVATIONS = ("sigmoid", "mono", "relu", "softstair", "none")


def softstair(x: torch.Tensor, temperature: float) -> torch.Tensor:
    """softstair(x) = floor(x) + sigmoid(tau * (x - floor(x) - 0.5)): pushes x to an integer."""
    floor = torch.floor(x)
    return floor + torch.sigmoid(temperature * (x - floor - 0.5))


def leaky_clamp(x: torch.Tensor, slope: float) -> torch.Tensor:
    """clamp(mu) = max(0 + m mu, min(1 + m mu, mu)): [0, 1] with a leaky slope m outside."""
    return torch.maximum(slope * x, torch.minimum(1 + slope * x, x))


class LocationAttention(nn.Module):
    """The Gaussian focus.  It owns no projection: the caller reads the ``num_heads`` scalar
    heads [f_step, f_sigma, (f_b), (f_g)] off h in one matmul shared with the other parts
    of the cross-attention (see cross_attention.py)."""

    def __init__(
        self,
        reference: str = "previous",
        step_activation: str = "sigmoid",
        clamp_center: bool = False,
        sigma_min: float = 0.27,
        step_temperature: float = 5.0,
        softstair_temperature: float = 20.0,
        clamp_slope: float = 0.01,
        mono_gate_init: float = 20.0,
    ):
        super().__init__()
        if reference not in REFERENCES:
            raise ValueError(f"--reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
        if step_activation not in STEP_ACTIVATIONS:
            raise ValueError(
                f"--step-activation must be one of {', '.join(STEP_ACTIVATIONS)}, got {step_activation!r}"
            )
        self.reference = reference
        self.step_activation = step_activation
        self.clamp_center = clamp_center
        self.sigma_min = sigma_min
        self.step_temperature = step_temperature
        self.softstair_temperature = softstair_temperature
        self.clamp_slope = clamp_slope
        # heads: [step, sigma] + [bias] for "initial-bias" / [bias, gate] for "gated"
        self.num_heads = 2 + {"previous": 0, "initial-bias": 1, "gated": 2}[reference]
        if step_activation == "mono":
            # Mono: steps = s * ReLU(rho) + (1 - s) * sigmoid(T rho), s = sigmoid(p), p learned.
            self.mono_gate_logit = nn.Parameter(torch.tensor(float(mono_gate_init)))

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

    def reference_position(self, heads, previous_position, step: int):
        if self.reference == "previous":
            return previous_position
        bias = torch.sigmoid(heads[2])
        if self.reference == "initial-bias":
            return bias if step == 1 else previous_position
        gate = torch.sigmoid(heads[3])
        return gate * previous_position + bias

    @staticmethod
    def prepare(lengths: torch.Tensor, width: int):
        """Per-sequence constants: norm(i), the size of one step 1 / max(1, L - 1), and L."""
        lengths = lengths.float()
        return {
            "positions": normalized_positions(lengths, width),
            "step_size": 1.0 / (lengths - 1).clamp(min=1),
            "lengths": lengths,
        }

    def forward(self, heads, previous_position, memory, padding_mask, step: int):
        """heads (B, num_heads), previous_position (B,), memory from prepare(), padding_mask
        (B, S) -> weights (B, S) summing to 1 over real positions, and the centre mu (B,)."""
        heads = heads.unbind(1)
        mu = self.reference_position(heads, previous_position, step) + self.activate(heads[0]) * memory["step_size"]
        if self.clamp_center:
            mu = leaky_clamp(mu, self.clamp_slope)
        sigma = (F.relu(heads[1]) + self.sigma_min) / memory["lengths"]
        z = (memory["positions"] - mu.unsqueeze(1)) / sigma.unsqueeze(1)
        weights = (-0.5 * z * z).masked_fill(padding_mask, float("-inf")).softmax(dim=-1)
        return weights, mu
