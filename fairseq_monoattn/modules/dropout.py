"""Dropout whose mask is drawn eight elements a random number on the CPU.

torch's CPU dropout draws one random number per element (``bernoulli_``), a noticeable part of a
training update for the encodings of a batch (32 x 45 x 128 numbers for Inv ReCopy). Where the drop
probability p is a multiple of 1/256 (0.5, the presets', among them) a mask needs only one random
byte an element: element i is dropped when byte_i < 256 p, which has probability exactly p for
uniform bytes, and each random 64-bit integer gives eight of them. The mask has torch's
distribution; it is drawn from the same generator, in another way, so a run with this dropout is as
reproducible as with torch's and follows a different trajectory from it.
Elsewhere (other p, other devices, where torch's kernel is fast) it is torch's dropout.
"""

import torch
import torch.nn.functional as F
from torch import nn


def byte_dropout_threshold(p: float):
    """256 p if p is a multiple of 1/256 strictly between 0 and 1, else None."""
    threshold = p * 256
    return int(threshold) if 0 < p < 1 and threshold == int(threshold) else None


def byte_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """x with each element zeroed with probability p (a multiple of 1/256) and the rest scaled by
    1 / (1 - p): dropped where a uniform random byte is below 256 p."""
    threshold = byte_dropout_threshold(p)
    if threshold is None:
        raise ValueError(f"byte_dropout needs p a multiple of 1/256 strictly between 0 and 1, not {p}")
    count = x.numel()
    # random_ from the lowest int64 with no upper bound: every one of the 2^64 values equally likely
    words = torch.empty((count + 7) // 8, dtype=torch.int64, device=x.device).random_(-(2**63), None)
    random_bytes = words.view(torch.uint8)[:count].view(x.shape)
    scale = random_bytes.ge(threshold).to(x.dtype).mul_(1.0 / (1.0 - p))
    return x * scale


class Dropout(nn.Dropout):
    """``nn.Dropout`` that draws its mask with :func:`byte_dropout` when training on the CPU with
    p a multiple of 1/256; otherwise torch's dropout."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and not self.inplace and x.device.type == "cpu" and byte_dropout_threshold(self.p):
            return byte_dropout(x, self.p)
        return F.dropout(x, self.p, self.training, self.inplace)
