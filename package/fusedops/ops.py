"""Python side of the custom ops: validation, fake kernels and autograd.

The C++/CUDA kernels are registered with the dispatcher as ``fusedops::<name>``;
this module registers their fake (meta) implementations for torch.compile and
their backward formulas, and exposes the public functions.
"""

from __future__ import annotations

from typing import Any

import torch

from . import reference

_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def is_non_overlapping_and_dense(x: torch.Tensor) -> bool:
    """Same rule as ``is_non_overlapping_and_dense`` in csrc/common.h (kept in step with it)."""
    dims = sorted((d for d in range(x.dim()) if x.size(d) >= 2), key=x.stride)
    expected = 1
    for d in dims:
        if x.stride(d) != expected:
            return False
        expected *= x.size(d)
    return True


def _like_kernel_output(x: torch.Tensor) -> torch.Tensor:
    """Mirror of the kernels' allocation: dense inputs keep their layout, others become contiguous."""
    return torch.empty_like(x if is_non_overlapping_and_dense(x) else x.contiguous())


def _check_tensor(value: Any, name: str, op: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"fusedops.{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in _FLOATING:
        raise TypeError(
            f"fusedops.{op}: {name} must be float16, bfloat16, float32 or float64, got {value.dtype}"
        )
    return value


def _has_kernel(device: torch.device) -> bool:
    from . import _state

    return device.type == "cpu" or (device.type == "cuda" and _state.cuda_kernels)


# --- round_ste -----------------------------------------------------------------


@torch.library.register_fake("fusedops::round_ste")
def _round_ste_fake(x: torch.Tensor) -> torch.Tensor:
    return _like_kernel_output(x)


def _round_ste_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    return grad


torch.library.register_autograd("fusedops::round_ste", _round_ste_backward)


def round_ste(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest integer (half to even, like :func:`torch.round`).

    The gradient passes straight through (straight-through estimator): the
    backward of ``round_ste`` is the identity, so quantisation-aware training
    can differentiate through rounding.

    Args:
        x: a floating-point tensor (float16, bfloat16, float32 or float64), any
            shape, layout and device.

    Returns:
        A tensor like ``x`` holding the rounded values.
    """
    _check_tensor(x, "x", "round_ste")
    if not _has_kernel(x.device):
        return reference.round_ste(x)
    return torch.ops.fusedops.round_ste.default(x)
