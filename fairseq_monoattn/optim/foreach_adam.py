"""fairseq's Adam update (``--optimizer adam``) with torch's ``_foreach`` operations.

fairseq's ``Adam.step`` is a Python loop over the parameters: a dozen tensor calls and state
look-ups for each. The same arithmetic on lists of tensors makes each operation one call over all parameters. Every
operation is the one fairseq applies to each parameter, with the same operands in the same
order. On the CPU, where a ``_foreach`` operation runs torch's per-tensor kernel on each tensor,
the parameters and the optimizer state come out the same to float rounding (the tests compare
them step by step; bit for bit where the vector kernels round as the loop does); on a GPU
torch's multi-tensor kernels compute the same formulas (not run here).
Checkpoints hold the same state dict either way::

    m ← β₁·m + (1 − β₁)·g
    v ← β₂·v + (1 − β₂)·g²
    p ← p − λ·w·p                                  (decoupled weight decay w, if any)
    p ← p − λ·√(1 − β₂ᵗ)/(1 − β₁ᵗ) · m / (√v + ε)

:func:`foreach_adam_step` takes the step only where this holds: fairseq's own ``adam`` in
float32 on its plain ``Adam`` (not the fused CUDA kernel, not a mixed-precision wrapper), no
AMSGrad, dense gradients and no optimizer step hooks. Otherwise it returns False and the
caller runs fairseq's step.
"""

import math
from typing import List

import torch
from fairseq.optim.adam import Adam, FairseqAdam
from torch.optim import optimizer as torch_optimizer


def _has_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """True if a step hook is registered (or torch no longer keeps them where we look)."""
    hook_tables = (
        getattr(optimizer, "_optimizer_step_pre_hooks", None),
        getattr(optimizer, "_optimizer_step_post_hooks", None),
        getattr(torch_optimizer, "_global_optimizer_pre_hooks", None),
        getattr(torch_optimizer, "_global_optimizer_post_hooks", None),
    )
    return any(table is None or len(table) > 0 for table in hook_tables)


def _applies(inner: Adam, params: List[torch.Tensor]) -> bool:
    """fairseq's plain Adam (checked by the caller) without hooks or AMSGrad, on float32 and dense gradients."""
    if _has_step_hooks(inner) or any(group.get("amsgrad", False) for group in inner.param_groups):
        return False
    return all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 and not p.grad.is_sparse for p in params)


@torch.no_grad()
def foreach_adam_step(fairseq_optimizer) -> bool:
    """Apply fairseq's Adam step to every parameter with a gradient; False if it does not apply
    (then nothing was changed and fairseq's own step should run)."""
    if type(fairseq_optimizer) is not FairseqAdam or type(fairseq_optimizer.optimizer) is not Adam:
        return False
    inner = fairseq_optimizer.optimizer
    groups = inner.param_groups
    with_grad = [[p for p in group["params"] if p.grad is not None] for group in groups]
    if not _applies(inner, [p for params in with_grad for p in params]):
        return False
    for group, params in zip(groups, with_grad):
        if not params:
            continue
        beta1, beta2 = group["betas"]
        states = [inner.state[p] for p in params]
        for p, state in zip(params, states):
            if len(state) == 0:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
        grads = [p.grad for p in params]
        exp_avg = [state["exp_avg"] for state in states]
        exp_avg_sq = [state["exp_avg_sq"] for state in states]
        torch._foreach_mul_(exp_avg, beta1)
        torch._foreach_add_(exp_avg, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_add_(denom, group["eps"])
        step_sizes = []
        for state in states:
            state["step"] += 1
            bias_correction1 = 1 - beta1 ** state["step"]
            bias_correction2 = 1 - beta2 ** state["step"]
            step_sizes.append(-(group["lr"] * math.sqrt(bias_correction2) / bias_correction1))
        if group["weight_decay"] != 0:
            torch._foreach_add_(params, params, alpha=-group["weight_decay"] * group["lr"])
        torch._foreach_addcdiv_(params, exp_avg, denom, step_sizes)
    return True
