"""LLTM: the cell of the PyTorch C++/CUDA extension tutorial (seed 002).

The matrix product stays in PyTorch (``torch.cat`` and ``addmm``, so autograd
differentiates it); the pointwise work is one fused kernel in the forward
(``fusedops::lltm_cell``) and one in the backward
(``fusedops::lltm_cell_backward``), which recomputes the activations from the
saved gate pre-activations and the new cell instead of saving them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._common import FLOATING, has_kernel

__all__ = ["LLTM", "lltm", "reference_lltm"]

_NAMES = ("input", "weights", "bias", "old_h", "old_cell")
_RANKS = (2, 2, 1, 2, 2)


# --- custom-op registrations ---------------------------------------------------------


@torch.library.register_fake("fusedops::lltm_cell")
def _lltm_cell_fake(gate_weights: torch.Tensor, old_cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(gate_weights.dim() == 2 and old_cell.dim() == 2, lambda: "lltm_cell: expected 2-D tensors")
    torch._check(gate_weights.shape[0] == old_cell.shape[0], lambda: "lltm_cell: batch sizes differ")
    torch._check(gate_weights.shape[1] == 3 * old_cell.shape[1], lambda: "lltm_cell: gate_weights must be (B, 3*S)")
    # The kernels return contiguous (B, S) tensors whatever the input strides.
    return old_cell.new_empty(old_cell.shape), old_cell.new_empty(old_cell.shape)


@torch.library.register_fake("fusedops::lltm_cell_backward")
def _lltm_cell_backward_fake(
    grad_h: torch.Tensor | None,
    grad_cell: torch.Tensor | None,
    gate_weights: torch.Tensor,
    new_cell: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(gate_weights.shape[1] == 3 * new_cell.shape[1], lambda: "lltm_cell_backward: bad shapes")
    return gate_weights.new_empty(gate_weights.shape), new_cell.new_empty(new_cell.shape)


def _lltm_cell_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    ctx.save_for_backward(inputs[0], output[1])
    # An unused output (e.g. only new_h feeds the loss) reaches the backward as
    # None instead of a materialised tensor of zeros; the kernel treats it as 0.
    ctx.set_materialize_grads(False)


def _lltm_cell_backward(
    ctx: Any, grad_h: torch.Tensor | None, grad_cell: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if grad_h is None and grad_cell is None:
        return None, None
    gate_weights, new_cell = ctx.saved_tensors
    d_gates, d_old_cell = torch.ops.fusedops.lltm_cell_backward.default(grad_h, grad_cell, gate_weights, new_cell)
    return d_gates, d_old_cell if ctx.needs_input_grad[1] else None


torch.library.register_autograd(
    "fusedops::lltm_cell", _lltm_cell_backward, setup_context=_lltm_cell_setup_context
)

_cell = torch.ops.fusedops.lltm_cell.default
_below_autograd = torch._C._AutoDispatchBelowAutograd
_functorch_active = torch._C._are_functorch_transforms_active
_is_compiling = torch.compiler.is_compiling


class _LLTMCellFunction(torch.autograd.Function):
    """Eager fast path: the same autograd formula as the registration above,
    without the generic machinery of ``register_autograd`` (default-argument
    filling, a Python redispatch), whose overhead dominates at small batches.
    torch.compile and functorch transforms take the registered op instead."""

    @staticmethod
    def forward(ctx: Any, gate_weights: torch.Tensor, old_cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with _below_autograd():
            new_h, new_cell = _cell(gate_weights, old_cell)
        ctx.save_for_backward(gate_weights, new_cell)
        ctx.set_materialize_grads(False)
        return new_h, new_cell

    backward = staticmethod(_lltm_cell_backward)


# Function.apply's C entry point (what Function.apply calls once it has ruled out
# functorch transforms, which _lltm_cell() checks itself).
_cell_apply = super(torch.autograd.Function, _LLTMCellFunction).apply


def _lltm_cell(gate_weights: torch.Tensor, old_cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if _is_compiling() or _functorch_active():
        return _cell(gate_weights, old_cell)
    if torch.is_grad_enabled() and (gate_weights.requires_grad or old_cell.requires_grad):
        return _cell_apply(gate_weights, old_cell)
    with _below_autograd():
        return _cell(gate_weights, old_cell)


# --- public API ----------------------------------------------------------------------


def _check_args(
    input: Any, weights: Any, bias: Any, old_h: Any, old_cell: Any
) -> None:
    # Fast path for valid arguments (this runs on every step; at small batches
    # the step is bound by host overhead); _explain_bad_args names the culprit.
    try:
        dtype = input.dtype
        device = input.device
        if (
            dtype in FLOATING
            and weights.dtype == dtype and bias.dtype == dtype and old_h.dtype == dtype and old_cell.dtype == dtype
            and weights.device == device and bias.device == device
            and old_h.device == device and old_cell.device == device
            and isinstance(input, torch.Tensor)
        ):
            batch, features = input.shape
            batch_h, state = old_h.shape
            if (
                batch_h == batch
                and old_cell.shape == (batch, state)
                and weights.shape == (3 * state, features + state)
                and bias.shape == (3 * state,)
            ):
                return
    except (AttributeError, ValueError, TypeError):
        pass
    _explain_bad_args((input, weights, bias, old_h, old_cell))
    raise ValueError("fusedops.lltm: invalid arguments")  # unreachable: _explain_bad_args raises


def _explain_bad_args(args: tuple[Any, ...]) -> None:
    for name, value in zip(_NAMES, args, strict=True):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"fusedops.lltm: {name} must be a torch.Tensor, got {type(value).__name__}")
    dtype = args[0].dtype
    if dtype not in FLOATING:
        raise TypeError(f"fusedops.lltm: input must be float16, bfloat16, float32 or float64, got {dtype}")
    device = args[0].device
    for name, value, rank in zip(_NAMES, args, _RANKS, strict=True):
        if value.dtype != dtype:
            raise TypeError(f"fusedops.lltm: {name} must have the dtype of input ({dtype}), got {value.dtype}")
        if value.device != device:
            raise ValueError(f"fusedops.lltm: {name} must be on the device of input ({device}), got {value.device}")
        if value.dim() != rank:
            raise ValueError(f"fusedops.lltm: {name} must be {rank}-D, got shape {tuple(value.shape)}")
    input, weights, bias, old_h, old_cell = args
    batch, features = input.shape
    state = old_h.shape[1]
    if old_h.shape[0] != batch:
        raise ValueError(f"fusedops.lltm: old_h must have shape (batch={batch}, state_size), got {tuple(old_h.shape)}")
    if old_cell.shape != (batch, state):
        raise ValueError(
            f"fusedops.lltm: old_cell must have the shape of old_h {(batch, state)}, got {tuple(old_cell.shape)}"
        )
    if weights.shape != (3 * state, features + state):
        raise ValueError(
            "fusedops.lltm: weights must have shape (3*state_size, input_features + state_size) = "
            f"{(3 * state, features + state)}, got {tuple(weights.shape)}"
        )
    if bias.shape != (3 * state,):
        raise ValueError(
            f"fusedops.lltm: bias must have shape (3*state_size,) = ({3 * state},), got {tuple(bias.shape)}"
        )


def lltm(
    input: torch.Tensor,
    weights: torch.Tensor,
    bias: torch.Tensor,
    old_h: torch.Tensor,
    old_cell: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the LLTM cell (the PyTorch C++/CUDA extension tutorial's cell).

    ``X = cat([old_h, input], 1)``; ``gates = addmm(bias, X, weights.t())`` split in
    three along dim 1; ``new_cell = old_cell + elu(gates[2]) * sigmoid(gates[0])``;
    ``new_h = tanh(new_cell) * sigmoid(gates[1])``. The matrix product runs in
    PyTorch; the pointwise forward and backward are one fused kernel each.
    Differentiable with respect to every argument.

    Args:
        input: ``(batch, input_features)``.
        weights: ``(3 * state_size, input_features + state_size)``.
        bias: ``(3 * state_size,)``.
        old_h: ``(batch, state_size)``, the previous hidden state.
        old_cell: ``(batch, state_size)``, the previous cell state.

        All five share one floating dtype (float16, bfloat16, float32 or
        float64) and one device; any strides.

    Returns:
        ``(new_h, new_cell)``, contiguous ``(batch, state_size)`` tensors.
    """
    _check_args(input, weights, bias, old_h, old_cell)
    gate_weights = F.linear(torch.cat((old_h, input), 1), weights, bias)  # == addmm(bias, X, weights.t())
    if not has_kernel(gate_weights.device):
        return _reference_cell(gate_weights, old_cell)
    new_h, new_cell = _lltm_cell(gate_weights, old_cell)
    return new_h, new_cell


