"""Location attention: a Gaussian focus over normalised source positions.

For decoder step t with location heads read off the query state h_{t-1} (the caller reads them,
see cross_attention.py):

    s_t       = act(rho_t + w c_{t-1})                    the step, in source positions
    mu_t      = ref_t + s_t / max(1, L - 1)               one step = one source position
    mu_t      = clamp(mu_t)                               optional leaky clamp to [0, 1]
    sigma_t   = (ReLU(f_sigma) + sigma_min) / L
    lambda_t  = normalise( -(norm(i) - mu_t)^2 / (2 sigma_t^2) )   over real positions i

With ``dwell_count`` the step logit also reads c_{t-1}, how many steps the focus has stayed where
it is (w a learned scalar, 0 at first unless ``dwell_init`` says otherwise):

    c_t       = c_{t-1} (1 - clamp(s_t, 0, 1)) + 1,   c_0 = 0

(1 after a full step, one more for every step without one; soft in between).  Writing each source
digit k times (ReCopy) then needs only a threshold on c: step when c >= k(d), a linear function of
c and of the digit, the same at every length.  The paper's models have no such count: a GRU
decoder can keep one in its state, a Transformer decoder has no state to keep it in.

The three choices are modules of their own, each from a registry (``registry.py``): the
reference position ref_t (``references.py``), the step activation act (``steps.py``) and the
normalisation (``normalizations.py``).
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import FocusNormalization, ReferencePosition, StepActivation
from .positions import normalized_positions

Memory = Dict[str, torch.Tensor]


def leaky_clamp(x: torch.Tensor, slope: float) -> torch.Tensor:
    """clamp(mu) = max(0 + m mu, min(1 + m mu, mu)): [0, 1] with a leaky slope m outside."""
    return torch.maximum(slope * x, torch.minimum(1 + slope * x, x))


class LocationAttention(nn.Module):
    """The Gaussian focus.  It owns no projection of h: the caller reads the location heads
    ``head_names`` (step and width, then the reference's own) off h and passes them in as one
    (B, num_heads) tensor, so that one matrix product of h serves every part of the attention."""

    def __init__(
        self,
        reference: ReferencePosition,
        step: StepActivation,
        normalization: FocusNormalization,
        sigma_min: float = 0.27,
        clamp_slope: Optional[float] = None,
        dwell_count: bool = False,
        dwell_init: float = 0.0,
    ):
        """``clamp_slope``: leaky-clamp mu into [0, 1] with this slope outside, or None for no clamp;
        ``dwell_count``: the step logit reads how long the focus has stayed (see the module's docstring),
        with the weight w starting at ``dwell_init``."""
        super().__init__()
        self.reference = reference
        self.step = step
        self.normalization = normalization
        self.sigma_min = sigma_min
        self.clamp_slope = clamp_slope
        self.head_names: Tuple[str, ...] = ("step", "width") + tuple(reference.heads)
        self.dwell_weight = nn.Parameter(torch.tensor(float(dwell_init))) if dwell_count else None  # w

    @property
    def num_heads(self) -> int:
        return len(self.head_names)

    def split_heads(self, logits: torch.Tensor) -> Dict[str, torch.Tensor]:
        """(B, num_heads) logits -> {head name: (B,)}."""
        if logits.dim() != 2 or logits.size(1) != self.num_heads:
            raise ValueError(
                f"the location heads {self.head_names} need logits of (B, {self.num_heads}), not {tuple(logits.shape)}"
            )
        return dict(zip(self.head_names, logits.unbind(1)))

    @staticmethod
    def prepare(lengths: torch.Tensor, width: int, dtype: torch.dtype = torch.float32) -> Memory:
        """Per-sequence constants: norm(i), the size of one step 1 / max(1, L - 1), and L."""
        lengths = lengths.to(dtype)
        return {
            "positions": normalized_positions(lengths, width, dtype),
            "step_size": 1.0 / (lengths - 1).clamp(min=1),
            "lengths": lengths,
        }

    @property
    def counts_dwell(self) -> bool:
        return self.dwell_weight is not None

    def forward(
        self,
        head_logits: torch.Tensor,
        previous_position: torch.Tensor,
        memory: Memory,
        padding_mask: torch.Tensor,
        step: int,
        dwell: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """head_logits (B, num_heads), previous_position (B,), memory from prepare(), padding_mask
        (B, S), dwell c_{t-1} (B,) (with ``dwell_count``) -> weights (B, S) over real positions, the
        centre mu (B,) and the step s_t (B,), in source positions."""
        return self.focus_step(head_logits, previous_position, memory, padding_mask, step, dwell)[:3]

    def focus_step(
        self,
        head_logits: torch.Tensor,
        previous_position: torch.Tensor,
        memory: Memory,
        padding_mask: torch.Tensor,
        step: int,
        dwell: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """``forward``'s outputs and the position the weights attend, sum_i lambda_i norm(i), or None
        (the caller computes it; the fast path's location node returns it, fast_path.py)."""
        positions = memory["positions"]
        heads = self.split_heads(head_logits.to(positions.dtype))
        rho = heads["step"]
        if self.dwell_weight is not None:
            rho = rho + self.dwell_weight * dwell
        steps = self.step(rho)
        mu = self.reference(heads, previous_position, step) + steps * memory["step_size"]
        if self.clamp_slope is not None:
            mu = leaky_clamp(mu, self.clamp_slope)
        sigma = (F.relu(heads["width"]) + self.sigma_min) / memory["lengths"]
        return self.normalization.focus(positions, mu, sigma, padding_mask), mu, steps, None

    @staticmethod
    def next_dwell(dwell: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        """c_t = c_{t-1} (1 - clamp(s_t, 0, 1)) + 1."""
        return dwell * (1 - steps.clamp(0, 1)) + 1
