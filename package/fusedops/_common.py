"""Helpers shared by the op modules: argument checks and kernel-layout mirrors."""

from __future__ import annotations

import sys
from typing import Any

import torch

FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def is_non_overlapping_and_dense(x: torch.Tensor) -> bool:
    """Same rule as ``is_non_overlapping_and_dense`` in csrc/common.h (kept in step with it)."""
    dims = sorted((d for d in range(x.dim()) if x.size(d) >= 2), key=x.stride)
    expected = 1
    for d in dims:
        if x.stride(d) != expected:
            return False
        expected *= x.size(d)
    return True


def like_kernel_output(x: torch.Tensor) -> torch.Tensor:
    """Mirror of the kernels' allocation: dense inputs keep their layout, others become contiguous."""
    return torch.empty_like(x if is_non_overlapping_and_dense(x) else x.contiguous())


def check_tensor(value: Any, name: str, op: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"fusedops.{op}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in FLOATING:
        raise TypeError(
            f"fusedops.{op}: {name} must be float16, bfloat16, float32 or float64, got {value.dtype}"
        )
    return value


# The package module, whose _state (set by __init__ before the op modules load) says whether the CUDA
# kernels loaded; looked up as an attribute because an import statement in has_kernel cost a microsecond a call.
_package = sys.modules[__name__.rpartition(".")[0]]


def has_kernel(device: torch.device) -> bool:
    kind = device.type
    return kind == "cpu" or (kind == "cuda" and _package._state.cuda_kernels)
