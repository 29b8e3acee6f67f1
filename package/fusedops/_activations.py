"""bias_act's activations: StyleGAN2-ADA's ``activation_funcs`` table and the kernels' coefficients."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch


def _linear(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return x


def _relu(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return torch.nn.functional.relu(x)


def _lrelu(x: torch.Tensor, alpha: float, **_: Any) -> torch.Tensor:
    return torch.nn.functional.leaky_relu(x, alpha)


def _tanh(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return torch.tanh(x)


def _sigmoid(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return torch.sigmoid(x)


def _elu(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return torch.nn.functional.elu(x)


def _selu(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return torch.nn.functional.selu(x)


def _softplus(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return torch.nn.functional.softplus(x)


def _swish(x: torch.Tensor, **_: Any) -> torch.Tensor:
    return torch.sigmoid(x) * x


@dataclasses.dataclass(frozen=True)
class Activation:
    """One entry of :data:`activation_funcs`, with the fields StyleGAN2-ADA's entries have.

    ``func(x, alpha=...)`` is the plain-PyTorch activation (the reference);
    ``def_alpha`` and ``def_gain`` are the defaults ``bias_act`` uses for
    ``alpha=None`` and ``gain=None``; ``has_2nd_grad`` says whether the second
    derivative is non-zero; ``cuda_idx`` and ``ref`` are kept for code that reads
    them. ``code`` is the kernel's activation code (csrc/bias_act_impl.h) and
    ``takes_alpha`` whether ``alpha`` changes anything (only ``lrelu``).
    """

    func: Any
    def_alpha: float
    def_gain: float
    cuda_idx: int
    ref: str
    has_2nd_grad: bool
    code: int
    takes_alpha: bool = False

    def __getitem__(self, key: str) -> Any:  # dnnlib.EasyDict-style access: spec["def_gain"]
        return getattr(self, key)


_SQRT2 = math.sqrt(2)

#: name -> activation, as in StyleGAN2-ADA's ``bias_act.activation_funcs``: the same
#: names, defaults (``def_alpha``, ``def_gain``) and meaning of ``alpha`` (the
#: negative slope of ``lrelu``; every other activation ignores it: ``elu`` is
#: ``F.elu`` with alpha 1, ``selu`` has its fixed constants).
activation_funcs: dict[str, Activation] = {
    "linear": Activation(_linear, 0.0, 1.0, 1, "", False, 0),
    "relu": Activation(_relu, 0.0, _SQRT2, 2, "y", False, 1),
    "lrelu": Activation(_lrelu, 0.2, _SQRT2, 3, "y", False, 2, takes_alpha=True),
    "tanh": Activation(_tanh, 0.0, 1.0, 4, "y", True, 3),
    "sigmoid": Activation(_sigmoid, 0.0, 1.0, 5, "y", True, 4),
    "elu": Activation(_elu, 0.0, 1.0, 6, "y", True, 5),
    "selu": Activation(_selu, 0.0, 1.0, 7, "y", True, 6),
    "softplus": Activation(_softplus, 0.0, 1.0, 8, "y", True, 7),
    "swish": Activation(_swish, 0.0, _SQRT2, 9, "x", True, 8),
}
IMPLS = ("cuda", "ref")


def kernel_alpha(act: str, alpha: float | None) -> float:
    """The kernel's alpha: lrelu's slope; 1 for elu (the kernel's elu is alpha * expm1); unused otherwise."""
    if act == "lrelu":
        return float(activation_funcs[act].def_alpha if alpha is None else alpha)
    return 1.0 if act == "elu" else 0.0
