"""Position helpers shared by the attention modules.

Every tensor here is batch-first and *right-padded*: example ``b`` occupies positions
``0 .. lengths[b] - 1`` of its row, so an example's positions never depend on the other
examples of the batch (padding invariance).
"""

import math

import torch


def padding_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """(B, width) bool, True on padding."""
    return torch.arange(width, device=lengths.device).unsqueeze(0) >= lengths.unsqueeze(1)


def normalized_positions(lengths: torch.Tensor, width: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """norm(i) = i / max(1, L - 1) for 0-based i: the first position is 0, the last 1.

    Padding columns get values > 1; callers mask them.
    """
    index = torch.arange(width, device=lengths.device, dtype=dtype).unsqueeze(0)
    return index / (lengths.unsqueeze(1).to(dtype) - 1).clamp(min=1)


def reversal_index(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """(B, width) gather index that reverses the real positions and keeps padding in place."""
    index = torch.arange(width, device=lengths.device).unsqueeze(0).expand(lengths.size(0), width)
    reversed_index = lengths.unsqueeze(1) - 1 - index
    return torch.where(index < lengths.unsqueeze(1), reversed_index, index)


def gather_positions(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, T, D) with its positions taken in the order of ``index`` (B, T), e.g. reversal_index's:
    out[b, t] = x[b, index[b, t]].  Whole rows of D numbers are picked from x seen as (B * T, D),
    which on the CPU is several times faster than ``gather`` with an index of x's full size, forward
    and backward, and the same numbers."""
    batch, length = x.shape[:2]
    rows = index + length * torch.arange(batch, device=index.device).unsqueeze(1)
    return x.reshape(batch * length, -1).index_select(0, rows.flatten()).view(batch, index.size(1), -1)


def sinusoid(positions: torch.Tensor, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Fixed sinusoidal embedding [sin(p w_j), cos(p w_j)], w_j = 10000^(-2j/dim).

    Works for any (also negative) position, so no distance is ever out of range.
    """
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=positions.device, dtype=dtype) * (-math.log(10000.0) / half))
    angles = positions.to(dtype).unsqueeze(-1) * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def rotate_pairs(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary embedding: rotate the pair (x_j, x_{j+D/2}) by the angle p * w_j, w_j = base^(-2j/D).

    ``positions`` broadcasts against ``x[..., 0]``.  <rotate(q, t), rotate(k, i)> depends
    on i - t only.
    """
    half = x.size(-1) // 2
    dtype = torch.promote_types(x.dtype, torch.float32)  # angles of long distances need float32 at least
    freqs = torch.exp(torch.arange(half, device=x.device, dtype=dtype) * (-math.log(base) / half))
    angles = positions.to(dtype).unsqueeze(-1) * freqs
    cos, sin = torch.cos(angles), torch.sin(angles)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1).to(x.dtype)


def kept_tokens_first(tokens: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """Move each row's kept entries (along dim 1) to the front, keeping their order: fairseq
    left-pads sources by default, so the result is right-padded whatever the input's padding
    side.  ``tokens`` (B, T) or (B, T, D); ``kept`` (B, T) bool."""
    order = torch.sort((~kept).to(torch.uint8), dim=1, stable=True).indices
    if tokens.dim() == 3:
        order = order.unsqueeze(-1).expand_as(tokens)
    return tokens.gather(1, order)


def to_source_layout(weights: torch.Tensor, ignored: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """Weights over right-padded positions (B, T, positions) mapped back onto the columns of the
    source as the model was given it (B, S), e.g. left-padded: a kept column gets the weight of
    its rank among the kept ones (plus ``offset``: 1 when position 0 is a START of the model's
    own), an ignored column (padding, a dropped </s>) gets 0."""
    token_index = (~ignored).long().cumsum(dim=1) - 1
    index = (token_index + offset).clamp(min=0).unsqueeze(1).expand(-1, weights.size(1), -1)
    return weights.gather(2, index).masked_fill(ignored.unsqueeze(1), 0.0)
