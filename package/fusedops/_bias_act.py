"""bias_act: fused bias + activation + gain + clamp (StyleGAN2's fused_bias_act, seed 001,
generalised as in StyleGAN2-ADA), with first- and second-order gradients.

Custom ops: ``fusedops::bias_act`` (forward), ``fusedops::bias_act_grad``
(gradient of order 1 or 2, recomputed from x and b) and
``fusedops::bias_act_grad_db`` (the backward: dx and the bias gradient from one
pass over dy and x where the layout allows). The backward of the order-1
gradient uses the order-2 kernel, so double backward (the R1/path-length
regularisers of StyleGAN2) runs on fused kernels too.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _fast
from ._activations import IMPLS, Activation, activation_funcs, kernel_alpha
from ._common import FLOATING, has_kernel, like_kernel_output


def _reduce_dims(x: torch.Tensor, dim: int) -> list[int]:
    return [d for d in range(x.dim()) if d != dim]


@torch.library.register_fake("fusedops::bias_act")
def _bias_act_fake(x: torch.Tensor, b: torch.Tensor | None, dim: int, act: int, alpha: float, gain: float,
                   clamp: float) -> torch.Tensor:
    return like_kernel_output(x)


@torch.library.register_fake("fusedops::bias_act_grad")
def _bias_act_grad_fake(dy: torch.Tensor, x: torch.Tensor, b: torch.Tensor | None, dim: int, act: int, alpha: float,
                        gain: float, clamp: float, order: int) -> torch.Tensor:
    return like_kernel_output(x)


@torch.library.register_fake("fusedops::bias_act_grad_db")
def _bias_act_grad_db_fake(dy: torch.Tensor, x: torch.Tensor, b: torch.Tensor, dim: int, act: int, alpha: float,
                           gain: float, clamp: float) -> tuple[torch.Tensor, torch.Tensor]:
    return like_kernel_output(x), torch.empty_like(b, memory_format=torch.contiguous_format)


_op = torch.ops.fusedops.bias_act.default
_grad = torch.ops.fusedops.bias_act_grad.default
_grad_db = torch.ops.fusedops.bias_act_grad_db.default
_below_autograd = torch._C._AutoDispatchBelowAutograd
_functorch_active = torch._C._are_functorch_transforms_active
_is_compiling = torch.compiler.is_compiling
_launchers = _fast.launchers()
_dynamo_tracing = _fast.dynamo_tracing


def _setup_forward(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, b, *params = inputs
    ctx.save_for_backward(x, b)
    ctx.params = params


def _backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
    """dx (and db) of bias_act: one fused kernel for both where nothing differentiates the backward itself."""
    x, b = ctx.saved_tensors
    need_db = b is not None and ctx.needs_input_grad[1]
    if need_db and not torch.is_grad_enabled():
        # A first-order backward: dx and db from one pass over dy and x.
        with _below_autograd():
            dx, db = _grad_db(dy, x, b, *ctx.params)
        return (dx, db) + (None,) * len(ctx.params)
    if not torch.is_grad_enabled():
        with _below_autograd():
            return (_grad(dy, x, b, *ctx.params, 1), None) + (None,) * len(ctx.params)
    # A backward that is itself differentiated (create_graph=True): the order-1 op, whose registered autograd
    # brings in the order-2 kernel, and db as torch's sum of dx.
    dx = _grad(dy, x, b, *ctx.params, 1)
    db = dx.sum(_reduce_dims(x, ctx.params[0])) if need_db else None
    return (dx, db) + (None,) * len(ctx.params)


torch.library.register_autograd("fusedops::bias_act", _backward, setup_context=_setup_forward)


class _BiasActFunction(torch.autograd.Function):
    """Eager fast path: the op below autograd inside one plain autograd.Function.

    The same forward and backward as the registered autograd above, without the
    layers torch.library puts around it (argument flattening, a keyset
    redispatch): at small sizes a call is bound by the host, not the GPU.
    torch.compile and functorch transforms use the registered op instead.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b: torch.Tensor | None, *params: Any) -> torch.Tensor:  # type: ignore[override]
        with _below_autograd():
            y = _op(x, b, *params)
        ctx.save_for_backward(x, b)
        ctx.params = params
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        return _backward(ctx, dy)


_apply = super(torch.autograd.Function, _BiasActFunction).apply  # Function.apply's C entry point


