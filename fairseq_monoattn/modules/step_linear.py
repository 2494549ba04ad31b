"""Products applied at every step of a recurrence, with the gradient of their fixed factor taken once.

Autograd differentiates y_t = x_t W^T + b step by step: at each step one product for dL/dx_t
(which the recurrence needs before it can go one step further back) and one for dL/dW, added
to what the later steps gave.  The second needs nothing from the recurrence, so it can wait:

    dL/dW = sum_t (dL/dy_t)^T x_t = G^T X,   dL/db = sum_t dL/dy_t

with G and X the steps' gradients and inputs stacked: one large product after the backward
pass has been through every step, instead of a small product and an addition per step.
``StepLinear`` does this for a linear map, ``StepOperand`` for a per-sequence tensor M (B, n, D)
that every step reads (the attention's values, c_t = a_t M) or scores a query against (its keys,
s_t = M q_t): dL/dM = sum_t a_t^T (dL/dc_t) + sum_t (dL/ds_t)^T q_t.

Without gradients (decoding), the same per-step products on long memories go through
``weighted_rows``, a streaming weighted sum of rows (see there).

Each is an autograd node of its own, in Python or, with ``kernels`` (the C++ kernels, which the fast
path passes: fast_path.py), in C++.  Usage (training only; the steps must all be differentiated in
the same backward pass):

    linear = StepLinear(weight, bias)
    for t ...:
        y = linear(x, offset)          # = offset + x W^T + b
"""

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F


class _PendingFactors:
    """The factor pairs (a_t, b_t) of a gradient sum_t a_t^T b_t, filed by the steps' backward
    passes and taken by the collector once every step is done (the C++ kernels' PendingFactors
    does the same for their step nodes)."""

    def __init__(self):
        self.pairs: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def append(self, pair: Tuple[torch.Tensor, torch.Tensor]) -> None:
        self.pairs.append(pair)

    def take(self) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        pairs, self.pairs = self.pairs, []
        return pairs


