"""Query-key scores of the content family; each returns pre-softmax scores c_t (B, S).

All three share one interface:
    prepare(keys)                -> dict of per-sequence tensors (batch-first), cached while decoding
                                    with the rest of the cross-attention's memory
    forward(query, memory, step) -> (B, S) scores for decoder step ``step`` (1-based), reading
                                    the tensors prepare() put into ``memory``
The 1/sqrt(d) scale is folded into the prepared keys (once per sequence, not once per step).
Key position i is the 0-based index in the wrapped source, so the first real token (after
START) is at i = 1 and the first decoder step t = 1 sees it at distance i - t = 0.
"""
import math

import torch
from torch import nn

from .positions import rotate_pairs, sinusoid


class ContentScores(nn.Module):
    """c_ti = <q_t, k_i> / sqrt(d)."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(dim)

    def prepare(self, keys):
        return {"keys": keys * self.scale}

    def forward(self, query, memory, step: int):
        return torch.bmm(memory["keys"], query.unsqueeze(-1)).squeeze(-1)


class RelativeScores(nn.Module):
    """Transformer-XL relative attention:
    c_ti = (<q_t + u, k_i> + <q_t + v, W_r pe(i - t)>) / sqrt(d), pe fixed sinusoids of any distance.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(dim)
        self.content_bias = nn.Parameter(torch.zeros(dim))   # u
        self.position_bias = nn.Parameter(torch.zeros(dim))  # v
        self.position_proj = nn.Linear(dim, dim, bias=False)  # W_r
        self.dim = dim

    def prepare(self, keys):
        keys = keys * self.scale
        # <u, k_i> does not depend on the step: compute it once per sequence.
        return {"keys": keys, "key_bias": keys @ self.content_bias}

    def forward(self, query, memory, step: int):
        keys = memory["keys"]
        content = torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1) + memory["key_bias"]
        with torch.no_grad():  # fixed sinusoids of the distances i - t (scaled), no gradient
            distances = torch.arange(keys.size(1), device=keys.device) - step
            embeddings = sinusoid(distances, self.dim, keys.dtype) * self.scale
        # <x, W_r pe> = <W_r^T x, pe>: project the query once instead of every distance.
        projected = (query + self.position_bias) @ self.position_proj.weight
        return content + projected @ embeddings.t()


class RotaryScores(nn.Module):
    """RoPE: c_ti = <R(t) q_t, R(i) k_i> / sqrt(d), which depends on i - t only."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(dim)

    def prepare(self, keys):
        positions = torch.arange(keys.size(1), device=keys.device)
        return {"keys": rotate_pairs(keys, positions.unsqueeze(0)) * self.scale}

    def forward(self, query, memory, step: int):
        rotated = rotate_pairs(query, torch.tensor(float(step), device=query.device))
        return torch.bmm(memory["keys"], rotated.unsqueeze(-1)).squeeze(-1)


SCORERS = {"content": ContentScores, "relative": RelativeScores, "rotary": RotaryScores}
