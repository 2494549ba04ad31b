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


class _SoftmaxGaussian(torch.autograd.Function):
    """lambda = softmax(-z^2 / 2) over the real positions, z = (positions - mu) / sigma, as one
    autograd node (a decoder step records one node instead of eight) with its derivative:
    dL/dl = lambda (g - <lambda, g>) through the softmax, then dl/dmu = z / sigma and
    dl/dsigma = z^2 / sigma."""

    @staticmethod
    def forward(ctx, positions, mu, sigma, padding_mask):
        z = (positions - mu.unsqueeze(1)) / sigma.unsqueeze(1)
        weights = (-0.5 * z * z).masked_fill(padding_mask, float("-inf")).softmax(dim=-1)
        ctx.save_for_backward(weights, z, sigma)
        return weights

    @staticmethod
    def backward(ctx, grad):
        weights, z, sigma = ctx.saved_tensors
        grad_logits = weights * (grad - (weights * grad).sum(dim=-1, keepdim=True))
        along = grad_logits * z
        return None, along.sum(dim=-1) / sigma, (along * z).sum(dim=-1) / sigma, None


@register_normalization("softmax")
class SoftmaxFocus(FocusNormalization):
    def forward(self, log_gaussian: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        return log_gaussian.masked_fill(padding_mask, float("-inf")).softmax(dim=-1)

    def focus(self, positions, mu, sigma, padding_mask):
        return _SoftmaxGaussian.apply(positions, mu, sigma, padding_mask)

    def compiled_form(self):
        return "softmax"


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
