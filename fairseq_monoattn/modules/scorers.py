"""Content scorers (``--attention-scoring``): pre-softmax scores c_t (B, S) of the query q_t
against the keys k_i, registered in ``SCORERS``.

The 1/sqrt(d) scale is folded into the prepared keys (once per sequence, not once per step).
Key position i is the 0-based index in the wrapped source, so the first real token (after
START) is at i = 1 and the first decoder step t = 1 sees it at distance i - t = 0.
"""

import math
from typing import Dict

import torch
from torch import nn

from ..registry import Scorer, register_scorer
from .positions import rotate_pairs, sinusoid
from .step_linear import score_rows

Memory = Dict[str, torch.Tensor]


@register_scorer("content")
class ContentScores(Scorer):
    """c_ti = <q_t, k_i> / sqrt(d)."""

    def __init__(self, dim: int):
        super().__init__(dim)
        self.scale = 1.0 / math.sqrt(dim)

    def prepare(self, keys: torch.Tensor) -> Memory:
        return {"keys": keys * self.scale}

    def forward(self, query: torch.Tensor, memory: Memory, step: int) -> torch.Tensor:
        return score_rows(memory, "keys", query)

    def forward_all(self, queries: torch.Tensor, memory: Memory, first_step: int) -> torch.Tensor:
        return torch.bmm(queries, memory["keys"].transpose(1, 2))

    def compiled_form(self):
        return "content"


@register_scorer("relative")
class RelativeScores(Scorer):
    """Transformer-XL relative attention:
    c_ti = (<q_t + u, k_i> + <q_t + v, W_r pe(i - t)>) / sqrt(d), pe fixed sinusoids of any distance.
    """

    def __init__(self, dim: int):
        super().__init__(dim)
        self.scale = 1.0 / math.sqrt(dim)
        self.content_bias = nn.Parameter(torch.zeros(dim))  # u
        self.position_bias = nn.Parameter(torch.zeros(dim))  # v
        self.position_proj = nn.Linear(dim, dim, bias=False)  # W_r

    def prepare(self, keys: torch.Tensor) -> Memory:
        keys = keys * self.scale
        with torch.no_grad():  # fixed sinusoids pe(i) of the key positions (scaled), no gradient
            # computed in float32 at least (angles of long positions), then in the keys' type
            precision = torch.promote_types(keys.dtype, torch.float32)
            positions = torch.arange(keys.size(1), device=keys.device)
            table = (sinusoid(positions, self.dim, precision) * self.scale).to(keys.dtype)
        # <u, k_i> does not depend on the step: compute it once per sequence.  The table is the same
        # for every sequence: a view of one copy, batch-first like the rest of the memory.
        return {
            "keys": keys,
            "key_bias": keys @ self.content_bias,
            "position_table": table.expand(keys.size(0), -1, -1),
        }

    def forward(self, query: torch.Tensor, memory: Memory, step: int) -> torch.Tensor:
        content = score_rows(memory, "keys", query) + memory["key_bias"]
        # <x, W_r pe(i - t)> = <W_r^T x, pe(i - t)>: project the query once instead of every distance;
        # and since pe's (sin, cos) pairs turn by an angle per position, pe(i - t) is pe(i) turned back
        # by t, so <y, pe(i - t)> = <R(-t) y, pe(i)>: the query turned instead of a new table a step.
        projected = (query + self.position_bias) @ self.position_proj.weight
        turned = rotate_pairs(projected, torch.tensor(-float(step), device=query.device))
        return content + turned @ memory["position_table"][0].t()

    def forward_all(self, queries: torch.Tensor, memory: Memory, first_step: int) -> torch.Tensor:
        keys = memory["keys"]
        content = torch.bmm(queries, keys.transpose(1, 2)) + memory["key_bias"].unsqueeze(1)
        steps, width = queries.size(1), keys.size(1)
        with torch.no_grad():  # every distance i - t of these steps: from -(first_step + T - 1) to width - first_step
            low = -(first_step + steps - 1)
            distances = torch.arange(low, width - first_step, device=keys.device)
            precision = torch.promote_types(keys.dtype, torch.float32)
            embeddings = (sinusoid(distances, self.dim, precision) * self.scale).to(keys.dtype)
        projected = (queries + self.position_bias) @ self.position_proj.weight  # (B, T, D)
        by_distance = projected @ embeddings.t()  # (B, T, distances)
        # step first_step + t reads distance i - (first_step + t), column i - t - first_step - low
        columns = (torch.arange(width, device=keys.device).unsqueeze(0) - torch.arange(steps, device=keys.device)
                   .unsqueeze(1) - first_step - low)  # fmt: skip
        return content + by_distance.gather(2, columns.unsqueeze(0).expand(queries.size(0), -1, -1))


@register_scorer("rotary")
class RotaryScores(Scorer):
    """RoPE: c_ti = <R(t) q_t, R(i) k_i> / sqrt(d), which depends on i - t only."""

    def __init__(self, dim: int):
        super().__init__(dim)
        self.scale = 1.0 / math.sqrt(dim)

    def prepare(self, keys: torch.Tensor) -> Memory:
        positions = torch.arange(keys.size(1), device=keys.device)
        return {"keys": rotate_pairs(keys, positions.unsqueeze(0)) * self.scale}

    def forward(self, query: torch.Tensor, memory: Memory, step: int) -> torch.Tensor:
        rotated = rotate_pairs(query, torch.tensor(float(step), device=query.device))
        return score_rows(memory, "keys", rotated)

    def forward_all(self, queries: torch.Tensor, memory: Memory, first_step: int) -> torch.Tensor:
        steps = torch.arange(first_step, first_step + queries.size(1), device=queries.device)
        rotated = rotate_pairs(queries, steps.unsqueeze(0))
        return torch.bmm(rotated, memory["keys"].transpose(1, 2))
