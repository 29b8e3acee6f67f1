"""LLTM: the cell of the PyTorch C++/CUDA extension tutorial (pytorch/extension-cpp).

A drop-in for the tutorial's ``LLTMFunction.apply(input, weights, bias, old_h,
old_cell)`` and its ``LLTM`` module: the bias may be ``(3*state_size,)`` or the
tutorial's ``(1, 3*state_size)``, and ``LLTM`` keeps the tutorial's parameter
names and shapes, so state dicts move between the two in both directions.

The matrix products stay in PyTorch (cuBLAS/MKL); the pointwise work is one
fused kernel in the forward (``fusedops::lltm_cell``) and one in the backward
(``fusedops::lltm_cell_backward``), which recomputes the activations from the
saved gate pre-activations and the new cell instead of saving them.

In eager mode the whole step (concatenation, matrix product, cell) is one
``autograd.Function`` whose backward is the fused kernel plus the three matrix
reductions, like the tutorial's C++ extension: one autograd node instead of
three, which is what the step costs at small batches, where the host, not the
GPU, is the limit. On CUDA that node's forward and backward are one op call
each (``fusedops::_lltm_step``, ``_lltm_step_backward``: the matrix products
through torch's own CUDA addmm/mm called from C++), and a call seen before,
same tensors, shapes and cuBLAS settings, replays a CUDA graph of its launches
(csrc/cuda/lltm.cu says when). Under ``torch.compile`` and functorch transforms
the registered op with its registered autograd is used instead.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ._common import FLOATING, has_kernel

__all__ = ["LLTM", "lltm", "reference_lltm"]

_NAMES = ("input", "weights", "bias", "old_h", "old_cell")
_RANKS = (2, 2, 0, 2, 2)  # the bias's rank is checked on its own: 1 or 2


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
_cell_backward = torch.ops.fusedops.lltm_cell_backward.default
_below_autograd = torch._C._AutoDispatchBelowAutograd
_functorch_active = torch._C._are_functorch_transforms_active
_is_compiling = torch.compiler.is_compiling


class _LLTMFunction(torch.autograd.Function):
    """Eager fast path: the whole step as one autograd node.

    Forward: ``X = cat([old_h, input])``, ``gates = addmm(bias, X, weights.t())``,
    the fused cell. Backward: the fused cell backward, then ``d_X = d_gates @ weights``
    (split into ``d_old_h`` and ``d_input``), ``d_weights = d_gates.t() @ X`` and
    ``d_bias = d_gates.sum(0)`` in the bias's own shape, each only when needed.
    The same formulas as the registered autograd of ``lltm_cell`` composed with
    autograd's ``cat``/``addmm``; torch.compile and functorch use those instead.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        input: torch.Tensor,
        weights: torch.Tensor,
        bias: torch.Tensor,
        old_h: torch.Tensor,
        old_cell: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        X = torch.cat((old_h, input), 1)
        # The bias as 1-D (a view): addmm can then use cuBLASLt's bias epilogue
        # where its conditions hold instead of first broadcasting the bias into
        # the output; the result is the same either way.
        gates = torch.addmm(bias.reshape(-1), X, weights.t())
        with _below_autograd():
            new_h, new_cell = _cell(gates, old_cell)
        ctx.save_for_backward(X, weights, gates, new_cell)
        ctx.bias_2d = bias.dim() == 2
        ctx.set_materialize_grads(False)
        return new_h, new_cell

    @staticmethod
    @once_differentiable  # first-order, like the tutorial's extension: double backward raises
    def backward(ctx: Any, grad_h: torch.Tensor | None, grad_cell: torch.Tensor | None) -> tuple[Any, ...]:
        if grad_h is None and grad_cell is None:
            return None, None, None, None, None
        X, weights, gates, new_cell = ctx.saved_tensors
        with _below_autograd():
            d_gates, d_old_cell = _cell_backward(grad_h, grad_cell, gates, new_cell)
        need_input, need_weights, need_bias, need_h, need_cell = ctx.needs_input_grad
        d_input = d_old_h = d_weights = d_bias = None
        if need_input or need_h:
            d_X = d_gates.mm(weights)
            state = new_cell.shape[1]
            d_old_h, d_input = d_X[:, :state], d_X[:, state:]
        if need_weights:
            d_weights = d_gates.t().mm(X)
        if need_bias:
            d_bias = d_gates.sum(0, keepdim=ctx.bias_2d)
        return d_input, d_weights, d_bias, d_old_h, d_old_cell if need_cell else None


