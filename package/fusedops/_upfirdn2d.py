"""upfirdn2d: upsample, pad, FIR filter and downsample 2-D images in one pass.

Semantics follow StyleGAN2-ADA's ``torch_utils.ops.upfirdn2d`` (the code here is
our own): for each plane of an NCHW tensor,

1. upsample by inserting ``up - 1`` zeros after every sample (``up`` per axis),
2. pad by ``padding`` (negative values crop),
3. filter with ``f`` the way ``conv2d`` does with the weight ``f`` flipped in
   both axes, i.e. a true convolution with ``f`` (``flip_filter=True`` uses ``f``
   unflipped: a cross-correlation),
4. downsample by keeping every ``down``-th sample,

scaled by ``gain``. The custom op ``fusedops::upfirdn2d`` takes a 2-D filter;
a 1-D (separable) filter is applied as two passes, horizontal then vertical,
each with ``gain ** 0.5``. Its gradient with respect to ``x`` is the adjoint
upfirdn2d (``up`` and ``down`` swapped, the filter flipped, adjusted padding),
computed by the same op, so gradients of any order work. ``f`` gets no gradient.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ._common import check_tensor, has_kernel

_OP = "upfirdn2d"

Scaling = int | Sequence[int]
Padding = int | Sequence[int]

__all__ = [
    "downsample2d",
    "filter2d",
    "reference_upfirdn2d",
    "setup_filter",
    "upfirdn2d",
    "upsample2d",
]


# --- argument parsing --------------------------------------------------------------------


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"fusedops.{_OP}: {name} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"fusedops.{_OP}: {name} must be an int, got {type(value).__name__}") from None


def _parse_scaling(scaling: Scaling, name: str) -> tuple[int, int]:
    """``int`` or ``[sx, sy]`` -> ``(sx, sy)``, each >= 1."""
    if isinstance(scaling, (list, tuple)):
        if len(scaling) != 2:
            raise ValueError(f"fusedops.{_OP}: {name} must be an int or [{name}x, {name}y], got {list(scaling)}")
        sx, sy = (_as_int(s, name) for s in scaling)
    else:
        sx = sy = _as_int(scaling, name)
    if sx < 1 or sy < 1:
        raise ValueError(f"fusedops.{_OP}: {name} must be >= 1, got {scaling}")
    return sx, sy


def _parse_padding(padding: Padding) -> tuple[int, int, int, int]:
    """``int``, ``[p]``, ``[padx, pady]`` or ``[padx0, padx1, pady0, pady1]`` -> the four pads."""
    if isinstance(padding, (list, tuple)):
        values = [_as_int(p, "padding") for p in padding]
        if len(values) == 1:
            return values[0], values[0], values[0], values[0]
        if len(values) == 2:
            return values[0], values[0], values[1], values[1]
        if len(values) == 4:
            return values[0], values[1], values[2], values[3]
        raise ValueError(
            f"fusedops.{_OP}: padding must be an int, [p], [padx, pady] or [padx0, padx1, pady0, pady1], "
            f"got {list(padding)}"
        )
    p = _as_int(padding, "padding")
    return p, p, p, p


IMPLS = ("cuda", "ref")


def _check_impl(impl: Any, op: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"fusedops.{op}: impl must be 'cuda' or 'ref', got {impl!r}")


def _get_filter_size(f: torch.Tensor | None) -> tuple[int, int]:
    """``(fw, fh)`` of a 1-D (separable) or 2-D filter; ``(1, 1)`` for None."""
    if f is None:
        return 1, 1
    if not isinstance(f, torch.Tensor):
        raise TypeError(f"fusedops.{_OP}: f must be a torch.Tensor or None, got {type(f).__name__}")
    if f.ndim not in (1, 2):
        raise ValueError(f"fusedops.{_OP}: f must be 1-D (separable) or 2-D, got {f.ndim} dimensions")
    return int(f.shape[-1]), int(f.shape[0])


def _check_filter(f: Any, x: torch.Tensor) -> torch.Tensor:
    if f is None:
        return torch.ones([1, 1], dtype=torch.float32, device=x.device)
    if not isinstance(f, torch.Tensor):
        raise TypeError(f"fusedops.{_OP}: f must be a torch.Tensor or None, got {type(f).__name__}")
    if f.dtype != torch.float32:
        raise TypeError(f"fusedops.{_OP}: f must be a float32 tensor, got {f.dtype}")
    if f.ndim not in (1, 2):
        raise ValueError(f"fusedops.{_OP}: f must be 1-D (separable) or 2-D, got {f.ndim} dimensions")
    if f.numel() == 0:
        raise ValueError(f"fusedops.{_OP}: f must not be empty, got shape {tuple(f.shape)}")
    if f.device != x.device:
        raise ValueError(f"fusedops.{_OP}: f must be on the same device as x ({x.device}), got {f.device}")
    return f


def _out_size(size: int, up: int, pad0: int, pad1: int, taps: int, down: int) -> int:
    span = size * up + pad0 + pad1 - taps
    return span // down + 1 if span >= 0 else 0


def _validate(
    x: Any, f: Any, up: Scaling, down: Scaling, padding: Padding
) -> tuple[torch.Tensor, int, int, int, int, int, int, int, int]:
    check_tensor(x, "x", _OP)
    if x.ndim != 4:
        raise ValueError(f"fusedops.{_OP}: x must be a 4-D NCHW tensor, got shape {tuple(x.shape)}")
    f = _check_filter(f, x)
    upx, upy = _parse_scaling(up, "up")
    downx, downy = _parse_scaling(down, "down")
    padx0, padx1, pady0, pady1 = _parse_padding(padding)
    fw, fh = _get_filter_size(f)
    oh = _out_size(x.shape[2], upy, pady0, pady1, fh, downy)
    ow = _out_size(x.shape[3], upx, padx0, padx1, fw, downx)
    if oh <= 0 or ow <= 0:
        raise ValueError(
            f"fusedops.{_OP}: padding {[padx0, padx1, pady0, pady1]} gives an empty output for an input of "
            f"{x.shape[2]}x{x.shape[3]} with up {[upx, upy]} and a {fh}x{fw} filter"
        )
    return f, upx, upy, downx, downy, padx0, padx1, pady0, pady1


# --- the custom op: fake kernel and autograd ---------------------------------------------


def _dense_in_order(x: torch.Tensor, order: tuple[int, ...]) -> bool:
    expected = 1
    for d in order:
        size = x.shape[d]
        if size == 1:
            continue
        if x.stride(d) != expected:
            return False
        expected *= size
    return True


def _wants_channels_last(x: torch.Tensor) -> bool:
    """Mirror of ``wants_channels_last`` in csrc/upfirdn2d_impl.h: the output's memory format."""
    if x.numel() == 0:
        return False
    return _dense_in_order(x, (1, 3, 2, 0)) and not _dense_in_order(x, (3, 2, 1, 0))


