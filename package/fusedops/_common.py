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


#: The dtype codes of csrc/cuda/fast_launch.h.
CUDA_DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}


def fast_launchers() -> Any:
    """fusedops._C_cuda's launchers when the CUDA kernels loaded, else None (read once, by each op module)."""
    return _package._state.launchers


# Dynamo folds is_dynamo_compiling() to True while it traces, and in eager code it is one Python call where
# is_compiling() is two (non-strict export runs under a dispatch mode, which the checks below see).
_dynamo_tracing = torch.compiler.is_dynamo_compiling
_functorch_active = torch._C._are_functorch_transforms_active
_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_profiling = torch.autograd._profiler_enabled
_jit_tracing = torch._C._get_tracing_state


def plain_eager() -> bool:
    """True when nothing has to see the op: no torch.compile, functorch transform, torch function or dispatch
    mode, profiler or JIT tracer. Only then may a call skip the dispatcher (the launchers of fast_launchers)."""
    return not (
        _dynamo_tracing() or _functorch_active() or _function_mode() or _dispatch_modes() or _profiling()
        or _jit_tracing() is not None
    )
