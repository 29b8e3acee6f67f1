"""The eager fast path's set-up: fusedops._C_cuda reads the tensors of a call itself (csrc/cuda/fast_launch.cpp).

A plain eager call of ``round_ste`` or ``bias_act`` on contiguous CUDA tensors, without autograd, launches the kernel
without the dispatcher: at 2^20 elements the host's time is the call's time. The module is told once which Python
objects stand for what, so the rules of which calls it takes stay written here: the tensor types, the dtypes (in
the order of fast_launch.h's codes), the checks that send a call to the registered op (while torch.compile's Dynamo
traces, the op modules test ``is_dynamo_compiling`` before calling in), and the activation table.
"""

from __future__ import annotations

from typing import Any

import torch

from ._activations import activation_funcs, kernel_alpha
from ._common import _package

#: The dtype codes of csrc/cuda/fast_launch.h, in order.
CUDA_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

#: Each returns something true while the op must be seen: a functorch transform, a torch function or dispatch mode,
#: the profiler, the JIT tracer.
NOT_PLAIN = (
    torch._C._are_functorch_transforms_active,
    torch._C._is_torch_function_mode_enabled,
    torch._C._len_torch_dispatch_stack,
    torch.autograd._profiler_enabled,
    torch._C._is_tracing,  # a bool: 60 ns cheaper on the H100's host than _get_tracing_state's object
)

# Dynamo folds is_dynamo_compiling() to True while it traces: the op modules' fast path is then dead code to it.
dynamo_tracing = torch.compiler.is_dynamo_compiling


def activation_table() -> tuple[tuple[str, int, bool, float, float], ...]:
    """(name, kernel code, takes alpha, the kernel's alpha for alpha=None, default gain) per activation."""
    return tuple(
        (name, spec.code, spec.takes_alpha, kernel_alpha(name, None), spec.def_gain)
        for name, spec in activation_funcs.items()
    )


def launchers() -> Any:
    """fusedops._C_cuda, configured, when the CUDA kernels loaded; else None (read once by each op module)."""
    module = _package._state.launchers
    if module is not None:
        module.configure((torch.Tensor, torch.nn.Parameter), torch.empty_like, torch.is_grad_enabled, NOT_PLAIN,
                         CUDA_DTYPES, activation_table())
    return module