@torch.library.register_fake("fusedops::upfirdn2d")
def _upfirdn2d_fake(
    x: torch.Tensor, f: torch.Tensor, upx: int, upy: int, downx: int, downy: int,
    padx0: int, padx1: int, pady0: int, pady1: int, flip: bool, gain: float,
) -> torch.Tensor:
    torch._check(x.dim() == 4, lambda: "upfirdn2d: x must be a 4-D NCHW tensor")
    torch._check(f.dim() == 2, lambda: "upfirdn2d: f must be a 2-D filter [fh, fw]")
    torch._check(f.dtype == torch.float32, lambda: "upfirdn2d: f must be a float32 tensor")
    n, c, ih, iw = x.shape
    fh, fw = f.shape
    oh = (ih * upy + pady0 + pady1 - fh) // downy + 1
    ow = (iw * upx + padx0 + padx1 - fw) // downx + 1
    torch._check(oh > 0, lambda: "upfirdn2d: padding gives an empty output")
    torch._check(ow > 0, lambda: "upfirdn2d: padding gives an empty output")
    memory_format = torch.channels_last if _wants_channels_last(x) else torch.contiguous_format
    return torch.empty((n, c, oh, ow), dtype=x.dtype, device=x.device, memory_format=memory_format)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, f, upx, upy, downx, downy, padx0, _padx1, pady0, _pady1, flip, gain = inputs
    ctx.save_for_backward(f)
    ctx.x_hw = (x.shape[2], x.shape[3])
    ctx.args = (upx, upy, downx, downy, padx0, pady0, flip, gain)