def _setup_grad(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    dy, x, b, *params = inputs
    ctx.save_for_backward(dy, x, b)
    ctx.params = params[:-1]
    ctx.order = params[-1]


def _grad_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    if ctx.order != 1:
        raise NotImplementedError("fusedops.bias_act: gradients above the second order are not implemented")
    dy, x, b = ctx.saved_tensors
    dim = ctx.params[0]
    # dx = dy * gain * f'(z) * mask, linear in dy; d/dz brings in f''.
    g_dy = _grad(g, x, b, *ctx.params, 1) if ctx.needs_input_grad[0] else None
    g_x = None
    g_b = None
    if ctx.needs_input_grad[1] or (b is not None and ctx.needs_input_grad[2]):
        g_x = _grad(g * dy, x, b, *ctx.params, 2)
        if b is not None and ctx.needs_input_grad[2]:
            g_b = g_x.sum(_reduce_dims(x, dim))
    return (g_dy, g_x, g_b) + (None,) * (len(ctx.params) + 1)


torch.library.register_autograd("fusedops::bias_act_grad", _grad_backward, setup_context=_setup_grad)


def _setup_grad_db(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    dy, x, b, *params = inputs
    ctx.save_for_backward(dy, x, b)
    ctx.params = params
    ctx.order = 1


def _grad_db_backward(ctx: Any, g_dx: torch.Tensor | None, g_db: torch.Tensor | None) -> tuple[Any, ...]:
    # (dx, db = sum of dx over all but dim) is linear in dx: db's gradient reaches dx broadcast along dim.
    x = ctx.saved_tensors[1]
    dim = ctx.params[0]
    g = torch.zeros_like(x) if g_dx is None else g_dx
    if g_db is not None:
        g = g + g_db.reshape([-1 if d == dim else 1 for d in range(x.dim())])
    return _grad_backward(ctx, g)[:3] + (None,) * len(ctx.params)


torch.library.register_autograd("fusedops::bias_act_grad_db", _grad_db_backward, setup_context=_setup_grad_db)


def _resolve(
    x: Any, b: Any, dim: int, act: str, alpha: float | None, gain: float | None, clamp: float | None
) -> tuple[int, Activation, float, float, float]:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"fusedops.bias_act: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOATING:
        raise TypeError(f"fusedops.bias_act: x must be float16, bfloat16, float32 or float64, got {x.dtype}")
    if not isinstance(act, str) or act not in activation_funcs:
        raise ValueError(f"fusedops.bias_act: act must be one of {', '.join(activation_funcs)}, got {act!r}")
    spec = activation_funcs[act]
    if b is not None:
        if not isinstance(b, torch.Tensor):
            raise TypeError(f"fusedops.bias_act: b must be a torch.Tensor or None, got {type(b).__name__}")
        if not -x.dim() <= dim < x.dim():
            raise ValueError(f"fusedops.bias_act: dim={dim} is out of range for x with {x.dim()} dimensions")
        dim %= x.dim()
        if b.dim() != 1 or b.shape[0] != x.shape[dim]:
            raise ValueError(
                f"fusedops.bias_act: b must be 1-D with x.shape[{dim}] = {x.shape[dim]} elements, "
                f"got shape {tuple(b.shape)}"
            )
        if b.dtype != x.dtype:
            raise TypeError(f"fusedops.bias_act: b has dtype {b.dtype}, x has {x.dtype}")
        if b.device != x.device:
            raise ValueError(f"fusedops.bias_act: b is on {b.device}, x is on {x.device}")
    elif x.dim() > 0:
        dim %= x.dim()
    if alpha is not None and not isinstance(alpha, (int, float)):
        raise TypeError(f"fusedops.bias_act: alpha must be a number or None, got {type(alpha).__name__}")
    if gain is not None and not isinstance(gain, (int, float)):
        raise TypeError(f"fusedops.bias_act: gain must be a number or None, got {type(gain).__name__}")
    if clamp is not None and not isinstance(clamp, (int, float)):
        raise TypeError(f"fusedops.bias_act: clamp must be a number or None, got {type(clamp).__name__}")
    if clamp is not None and clamp < 0:
        raise ValueError(f"fusedops.bias_act: clamp must be >= 0 or None, got {clamp}")
    return dim, spec, kernel_alpha(act, alpha), float(spec.def_gain if gain is None else gain), (
        -1.0 if clamp is None else float(clamp)
    )


def bias_act(
    x: torch.Tensor,
    b: torch.Tensor | None = None,
    dim: int = 1,
    act: str = "linear",
    alpha: float | None = None,
    gain: float | None = None,
    clamp: float | None = None,
    impl: str = "cuda",
) -> torch.Tensor:
    """Fused bias, activation, gain and clamp: ``clamp(act(x + b) * gain, -clamp, clamp)``.

    StyleGAN2-ADA's ``torch_utils.ops.bias_act.bias_act``, with the same
    arguments, defaults and results.

    Args:
        x: input of any shape, layout and floating dtype.
        b: optional 1-D bias with ``x.shape[dim]`` elements, added along ``dim``;
            same dtype and device as ``x``.
        dim: the dimension ``b`` runs along (default 1, the channels of NCHW);
            ignored without ``b``. Negative values count from the end.
        act: one of ``linear, relu, lrelu, tanh, sigmoid, elu, selu, softplus, swish``.
        alpha: the negative slope of ``lrelu`` (default 0.2); the other
            activations ignore it, as in the original.
        gain: output scale; ``None`` takes the activation's default
            ``activation_funcs[act].def_gain`` (``sqrt(2)`` for relu, lrelu and
            swish, 1 otherwise).
        clamp: clamp the output to ``[-clamp, clamp]``; ``None`` for no clamp.
            The gradient is zero where the output was clamped.
        impl: ``"cuda"`` (default): the fused kernel, on every device that has
            one (CPU and CUDA; the original used its CUDA kernel on CUDA tensors
            only); ``"ref"``: the plain-PyTorch reference.

    Returns:
        A tensor like ``x`` (same layout for dense inputs). Differentiable twice
        with respect to ``x`` and ``b`` (``impl="ref"``: to any order).
    """
    # A plain eager call on contiguous CUDA tensors without autograd goes straight to the kernel: one C call reads
    # the tensors, checks the arguments it takes, allocates and launches (csrc/cuda/fast_launch.cpp; at 2^20 elements
    # the host's time is the call's time). It returns None for every other call, and for every argument it does not
    # take, which then goes on to the general path below: that one checks everything (and raises).
    if _launchers is not None and not _dynamo_tracing():
        y = _launchers.bias_act(x, b, dim, act, alpha, gain, clamp, impl)
        if y is not None:
            return y
    if impl not in IMPLS:
        raise ValueError(f"fusedops.bias_act: impl must be 'cuda' or 'ref', got {impl!r}")
    dim, spec, alpha_, gain_, clamp_ = _resolve(x, b, dim, act, alpha, gain, clamp)
    if impl == "ref" or not has_kernel(x.device):
        return reference_bias_act(x, b, dim, act, alpha, gain, clamp)
    if _is_compiling() or _functorch_active():
        return _op(x, b, dim, spec.code, alpha_, gain_, clamp_)
    if torch.is_grad_enabled() and (x.requires_grad or (b is not None and b.requires_grad)):
        y: torch.Tensor = _apply(x, b, dim, spec.code, alpha_, gain_, clamp_)
        return y
    with _below_autograd():
        return _op(x, b, dim, spec.code, alpha_, gain_, clamp_)


def reference_bias_act(
    x: torch.Tensor,
    b: torch.Tensor | None = None,
    dim: int = 1,
    act: str = "linear",
    alpha: float | None = None,
    gain: float | None = None,
    clamp: float | None = None,
) -> torch.Tensor:
    """Plain-PyTorch bias_act (differentiable to any order through torch's own autograd).

    Step for step the original's reference: add the bias, ``activation_funcs[act].func``,
    multiply by the gain unless it is 1, clamp unless ``clamp`` is None.
    """
    spec = activation_funcs[act]
    alpha_ = float(spec.def_alpha if alpha is None else alpha)
    gain_ = float(spec.def_gain if gain is None else gain)
    if b is not None:
        dim %= x.dim()
        x = x + b.reshape([-1 if d == dim else 1 for d in range(x.dim())])
    y = spec.func(x, alpha=alpha_)
    if gain_ != 1:
        y = y * gain_
    if clamp is not None and clamp >= 0:
        y = y.clamp(-clamp, clamp)
    return y