# Function.apply's C entry point (what Function.apply calls once it has ruled out
# functorch transforms, which lltm() checks itself): skips a Python frame.
_step_apply = super(torch.autograd.Function, _LLTMFunction).apply


def _cuda_step_ops() -> tuple[Any, Any] | None:
    """The CUDA step's two ops (csrc/cuda/lltm.cu) as the C++ callables below their OpOverloads, or None."""
    ops = torch.ops.fusedops
    if not (hasattr(ops, "_lltm_step") and hasattr(ops, "_lltm_step_backward")):
        return None
    # OpOverload.__call__ is a Python frame that only calls ._op; the step calls it directly.
    return tuple(getattr(o, "_op", o) for o in (ops._lltm_step.default, ops._lltm_step_backward.default))  # type: ignore[return-value]


def _blas_state_reader() -> Any:
    """A function returning an int that changes when a setting torch's cuBLAS calls read changes, or None.

    The CUDA step replays recorded CUDA graphs of its launches (csrc/cuda/lltm.cu); a recorded GEMM keeps the
    settings it was recorded with, so they are part of the graph's key: TF32, the float32 matmul precision, the
    reduced-precision reductions, the preferred BLAS library, deterministic algorithms. Where this torch lacks one
    of the getters, None: no graphs (every call eager).
    """
    names = ("_get_cublas_allow_tf32", "_get_float32_matmul_precision",
             "_get_cublas_allow_fp16_reduced_precision_reduction",
             "_get_cublas_allow_bf16_reduced_precision_reduction", "_get_blas_preferred_backend",
             "_get_deterministic_algorithms")
    getters = tuple(getattr(torch._C, name, None) for name in names)
    if any(g is None for g in getters):
        return None
    states: dict[Any, int] = {}

    def blas_state() -> int:
        state = tuple(g() for g in getters)
        found = states.get(state)
        if found is None:  # small non-negative ints, one per combination seen (hashes of strings vary by process)
            found = states.setdefault(state, len(states))
        return found

    return blas_state


