"""A linear map of embedded tokens, computed once per vocabulary row instead of once per position.

The GRUs' first input gates are W x + b over embedded tokens x = E[y]: one d x k product per token
position of the batch.  Where the vocabulary has fewer rows than the batch has positions (a probing
task's 14 symbols against the 32 x 11 inputs of a decoder batch), the map of every row,

    T = E W^T + b   (V x k),   W x + b = T[y],

costs fewer products: a position reads its token's row.  The numbers are the same dot products (to
float rounding: the product's blocking differs), and the gradient sums each position's dL/dT[y] into
its token's row before the one product with W, instead of after.  nn.Embedding's padding row takes
no gradient, and neither does it here (``embedding_rows``).

``TokenRows`` stands for rows x = table[ids] that are not made: ``bidirectional_gru`` (gru.py) maps
the table instead, with the encoder's START and END vectors as two more rows.
"""

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn


class TokenRows(NamedTuple):
    """x = table[ids], not made: ids (B, T) int64 indices into table (rows, D)."""

    ids: torch.Tensor
    table: torch.Tensor


def table_applies(embedding: nn.Module, positions: int, extra_rows: int = 0) -> bool:
    """Whether ``embedding``'s table (and ``extra_rows`` more) is smaller than ``positions`` token
    positions, and ``embedding`` a plain lookup (an nn.Embedding without max_norm, which renormalises
    the rows it reads, and with dense gradients), so that the map of its rows stands for the map of
    the looked-up rows."""
    return (
        type(embedding) is nn.Embedding
        and embedding.max_norm is None
        and not embedding.sparse
        and not embedding.scale_grad_by_freq
        and embedding.num_embeddings + extra_rows < positions
    )


def embedding_rows(embedding: nn.Embedding) -> torch.Tensor:
    """E as a lookup sees it: its padding row takes no gradient (nn.Embedding's padding_idx)."""
    weight = embedding.weight
    if embedding.padding_idx is None:
        return weight
    padding = torch.zeros(weight.size(0), 1, dtype=torch.bool, device=weight.device)
    padding[embedding.padding_idx] = True
    return torch.where(padding, weight.detach(), weight)


def token_table(embedding: nn.Embedding, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """T = E W^T + b (V, k): the map of every vocabulary row, which a position reads as T[y]."""
    return F.linear(embedding_rows(embedding), weight, bias)


def token_map(
    embedding: nn.Embedding, tokens: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """W E[tokens] + b (tokens' shape, k), through the table of every vocabulary row when that is
    smaller (``table_applies``); the same function either way."""
    if table_applies(embedding, tokens.numel()):
        return F.embedding(tokens, token_table(embedding, weight, bias))
    return F.linear(embedding(tokens), weight, bias)
