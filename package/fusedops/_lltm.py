"""LLTM: the cell of the PyTorch C++/CUDA extension tutorial (seeds 002 and 004).

The matrix product stays in PyTorch (cuBLAS/MKL, autograd by torch); the
pointwise work is one fused kernel forward (``fusedops::lltm_cell``) and one
backward (``fusedops::lltm_cell_backward``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ._common import FLOATING, has_kernel


@torch.library.register_fake("fusedops::lltm_cell")
def _lltm_cell_fake(gate_weights: torch.Tensor, old_cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return old_cell.new_empty(old_cell.shape), old_cell.new_empty(old_cell.shape)


@torch.library.register_fake("fusedops::lltm_cell_backward")
def _lltm_cell_backward_fake(
    grad_h: torch.Tensor, grad_cell: torch.Tensor, gate_weights: torch.Tensor, new_cell: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return gate_weights.new_empty(gate_weights.shape), new_cell.new_empty(new_cell.shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    gate_weights, _old_cell = inputs
    ctx.save_for_backward(gate_weights, output[1])


def _backward(
    ctx: Any, grad_h: torch.Tensor | None, grad_cell: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    gate_weights, new_cell = ctx.saved_tensors
    if grad_h is None:
        grad_h = torch.zeros_like(new_cell)
    if grad_cell is None:
        grad_cell = torch.zeros_like(new_cell)
    d_gates, d_old_cell = torch.ops.fusedops.lltm_cell_backward.default(grad_h, grad_cell, gate_weights, new_cell)
    return d_gates, d_old_cell


torch.library.register_autograd("fusedops::lltm_cell", _backward, setup_context=_setup_context)


def _check(args: dict[str, Any]) -> None:
    first = args["input"]
    for name, value in args.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"fusedops.lltm: {name} must be a torch.Tensor, got {type(value).__name__}")
        if value.dtype not in FLOATING:
            raise TypeError(f"fusedops.lltm: {name} must be a floating-point tensor, got {value.dtype}")
        if value.dtype != first.dtype:
            raise TypeError(f"fusedops.lltm: {name} has dtype {value.dtype}, input has {first.dtype}")
        if value.device != first.device:
            raise ValueError(f"fusedops.lltm: {name} is on {value.device}, input is on {first.device}")
    inp, weights, bias, old_h, old_cell = args.values()
    if inp.dim() != 2:
        raise ValueError(f"fusedops.lltm: input must be 2-D (batch, features), got shape {tuple(inp.shape)}")
    if old_h.dim() != 2 or old_cell.shape != old_h.shape or old_h.shape[0] != inp.shape[0]:
        raise ValueError(
            f"fusedops.lltm: old_h and old_cell must both be (batch={inp.shape[0]}, state), "
            f"got {tuple(old_h.shape)} and {tuple(old_cell.shape)}"
        )
    state = old_h.shape[1]
    if weights.shape != (3 * state, inp.shape[1] + state):
        raise ValueError(
            f"fusedops.lltm: weights must be (3*state, features+state) = ({3 * state}, {inp.shape[1] + state}), "
            f"got {tuple(weights.shape)}"
        )
    if bias.shape != (3 * state,):
        raise ValueError(f"fusedops.lltm: bias must have shape ({3 * state},), got {tuple(bias.shape)}")


def lltm(
    input: torch.Tensor,
    weights: torch.Tensor,
    bias: torch.Tensor,
    old_h: torch.Tensor,
    old_cell: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the LLTM cell.

    ``X = cat([old_h, input], 1)``, ``gates = X @ weights.T + bias`` split in
    three: input gate ``sigmoid``, output gate ``sigmoid``, candidate cell
    ``elu``; ``new_cell = old_cell + candidate * input_gate``,
    ``new_h = tanh(new_cell) * output_gate``.

    Args:
        input: (batch, features).
        weights: (3*state, features + state).
        bias: (3*state,).
        old_h, old_cell: (batch, state).

    Returns:
        ``(new_h, new_cell)``, both (batch, state). Differentiable with respect
        to every argument.
    """
    _check({"input": input, "weights": weights, "bias": bias, "old_h": old_h, "old_cell": old_cell})
    if not has_kernel(input.device):
        return reference_lltm(input, weights, bias, old_h, old_cell)
    gate_weights = torch.addmm(bias, torch.cat([old_h, input], dim=1), weights.t())
    new_h, new_cell = torch.ops.fusedops.lltm_cell.default(gate_weights, old_cell)
    return new_h, new_cell


def reference_lltm(
    input: torch.Tensor,
    weights: torch.Tensor,
    bias: torch.Tensor,
    old_h: torch.Tensor,
    old_cell: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain-PyTorch LLTM, as in the tutorial."""
    gate_weights = torch.addmm(bias, torch.cat([old_h, input], dim=1), weights.t())
    gates = gate_weights.chunk(3, dim=1)
    input_gate = torch.sigmoid(gates[0])
    output_gate = torch.sigmoid(gates[1])
    candidate_cell = torch.nn.functional.elu(gates[2], alpha=1.0)
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


class LLTM(nn.Module):
    """The LLTM cell as a module: ``forward(input, (h, c)) -> (new_h, new_cell)``."""

    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = nn.Parameter(torch.empty(3 * state_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.state_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -stdv, +stdv)

    def forward(
        self, input: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return lltm(input, self.weights, self.bias, *state)