class _LLTMCudaStep(torch.autograd.Function):
    """Eager fast path on CUDA: the step as one autograd node whose forward and backward are one op call each.

    ``fusedops::_lltm_step`` does the concatenation, the matrix product (torch's
    own CUDA addmm, called from C++) and the fused cell; ``_lltm_step_backward``
    the fused cell backward with the bias gradient (a fixed-order reduction of
    its own), and both matrix products of the backward (side by side on two
    streams at large sizes). The same kernels and cuBLAS calls as
    :class:`_LLTMFunction` in two host calls instead of seven, replayed as CUDA
    graphs when a call repeats one seen before: at the tutorial's size the step
    is bound by the host, and each cuBLAS call costs the host more than its kernel
    takes. Results are those of :class:`_LLTMFunction` bit for bit, except the
    bias gradient, which sums the rows in another order (equal up to rounding).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        input: torch.Tensor,
        weights: torch.Tensor,
        bias: torch.Tensor,
        old_h: torch.Tensor,
        old_cell: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with _below_autograd():
            new_h, new_cell, X, gates = _cuda_step(input, weights, bias, old_h, old_cell, _blas_state())
        ctx.save_for_backward(X, weights, gates, new_cell)
        ctx.bias_2d = bias.dim() == 2
        ctx.set_materialize_grads(False)
        return new_h, new_cell

    @staticmethod
    @once_differentiable  # first-order, like the tutorial's extension: double backward raises
    def backward(ctx: Any, grad_h: torch.Tensor | None, grad_cell: torch.Tensor | None) -> tuple[Any, ...]:
        if grad_h is None and grad_cell is None:
            return None, None, None, None, None
        X, weights, gates, new_cell = ctx.saved_tensors
        need_input, need_weights, need_bias, need_h, need_cell = ctx.needs_input_grad
        need_x = need_input or need_h
        with _below_autograd():
            d_X, d_weights, d_bias, d_old_cell = _cuda_step_backward(
                grad_h, grad_cell, X, weights, gates, new_cell, need_x, need_weights, need_bias, ctx.bias_2d,
                _blas_state(),
            )
        d_input = d_old_h = None
        if need_x:
            state = new_cell.shape[1]
            d_old_h, d_input = d_X[:, :state], d_X[:, state:]
        return (d_input, d_weights if need_weights else None, d_bias if need_bias else None, d_old_h,
                d_old_cell if need_cell else None)


_cuda_ops = _cuda_step_ops()
_cuda_step, _cuda_step_backward = _cuda_ops if _cuda_ops is not None else (None, None)
_cuda_step_apply = super(torch.autograd.Function, _LLTMCudaStep).apply
_blas_state = _blas_state_reader() or (lambda: -1)


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
                and (bias.shape == (3 * state,) or bias.shape == (1, 3 * state))
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
        if rank and value.dim() != rank:
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
    if bias.shape != (3 * state,) and bias.shape != (1, 3 * state):
        raise ValueError(
            f"fusedops.lltm: bias must have shape (3*state_size,) = ({3 * state},) or (1, 3*state_size) = "
            f"(1, {3 * state}), got {tuple(bias.shape)}"
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
    Differentiable with respect to every argument. Takes the arguments of the
    tutorial's ``LLTMFunction.apply`` in the same order.

    Args:
        input: ``(batch, input_features)``.
        weights: ``(3 * state_size, input_features + state_size)``.
        bias: ``(3 * state_size,)`` or, as the tutorial's module keeps it,
            ``(1, 3 * state_size)``; its gradient has the bias's shape.
        old_h: ``(batch, state_size)``, the previous hidden state.
        old_cell: ``(batch, state_size)``, the previous cell state.

        All five share one floating dtype (float16, bfloat16, float32 or
        float64) and one device; any strides.

    Returns:
        ``(new_h, new_cell)``, contiguous ``(batch, state_size)`` tensors.
    """
    _check_args(input, weights, bias, old_h, old_cell)
    if not has_kernel(input.device):
        return reference_lltm(input, weights, bias, old_h, old_cell)
    if _is_compiling() or _functorch_active():
        # Traced: autograd's cat/addmm and the registered op (fake kernel + autograd).
        gates = torch.addmm(bias, torch.cat((old_h, input), 1), weights.t())
        new_h, new_cell = _cell(gates, old_cell)
        return new_h, new_cell
    cuda_step = _cuda_step is not None and input.is_cuda
    if torch.is_grad_enabled() and (
        input.requires_grad or weights.requires_grad or bias.requires_grad or old_h.requires_grad
        or old_cell.requires_grad
    ):
        if cuda_step:
            new_h, new_cell = _cuda_step_apply(input, weights, bias, old_h, old_cell)
        else:
            new_h, new_cell = _step_apply(input, weights, bias, old_h, old_cell)
        return new_h, new_cell
    if cuda_step:
        with _below_autograd():
            new_h, new_cell, _, _ = _cuda_step(input, weights, bias, old_h, old_cell, _blas_state())
        return new_h, new_cell
    with _below_autograd():
        gates = torch.addmm(bias.reshape(-1), torch.cat((old_h, input), 1), weights.t())
        new_h, new_cell = _cell(gates, old_cell)
    return new_h, new_cell


class LLTM(nn.Module):
    """The LLTM cell as a module: ``forward(input, (h, c)) -> (new_h, new_cell)``.

    The tutorial's module, parameter for parameter: ``weights``
    ``(3 * state_size, input_features + state_size)`` and ``bias``
    ``(1, 3 * state_size)``, both initialised uniformly in
    ``[-1/sqrt(state_size), 1/sqrt(state_size)]``. A state dict saved from the
    tutorial's ``LLTM`` loads as it is, and this module's state dict loads into
    the tutorial's. A state dict whose bias is ``(3 * state_size,)`` (fusedops
    0.1) loads too: the bias is reshaped on load.
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
        self.bias = nn.Parameter(torch.empty(1, 3 * state_size, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.state_size)
        with torch.no_grad():
            for weight in self.parameters():
                weight.uniform_(-stdv, +stdv)

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any], strict: bool,
        missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str],
    ) -> None:
        bias = state_dict.get(prefix + "bias")
        if isinstance(bias, torch.Tensor) and bias.shape == (3 * self.state_size,):
            state_dict = dict(state_dict)
            state_dict[prefix + "bias"] = bias.reshape(1, -1)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

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
