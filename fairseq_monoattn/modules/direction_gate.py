"""Bidirectional encodings: a learned, per-sequence choice between e and reverse(e).

g     = sigmoid(beta * f_dir(e_cls))            (one scalar per sequence)
e_dir = g * e + (1 - g) * reverse(e)            (reverse of the real positions only)

hard: the forward pass uses round(g), 0 or 1, and the gradient is the soft g's (straight-through:
g_used = round(g) + g - stop_gradient(g)), so the encodings are never a blend of the two orders.
keep_end: reverse(e) reverses the real positions but the last (fairseq's source </s>), which stays
last, so both orders end with the end marker: e_1 .. e_n </s> -> e_n .. e_1 </s>.
"""

import torch
from torch import nn

from .positions import gather_positions, reversal_index


class DirectionGate(nn.Module):
    def __init__(self, summary_dim: int, temperature: float, hard: bool = False, keep_end: bool = False):
        super().__init__()
        self.proj = nn.Linear(summary_dim, 1)
        self.temperature = temperature
        self.hard = hard
        self.keep_end = keep_end

    def logit(self, summary: torch.Tensor) -> torch.Tensor:
        """beta * f_dir(e_cls) of shape (B,) from summary (B, Ds): the soft g is its sigmoid."""
        return self.temperature * self.proj(summary).squeeze(-1)

    def gate(self, summary: torch.Tensor) -> torch.Tensor:
        """g = sigmoid(beta * f_dir(e_cls)) of shape (B,) from summary (B, Ds); with ``hard``,
        the value the encodings use: 0 or 1 (1 when g >= 1/2), with the soft g's gradient."""
        soft = torch.sigmoid(self.logit(summary))
        if not self.hard:
            return soft
        return (soft >= 0.5).to(soft.dtype) + (soft - soft.detach())  # exactly 0 or 1 forward

    def forward(self, encodings: torch.Tensor, summary: torch.Tensor, lengths: torch.Tensor):
        """encodings (B, S, D) right-padded, summary (B, Ds), lengths (B,) -> (e_dir, g of shape (B,))."""
        gate = self.gate(summary)
        reversed_lengths = (lengths - 1).clamp(min=0) if self.keep_end else lengths
        reversed_encodings = gather_positions(encodings, reversal_index(reversed_lengths, encodings.size(1)))
        g = gate.view(-1, 1, 1)
        return g * encodings + (1 - g) * reversed_encodings, gate
