"""round_ste: round forward, straight-through gradient backward (seed 003)."""

from __future__ import annotations

from typing import Any

import torch

from . import _fast
from ._common import FLOATING, check_tensor, has_kernel, like_kernel_output


@torch.library.register_fake("fusedops::round_ste")
def _round_ste_fake(x: torch.Tensor) -> torch.Tensor:
    return like_kernel_output(x)


def _round_ste_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    return grad


torch.library.register_autograd("fusedops::round_ste", _round_ste_backward)

_op = torch.ops.fusedops.round_ste.default
_below_autograd = torch._C._AutoDispatchBelowAutograd
_functorch_active = torch._C._are_functorch_transforms_active
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


class _RoundSTEFunction(torch.autograd.Function):
    """Eager fast path: the op below autograd in a plain autograd.Function (see _bias_act.py)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        with _below_autograd():
            y: torch.Tensor = _op(x)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad


_apply = super(torch.autograd.Function, _RoundSTEFunction).apply  # Function.apply's C entry point
_launchers = _fast.launchers()
_dynamo_tracing = _fast.dynamo_tracing


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
    # A contiguous CUDA tensor without autograd, in plain eager code: straight to the kernel, all in one C call that
    # returns None for any other call (csrc/cuda/fast_launch.cpp; at 2^20 elements the call through torch.ops cost the
    # host more than the kernel takes).
    if _launchers is not None and not _dynamo_tracing():
        y = _launchers.round_ste(x)
        if y is not None:
            return y
    # The common eager call without autograd, checked in one expression: at small sizes the call is bound by the
    # host, and this saves a fifth of the Python time of the general path below.
    if (
        type(x) is torch.Tensor and x.dtype in FLOATING and not (x.requires_grad and _grad_enabled())
        and (x.is_cpu or (x.is_cuda and has_kernel(x.device))) and not _is_compiling() and not _functorch_active()
    ):
        with _below_autograd():
            return _op(x)
    check_tensor(x, "x", "round_ste")
    if not has_kernel(x.device):
        return reference_round_ste(x)
    if _is_compiling() or _functorch_active():
        return _op(x)
    if x.requires_grad and torch.is_grad_enabled():
        y: torch.Tensor = _apply(x)
        return y
    with _below_autograd():
        return _op(x)


def reference_round_ste(x: torch.Tensor) -> torch.Tensor:
    """Plain-PyTorch reference: round half to even forward, identity gradient."""
    return x + (torch.round(x) - x).detach()