def _pending_for(kernels):
    """Where the steps file their factors: the C++ kernels' PendingFactors for their C++ step nodes
    (``kernels`` given), else the Python one."""
    return _PendingFactors() if kernels is None else kernels.PendingFactors()


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
        pairs = ctx.pending.take()
        if not pairs:
            return None, None, None
        dtype = ctx.weight_dtype  # under autocast the steps may have run in another precision
        grads = torch.cat([grad.to(dtype) for grad, _ in pairs])
        inputs = torch.cat([x.to(dtype) for _, x in pairs])
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
    """y_t = offset_t + x_t W^T + b for the steps of one forward pass (see the module's docstring);
    C++ step nodes with ``kernels``."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, kernels=None):
        self.kernels = kernels
        self.pending = _pending_for(kernels)
        self.weight, self.bias = _CollectWeightGradient.apply(weight, bias, self.pending)

    def __call__(self, x: torch.Tensor, offset: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.kernels is not None:
            return self.kernels.step_product(x, self.weight, self.bias, offset, self.pending)
        return _StepProduct.apply(x, self.weight, self.bias, offset, self.pending)


def row_times(rows: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """x_b M_b for each b: rows (B, K), matrices (B, K, N) -> (B, N).  A batch of row vectors times
    matrices, never a batch of matrices times column vectors (B, N, K) x (B, K, 1), which torch's
    CPU ``bmm`` computes several times slower."""
    return torch.bmm(rows.unsqueeze(1), matrices).squeeze(1)


class _CollectOperandGradient(torch.autograd.Function):
    """The identity on M (B, n, D); its backward runs after every step that read M and forms
    dL/dM = sum_t a_t^T b_t from the (a_t (B, n), b_t (B, D)) pairs the steps filed: one batched
    product A^T B over the stacked steps."""

    @staticmethod
    def forward(ctx, operand, pending):
        ctx.pending = pending
        ctx.operand_dtype = operand.dtype
        ctx.set_materialize_grads(False)
        return operand.view_as(operand)

    @staticmethod
    def backward(ctx, _grad):
        pairs = ctx.pending.take()
        if not pairs:
            return None, None
        dtype = ctx.operand_dtype
        left = torch.stack([a.to(dtype) for a, _ in pairs], dim=1)  # (B, T, n)
        right = torch.stack([b.to(dtype) for _, b in pairs], dim=1)  # (B, T, D)
        return left.transpose(1, 2).bmm(right), None


class _StepRead(torch.autograd.Function):
    """y = w M, (B, n) x (B, n, D) -> (B, D): dL/dw = M dL/dy now, (w, dL/dy) filed for dL/dM."""

    @staticmethod
    def forward(ctx, weights, operand, pending):
        ctx.save_for_backward(weights, operand)
        ctx.pending = pending
        return row_times(weights, operand)

    @staticmethod
    def backward(ctx, grad):
        weights, operand = ctx.saved_tensors
        ctx.pending.append((weights, grad))
        return row_times(grad.to(operand.dtype), operand.transpose(1, 2)).to(weights.dtype), None, None


class _StepScore(torch.autograd.Function):
    """s = M q, (B, n, D) x (B, D) -> (B, n): dL/dq = dL/ds M now, (dL/ds, q) filed for dL/dM."""

    @staticmethod
    def forward(ctx, query, operand, pending):
        ctx.save_for_backward(query, operand)
        ctx.pending = pending
        return row_times(query, operand.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):
        query, operand = ctx.saved_tensors
        ctx.pending.append((grad, query))
        return row_times(grad.to(operand.dtype), operand).to(query.dtype), None, None


class StepOperand:
    """A per-sequence tensor M (B, n, D) that every step of one forward pass multiplies: a weighted
    sum of its rows (``read``, the attention's context) or its rows' dot products with a query
    (``score``, content scores).  Autograd would form a step's dL/dM as an outer product, a batched
    product with an inner size of 1 (slow on the CPU), and add it to the other steps'; here the
    steps' factors are kept and dL/dM = sum_t a_t^T b_t is one product after the last step.
    C++ step nodes with ``kernels``."""

    def __init__(self, operand: torch.Tensor, kernels=None):
        self.kernels = kernels
        self.pending = _pending_for(kernels)
        self.operand = _CollectOperandGradient.apply(operand, self.pending)

    def read(self, weights: torch.Tensor) -> torch.Tensor:
        """sum_i w_i M_i: weights (B, n) -> (B, D)."""
        if self.kernels is not None:
            return self.kernels.step_read(weights, self.operand, self.pending)
        return _StepRead.apply(weights, self.operand, self.pending)

    def score(self, query: torch.Tensor) -> torch.Tensor:
        """<M_i, q>: query (B, D) -> (B, n)."""
        if self.kernels is not None:
            return self.kernels.step_score(query, self.operand, self.pending)
        return _StepScore.apply(query, self.operand, self.pending)


# from this many rows on, weighted_rows streams them through embedding_bag (below, bmm's row form
# is as fast; above it, 1.3x at 102 rows and 3-4x at 502 rows of 128, 32 sequences, one thread)
STREAMED_ROWS = 64


def weighted_rows(weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """sum_i w_bi M_bi: weights (B, n), rows (B, n, D) -> (B, D).

    On the CPU, without gradients and from STREAMED_ROWS rows on, this is an ``embedding_bag``
    sum over the B*n rows with per-row weights, in bags of n: a kernel that reads each row once,
    at close to the machine's streaming rate, where ``bmm``'s matrix-vector form reads a decoding
    step's 32 x 502 x 128 values several times slower (and much slower again once the keys and values
    of one step no longer fit the cache together).  Otherwise ``row_times``."""
    batch, count, dim = rows.shape
    if (
        count < STREAMED_ROWS
        or rows.device.type != "cpu"
        or (torch.is_grad_enabled() and (weights.requires_grad or rows.requires_grad))
    ):
        return row_times(weights, rows)
    rows = rows.contiguous()
    index = torch.arange(batch * count, device=rows.device)
    return F.embedding_bag(
        index,
        rows.view(batch * count, dim),
        index[::count],
        mode="sum",
        per_sample_weights=weights.reshape(-1).to(rows.dtype),
    ).to(weights.dtype)


STEP_OPERANDS = "step_operands"  # the memory's key for its StepOperands
BY_FEATURE = ".by_feature"  # memory[name + BY_FEATURE]: memory[name] transposed, (B, D, n) contiguous


def with_step_operands(memory: dict, names, kernels=None) -> dict:
    """A copy of an attention's memory for one training forward pass in which its entries ``names``
    (those present and needing a gradient) are multiplied through StepOperands (C++ nodes with
    ``kernels``)."""
    operands = {
        name: StepOperand(memory[name], kernels) for name in names if name in memory and memory[name].requires_grad
    }
    return {**memory, STEP_OPERANDS: operands} if operands else memory


def with_feature_major(memory: dict, names) -> dict:
    """A copy of an attention's memory for decoding, with each entry ``names`` (those present and long
    enough for weighted_rows to stream) also stored transposed, so that a step scores its query
    against it as a weighted sum of feature rows, <M_i, q> = sum_d q_d M[:, d]_i.  Keep the copy for
    every step of the sequence (in the incremental state): the transposition is a full copy."""
    extra = {
        name + BY_FEATURE: memory[name].transpose(1, 2).contiguous()
        for name in names
        if name in memory and name + BY_FEATURE not in memory and memory[name].size(1) >= STREAMED_ROWS
    }
    return {**memory, **extra} if extra else memory


def read_rows(memory: dict, name: str, weights: torch.Tensor) -> torch.Tensor:
    """sum_i w_i memory[name][:, i]: weights (B, n) -> (B, D)."""
    operand = memory.get(STEP_OPERANDS, {}).get(name)
    if operand is not None:
        return operand.read(weights)
    return weighted_rows(weights, memory[name])


def score_rows(memory: dict, name: str, query: torch.Tensor) -> torch.Tensor:
    """<memory[name][:, i], q>: query (B, D) -> (B, n)."""
    operand = memory.get(STEP_OPERANDS, {}).get(name)
    if operand is not None:
        return operand.score(query)
    by_feature = memory.get(name + BY_FEATURE)
    if by_feature is not None:
        return weighted_rows(query, by_feature)
    return row_times(query, memory[name].transpose(1, 2))
