"""How far two code paths that compute one function may differ: float rounding, stated once.

Two paths that compute the same function in another order (the fused C++ decoder loop against the
per-step nodes or the Python code, torch's ``_foreach`` kernels against a loop over tensors, one
BLAS blocking against another) give the same numbers only up to rounding: which vector unit,
which BLAS kernel and which libm a CPU has decides the order of the additions and whether a
multiply-add is fused. So no test asserts bit equality between two paths; bit equality is kept
for one path run twice (determinism, resuming).

The bound: every rounding is at most ``eps`` (the dtype's machine epsilon) relative, a value
compared here is made of a few thousand roundings at most (sums over hidden units and positions,
steps feeding the next), and the differences do not all add up in one direction. ``ROUNDING_ULPS``
epsilons relative to the largest magnitude compared (at least 1) covers that with room, and is
still orders of magnitude below the differences a real error makes (a missing term, a wrong
gradient: 1e-3 and more). In float64 it is 2.3e-13, in float32 1.2e-4.
"""

import torch

ROUNDING_ULPS = 1024


def rounding_tolerance(dtype: torch.dtype, scale: float = 1.0) -> float:
    """The largest difference two paths may show on values of magnitude ``scale`` (at least 1)."""
    return ROUNDING_ULPS * torch.finfo(dtype).eps * max(1.0, float(scale))


def assert_same_up_to_rounding(got: torch.Tensor, want: torch.Tensor, where: str = "") -> None:
    """``got`` and ``want`` (one dtype, one shape) agree to float rounding (see the module)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (where, got.shape, want.shape, got.dtype, want.dtype)
    if want.numel() == 0:
        return
    assert torch.equal(got.isfinite(), want.isfinite()), where
    finite = want.isfinite()
    assert torch.equal(got[~finite], want[~finite]), where  # the same infinities (masks) on both paths
    got, want = got[finite], want[finite]
    if want.numel() == 0:
        return
    tolerance = rounding_tolerance(want.dtype, want.abs().max().item())
    difference = (got - want).abs().max().item()
    assert difference <= tolerance, f"{where}: the paths differ by {difference:.3g} > {tolerance:.3g}"