def _backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
    (f,) = ctx.saved_tensors
    ih, iw = ctx.x_hw
    upx, upy, downx, downy, padx0, pady0, flip, gain = ctx.args
    oh, ow = dy.shape[2], dy.shape[3]
    fh, fw = f.shape
    # The adjoint: up <-> down, filter flipped, padding so that dx is ih x iw.
    px0 = fw - padx0 - 1
    px1 = iw * upx - ow * downx + padx0 - upx + 1
    py0 = fh - pady0 - 1
    py1 = ih * upy - oh * downy + pady0 - upy + 1
    dx = None
    if ctx.needs_input_grad[0]:
        # Through the op itself, so the backward is differentiable in turn.
        dx = torch.ops.fusedops.upfirdn2d.default(
            dy, f, downx, downy, upx, upy, px0, px1, py0, py1, not flip, gain
        )
    return (dx,) + (None,) * 11


torch.library.register_autograd("fusedops::upfirdn2d", _backward, setup_context=_setup_context)


def _upfirdn2d_2d(
    x: torch.Tensor, f: torch.Tensor, upx: int, upy: int, downx: int, downy: int,
    padx0: int, padx1: int, pady0: int, pady1: int, flip: bool, gain: float,
) -> torch.Tensor:
    """One pass of a 2-D filter: the custom op, or the reference where there is no kernel."""
    if has_kernel(x.device):
        return torch.ops.fusedops.upfirdn2d.default(
            x, f, upx, upy, downx, downy, padx0, padx1, pady0, pady1, bool(flip), float(gain)
        )
    return reference_upfirdn2d(
        x, f, up=[upx, upy], down=[downx, downy], padding=[padx0, padx1, pady0, pady1],
        flip_filter=flip, gain=gain,
    )


# --- public API -------------------------------------------------------------------------------


def upfirdn2d(
    x: torch.Tensor,
    f: torch.Tensor | None,
    up: Scaling = 1,
    down: Scaling = 1,
    padding: Padding = 0,
    flip_filter: bool = False,
    gain: float = 1,
    impl: str = "cuda",
) -> torch.Tensor:
    """Upsample, pad, FIR-filter and downsample a batch of 2-D images.

    StyleGAN2-ADA's ``torch_utils.ops.upfirdn2d.upfirdn2d``, with the same
    arguments, defaults and results. For each plane of ``x``: insert ``up - 1``
    zeros after every sample, pad with zeros (negative padding crops), filter
    with ``f`` like ``conv2d`` with the weight ``f`` flipped (a true convolution;
    with ``flip_filter=True`` a cross-correlation), keep every ``down``-th sample
    and multiply by ``gain``. The output is ``(H*up + pady0 + pady1 - fh) // down + 1``
    high (likewise wide).

    Args:
        x: float16, bfloat16, float32 or float64 tensor ``[N, C, H, W]``, any
            strides; a channels_last input gives a channels_last output.
        f: float32 filter on ``x``'s device: 2-D ``[fh, fw]``, 1-D ``[fw]``
            (separable: applied horizontally then vertically) or None (identity).
            Treated as a constant (no gradient).
        up: upsampling factor, ``int`` or ``[upx, upy]`` (>= 1).
        down: downsampling factor, ``int`` or ``[downx, downy]`` (>= 1).
        padding: ``int``, ``[p]``, ``[padx, pady]`` or ``[padx0, padx1, pady0, pady1]``.
        flip_filter: use ``f`` unflipped (cross-correlation).
        gain: overall scale of the output (a separable filter applies
            ``gain ** 0.5`` per pass).
        impl: ``"cuda"`` (default): the fused kernel on every device that has
            one (CPU and CUDA); ``"ref"``: the plain-PyTorch reference.

    Returns:
        ``[N, C, OH, OW]`` tensor of ``x``'s dtype. Differentiable in ``x`` to any order.
    """
    _check_impl(impl, _OP)
    f, upx, upy, downx, downy, padx0, padx1, pady0, pady1 = _validate(x, f, up, down, padding)
    if impl == "ref":
        return reference_upfirdn2d(x, f, up=[upx, upy], down=[downx, downy], padding=[padx0, padx1, pady0, pady1],
                                   flip_filter=flip_filter, gain=gain)
    if f.ndim == 2:
        return _upfirdn2d_2d(x, f, upx, upy, downx, downy, padx0, padx1, pady0, pady1, flip_filter, gain)
    g = float(gain) ** 0.5
    y = _upfirdn2d_2d(x, f.unsqueeze(0), upx, 1, downx, 1, padx0, padx1, 0, 0, flip_filter, g)
    return _upfirdn2d_2d(y, f.unsqueeze(1), 1, upy, 1, downy, 0, 0, pady0, pady1, flip_filter, g)


