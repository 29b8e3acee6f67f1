"""bias_act: fused bias + activation + gain + clamp (StyleGAN2's fused_bias_act, seed 001,
generalised as in StyleGAN2-ADA), with first- and second-order gradients.

Custom ops: ``fusedops::bias_act`` (forward) and ``fusedops::bias_act_grad``
(gradient of order 1 or 2, recomputed from x and b). The backward of the
order-1 gradient uses the order-2 kernel, so double backward (the R1/path-length
regularisers of StyleGAN2) runs on fused kernels too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ._common import FLOATING, has_kernel, like_kernel_output


@dataclasses.dataclass(frozen=True)
class Activation:
    code: int
    def_alpha: float
    def_gain: float


#: name -> (kernel code, default alpha, default gain); codes match csrc/bias_act_impl.h.
activation_funcs: dict[str, Activation] = {
    "linear": Activation(0, 0.0, 1.0),
    "relu": Activation(1, 0.0, math.sqrt(2)),
    "lrelu": Activation(2, 0.2, math.sqrt(2)),
    "tanh": Activation(3, 0.0, 1.0),
    "sigmoid": Activation(4, 0.0, 1.0),
    "elu": Activation(5, 1.0, 1.0),
    "selu": Activation(6, 0.0, 1.0),
    "softplus": Activation(7, 0.0, 1.0),
    "swish": Activation(8, 0.0, math.sqrt(2)),
}
_BY_CODE = {a.code: name for name, a in activation_funcs.items()}


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


def _setup_forward(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, b, *params = inputs
    ctx.save_for_backward(x, b)
    ctx.params = params


def _forward_backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
    x, b = ctx.saved_tensors
    dim = ctx.params[0]
    dx = torch.ops.fusedops.bias_act_grad.default(dy, x, b, *ctx.params, 1)
    db = dx.sum(_reduce_dims(x, dim)) if b is not None and ctx.needs_input_grad[1] else None
    return (dx, db) + (None,) * len(ctx.params)


torch.library.register_autograd("fusedops::bias_act", _forward_backward, setup_context=_setup_forward)


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
    g_dy = torch.ops.fusedops.bias_act_grad.default(g, x, b, *ctx.params, 1) if ctx.needs_input_grad[0] else None
    g_x = None
    g_b = None
    if ctx.needs_input_grad[1] or (b is not None and ctx.needs_input_grad[2]):
        g_x = torch.ops.fusedops.bias_act_grad.default(g * dy, x, b, *ctx.params, 2)
        if b is not None and ctx.needs_input_grad[2]:
            g_b = g_x.sum(_reduce_dims(x, dim))
    return (g_dy, g_x, g_b) + (None,) * (len(ctx.params) + 1)


torch.library.register_autograd("fusedops::bias_act_grad", _grad_backward, setup_context=_setup_grad)


def _resolve(
    x: Any, b: Any, dim: int, act: str, alpha: float | None, gain: float | None, clamp: float | None
) -> tuple[int, Activation, float, float, float]:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"fusedops.bias_act: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOATING:
        raise TypeError(f"fusedops.bias_act: x must be float16, bfloat16, float32 or float64, got {x.dtype}")
    if act not in activation_funcs:
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
    if clamp is not None and clamp < 0:
        raise ValueError(f"fusedops.bias_act: clamp must be >= 0 or None, got {clamp}")
    return (
        dim,
        spec,
        float(spec.def_alpha if alpha is None else alpha),
        float(spec.def_gain if gain is None else gain),
        -1.0 if clamp is None else float(clamp),
    )


def bias_act(
    x: torch.Tensor,
    b: torch.Tensor | None = None,
    dim: int = 1,
    act: str = "linear",
    alpha: float | None = None,
    gain: float | None = None,
    clamp: float | None = None,
) -> torch.Tensor:
    """Fused bias, activation, gain and clamp: ``clamp(act(x + b) * gain, -clamp, clamp)``.

    Args:
        x: input of any shape, layout and floating dtype.
        b: optional 1-D bias with ``x.shape[dim]`` elements, added along ``dim``.
        dim: the dimension ``b`` runs along (default 1, the channels of NCHW).
        act: one of ``linear, relu, lrelu, tanh, sigmoid, elu, selu, softplus, swish``.
        alpha: the activation's shape parameter (lrelu slope, elu scale); ``None``
            takes the activation's default.
        gain: output scale; ``None`` takes the activation's default (``sqrt(2)``
            for relu, lrelu and swish, 1 otherwise).
        clamp: clamp the output to ``[-clamp, clamp]``; ``None`` for no clamp.
            The gradient is zero where the output was clamped.

    Returns:
        A tensor like ``x`` (same layout for dense inputs). Differentiable twice
        with respect to ``x`` and ``b``.
    """
    dim, spec, alpha_, gain_, clamp_ = _resolve(x, b, dim, act, alpha, gain, clamp)
    if not has_kernel(x.device):
        return reference_bias_act(x, b, dim, act, alpha, gain, clamp)
    return torch.ops.fusedops.bias_act.default(x, b, dim, spec.code, alpha_, gain_, clamp_)


def reference_bias_act(
    x: torch.Tensor,
    b: torch.Tensor | None = None,
    dim: int = 1,
    act: str = "linear",
    alpha: float | None = None,
    gain: float | None = None,
    clamp: float | None = None,
) -> torch.Tensor:
    """Plain-PyTorch bias_act (differentiable to any order through torch's own autograd)."""
    spec = activation_funcs[act]
    alpha_ = float(spec.def_alpha if alpha is None else alpha)
    gain_ = float(spec.def_gain if gain is None else gain)
    if b is not None:
        dim %= x.dim()
        x = x + b.reshape([-1 if d == dim else 1 for d in range(x.dim())])
    fn = torch.nn.functional
    if act == "linear":
        y = x
    elif act == "relu":
        y = fn.relu(x)
    elif act == "lrelu":
        y = fn.leaky_relu(x, alpha_)
    elif act == "tanh":
        y = torch.tanh(x)
    elif act == "sigmoid":
        y = torch.sigmoid(x)
    elif act == "elu":
        y = fn.elu(x, alpha_)
    elif act == "selu":
        y = fn.selu(x)
    elif act == "softplus":
        y = fn.softplus(x)
    else:
        y = torch.sigmoid(x) * x
    if gain_ != 1:
        y = y * gain_
    if clamp is not None and clamp >= 0:
        y = y.clamp(-clamp, clamp)
    return y
