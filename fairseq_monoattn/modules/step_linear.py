"""A linear map applied at every step of a recurrence, with its weight gradient taken once.

Autograd differentiates y_t = x_t W^T + b step by step: at each step one product for dL/dx_t
(which the recurrence needs before it can go one step further back) and one for dL/dW, added
to what the later steps gave.  The second needs nothing from the recurrence, so it can wait:

    dL/dW = sum_t (dL/dy_t)^T x_t = G^T X,   dL/db = sum_t dL/dy_t

with G and X the steps' gradients and inputs stacked: one large product after the backward
pass has been through every step, instead of a small product and an addition per step.

Usage (training only; the steps must all be differentiated in the same backward pass):

    linear = StepLinear(weight, bias)
    for t ...:
        y = linear(x, offset)          # = offset + x W^T + b
"""

from typing import List, Optional, Tuple

import torch


class _CollectWeightGradient(torch.autograd.Function):
    """The identity on (W, b); its backward runs after every step that read them (autograd runs
    a node once all the nodes that use its outputs are done) and forms dL/dW, dL/db from the
    steps' gradients and inputs."""

    @staticmethod
    def forward(ctx, weight, bias, pending):
        ctx.pending = pending
        ctx.has_bias = bias is not None
        ctx.weight_dtype = weight.dtype
        ctx.set_materialize_grads(False)  # the steps pass no gradient here: nothing to allocate
        return weight.view_as(weight), (bias.view_as(bias) if bias is not None else None)

    @staticmethod
    def backward(ctx, _weight_grad, _bias_grad):
        if not ctx.pending:
            return None, None, None
        dtype = ctx.weight_dtype  # under autocast the steps may have run in another precision
        grads = torch.cat([grad.to(dtype) for grad, _ in ctx.pending])
        inputs = torch.cat([x.to(dtype) for _, x in ctx.pending])
        ctx.pending.clear()
        return grads.t().mm(inputs), (grads.sum(dim=0) if ctx.has_bias else None), None


class _StepProduct(torch.autograd.Function):
    """offset + x W^T + b; its backward gives dL/dx (and dL/d offset) now and files (dL/dy, x)
    for the collector."""

    @staticmethod
    def forward(ctx, x, weight, bias, offset, pending):
        ctx.save_for_backward(x, weight)
        ctx.pending = pending
        ctx.offset_dtype = offset.dtype if offset is not None else None
        out = x.mm(weight.t())
        if bias is not None:
            out = out + bias
        if offset is not None:
            out = out + offset
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        ctx.pending.append((grad, x))
        grad_x = grad.to(weight.dtype).mm(weight).to(x.dtype)
        grad_offset = grad.to(ctx.offset_dtype) if ctx.offset_dtype is not None else None
        return grad_x, None, None, grad_offset, None


class StepLinear:
    """y_t = offset_t + x_t W^T + b for the steps of one forward pass (see the module's docstring)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        self.pending: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self.weight, self.bias = _CollectWeightGradient.apply(weight, bias, self.pending)

    def __call__(self, x: torch.Tensor, offset: Optional[torch.Tensor] = None) -> torch.Tensor:
        return _StepProduct.apply(x, self.weight, self.bias, offset, self.pending)