class LLTM(nn.Module):
    """The LLTM cell as a module: ``forward(input, (h, c)) -> (new_h, new_cell)``.

    Parameters ``weights`` ``(3 * state_size, input_features + state_size)`` and
    ``bias`` ``(3 * state_size,)``, initialised uniformly in
    ``[-1/sqrt(state_size), 1/sqrt(state_size)]``.
    """

    def __init__(
        self,
        input_features: int,
        state_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if input_features < 0 or state_size <= 0:
            raise ValueError(
                f"fusedops.LLTM: need input_features >= 0 and state_size > 0, got {input_features}, {state_size}"
            )
        self.input_features = input_features
        self.state_size = state_size
        factory = {"device": device, "dtype": dtype}
        self.weights = nn.Parameter(torch.empty(3 * state_size, input_features + state_size, **factory))
        self.bias = nn.Parameter(torch.empty(3 * state_size, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.state_size)
        with torch.no_grad():
            for weight in self.parameters():
                weight.uniform_(-stdv, +stdv)

    def forward(
        self, input: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise TypeError("fusedops.LLTM: state must be a pair (h, c) of tensors")
        return lltm(input, self.weights, self.bias, state[0], state[1])

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"


def _reference_cell(gate_weights: torch.Tensor, old_cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    gates = gate_weights.chunk(3, dim=1)
    input_gate = torch.sigmoid(gates[0])
    output_gate = torch.sigmoid(gates[1])
    candidate_cell = F.elu(gates[2])
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


def reference_lltm(
    input: torch.Tensor,
    weights: torch.Tensor,
    bias: torch.Tensor,
    old_h: torch.Tensor,
    old_cell: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain-PyTorch reference: the tutorial's LLTM forward, differentiated by autograd."""
    X = torch.cat([old_h, input], dim=1)
    gate_weights = torch.addmm(bias, X, weights.transpose(0, 1))
    return _reference_cell(gate_weights, old_cell)