def setup_filter(
    f: Any,
    device: torch.device | str = "cpu",
    normalize: bool = True,
    flip_filter: bool = False,
    gain: float = 1,
    separable: bool | None = None,
    impl: str = "cuda",
) -> torch.Tensor:
    """Make a float32 filter for :func:`upfirdn2d` from a list, array or tensor.

    StyleGAN2-ADA's ``setup_filter``, with the same arguments and results:
    ``None`` means the identity ``[1]``; a scalar becomes 1-D. A 1-D filter is
    kept separable when ``separable`` is True (default: when it has >= 8 taps),
    otherwise it becomes the 2-D outer product with itself. Then it is
    normalised to sum 1 (``normalize``), flipped (``flip_filter``), multiplied by
    ``gain ** (ndim / 2)`` and moved to ``device``. The input is never modified
    (the original divided a float32 tensor argument in place). ``impl`` is
    accepted (and checked) like the other functions' ``impl``; building a filter
    has no kernel.
    """
    _check_impl(impl, "setup_filter")
    if f is None:
        f = 1
    f = torch.as_tensor(f, dtype=torch.float32)
    if f.ndim not in (0, 1, 2):
        raise ValueError(f"fusedops.setup_filter: f must have 0, 1 or 2 dimensions, got {f.ndim}")
    if f.numel() == 0:
        raise ValueError("fusedops.setup_filter: f must not be empty")
    if f.ndim == 0:
        f = f[None]
    if separable is None:
        separable = f.ndim == 1 and f.numel() >= 8
    if f.ndim == 1 and not separable:
        f = torch.outer(f, f)
    if f.ndim != (1 if separable else 2):
        raise ValueError("fusedops.setup_filter: a 2-D filter cannot be separable")
    if normalize:
        f = f / f.sum()
    if flip_filter:
        f = f.flip(list(range(f.ndim)))
    f = f * (gain ** (f.ndim / 2))
    return f.to(device=device)


