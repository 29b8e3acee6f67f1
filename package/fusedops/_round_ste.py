"""round_ste: round forward, straight-through gradient backward (seed 003)."""

from __future__ import annotations

from typing import Any

import torch

from ._common import check_tensor, has_kernel, like_kernel_output


@torch.library.register_fake("fusedops::round_ste")
def _round_ste_fake(x: torch.Tensor) -> torch.Tensor:
    return like_kernel_output(x)


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
    check_tensor(x, "x", "round_ste")
    if not has_kernel(x.device):
        return reference_round_ste(x)
    return torch.ops.fusedops.round_ste.default(x)


def reference_round_ste(x: torch.Tensor) -> torch.Tensor:
    """Plain-PyTorch reference: round half to even forward, identity gradient."""
    return x + (torch.round(x) - x).detach()
