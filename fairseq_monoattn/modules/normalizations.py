"""Focus normalisations (``--location-normalization``): the location weights lambda_t from the
log-Gaussian over the source positions.  Registered in ``NORMALIZATIONS``.

    softmax   lambda = softmax of the log-Gaussian over the real positions; the focus always
              lands on the nearest real position, however far mu is past the end.
    sum       lambda = g / (sum g + 1e-20), g = exp(log-Gaussian); when mu is so far past
              every real position that every g underflows to 0, lambda is all zeros (no context,
              and the next reference position pa_t = 0 is START again).
    sum-per-column
              lambda = g / sum_j (g_j + 1e-20) over every column of the padded batch, exactly as
              the authors' release computes it: the epsilon is added once per column, so the
              output depends (below 1e-18) on how wide the batch is padded.
"""

import torch

from ..registry import FocusNormalization, register_normalization

SUM_EPSILON = 1e-20


@register_normalization("softmax")
class SoftmaxFocus(FocusNormalization):
    def forward(self, log_gaussian: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        return log_gaussian.masked_fill(padding_mask, float("-inf")).softmax(dim=-1)


@register_normalization("sum")
class SumFocus(FocusNormalization):
    def forward(self, log_gaussian: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        gaussian = log_gaussian.exp().masked_fill(padding_mask, 0.0)
        return gaussian / (gaussian.sum(dim=-1, keepdim=True) + SUM_EPSILON)


@register_normalization("sum-per-column")
class ReleaseSumFocus(FocusNormalization):
    def forward(self, log_gaussian: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        gaussian = log_gaussian.exp().masked_fill(padding_mask, 0.0)
        return gaussian / (gaussian + SUM_EPSILON).sum(dim=-1, keepdim=True)