def filter2d(
    x: torch.Tensor, f: torch.Tensor | None, padding: Padding = 0, flip_filter: bool = False, gain: float = 1,
    impl: str = "cuda",
) -> torch.Tensor:
    """Filter with ``f`` keeping the size (plus ``padding``): the filter is centred.

    StyleGAN2-ADA's ``filter2d``; arguments as in :func:`upfirdn2d`.
    """
    _check_impl(impl, "filter2d")
    padx0, padx1, pady0, pady1 = _parse_padding(padding)
    fw, fh = _get_filter_size(f)
    p = [padx0 + fw // 2, padx1 + (fw - 1) // 2, pady0 + fh // 2, pady1 + (fh - 1) // 2]
    return upfirdn2d(x, f, padding=p, flip_filter=flip_filter, gain=gain, impl=impl)


def upsample2d(
    x: torch.Tensor, f: torch.Tensor | None, up: Scaling = 2, padding: Padding = 0,
    flip_filter: bool = False, gain: float = 1, impl: str = "cuda",
) -> torch.Tensor:
    """Upsample by ``up`` with filter ``f``: output ``H*upy x W*upx`` (plus ``padding``).

    StyleGAN2-ADA's ``upsample2d``: the filter is scaled by ``upx * upy`` so the
    signal keeps its magnitude; arguments as in :func:`upfirdn2d`.
    """
    _check_impl(impl, "upsample2d")
    upx, upy = _parse_scaling(up, "up")
    padx0, padx1, pady0, pady1 = _parse_padding(padding)
    fw, fh = _get_filter_size(f)
    p = [
        padx0 + (fw + upx - 1) // 2,
        padx1 + (fw - upx) // 2,
        pady0 + (fh + upy - 1) // 2,
        pady1 + (fh - upy) // 2,
    ]
    return upfirdn2d(x, f, up=[upx, upy], padding=p, flip_filter=flip_filter, gain=gain * upx * upy, impl=impl)


def downsample2d(
    x: torch.Tensor, f: torch.Tensor | None, down: Scaling = 2, padding: Padding = 0,
    flip_filter: bool = False, gain: float = 1, impl: str = "cuda",
) -> torch.Tensor:
    """Downsample by ``down`` with filter ``f``: output ``H/downy x W/downx`` (plus ``padding``).

    StyleGAN2-ADA's ``downsample2d``; arguments as in :func:`upfirdn2d`.
    """
    _check_impl(impl, "downsample2d")
    downx, downy = _parse_scaling(down, "down")
    padx0, padx1, pady0, pady1 = _parse_padding(padding)
    fw, fh = _get_filter_size(f)
    p = [
        padx0 + (fw - downx + 1) // 2,
        padx1 + (fw - downx) // 2,
        pady0 + (fh - downy + 1) // 2,
        pady1 + (fh - downy) // 2,
    ]
    return upfirdn2d(x, f, down=[downx, downy], padding=p, flip_filter=flip_filter, gain=gain, impl=impl)


# --- reference ---------------------------------------------------------------------------------


def reference_upfirdn2d(
    x: torch.Tensor,
    f: torch.Tensor | None,
    up: Scaling = 1,
    down: Scaling = 1,
    padding: Padding = 0,
    flip_filter: bool = False,
    gain: float = 1,
) -> torch.Tensor:
    """Plain-PyTorch upfirdn2d: zero insertion by reshape/pad, F.pad (crop for
    negative pads), a depthwise ``conv2d`` (cuDNN on CUDA) with the filter
    flipped unless ``flip_filter``, then slicing. Differentiable by autograd in
    ``x``; ``f`` is a constant."""
    f, upx, upy, downx, downy, padx0, padx1, pady0, pady1 = _validate(x, f, up, down, padding)
    f = f.detach()  # a constant, as for the kernel (the original asserts that f needs no gradient)
    n, c, h, w = x.shape
    if n * c == 0:
        oh = _out_size(h, upy, pady0, pady1, f.shape[0], downy)
        ow = _out_size(w, upx, padx0, padx1, f.shape[-1], downx)
        return x.new_zeros(n, c, oh, ow)
    # Upsample: each sample followed by up-1 zeros.
    if upx > 1 or upy > 1:
        x = x.reshape(n, c, h, 1, w, 1)
        x = F.pad(x, [0, upx - 1, 0, 0, 0, upy - 1])
        x = x.reshape(n, c, h * upy, w * upx)
    # Pad, then crop for the negative pads.
    x = F.pad(x, [max(padx0, 0), max(padx1, 0), max(pady0, 0), max(pady1, 0)])
    x = x[:, :, max(-pady0, 0) : x.shape[2] - max(-pady1, 0), max(-padx0, 0) : x.shape[3] - max(-padx1, 0)]
    # conv2d cross-correlates: flip the filter unless flip_filter.
    # The gain is applied in float32 (float64 for float64 inputs), like the kernels.
    f = (f.to(torch.promote_types(x.dtype, torch.float32)) * (gain ** (f.ndim / 2))).to(x.dtype)
    if not flip_filter:
        f = f.flip(list(range(f.ndim)))
    if f.ndim == 2:
        x = F.conv2d(x, f[None, None].expand(c, 1, *f.shape), groups=c)
    else:
        x = F.conv2d(x, f[None, None, None, :].expand(c, 1, 1, f.shape[0]), groups=c)
        x = F.conv2d(x, f[None, None, :, None].expand(c, 1, f.shape[0], 1), groups=c)
    return x[:, :, ::downy, ::downx]
