"""upfirdn2d tests: CPU always; the same cases on CUDA when a GPU is visible."""

from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

import fusedops  # noqa: F401  (loads the kernels)
from fusedops._upfirdn2d import (
    _wants_channels_last,
    downsample2d,
    filter2d,
    reference_upfirdn2d,
    setup_filter,
    upfirdn2d,
    upsample2d,
)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {
    torch.float64: dict(rtol=1e-12, atol=1e-12),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def make_filter(shape: tuple[int, ...] | None, device: str) -> torch.Tensor | None:
    if shape is None:
        return None
    return torch.randn(shape, dtype=torch.float32, device=device)


# (x shape, filter shape or None, up, down, padding, flip_filter, gain)
CONFIGS = [
    ((2, 3, 7, 9), (4, 4), 2, 1, [2, 1, 2, 1], False, 1.0),
    ((2, 3, 8, 8), (4, 4), 1, 2, 1, False, 1.0),
    ((1, 2, 6, 5), (3, 5), [2, 3], [1, 2], [1, 2, 0, 3], True, 2.5),
    ((1, 2, 9, 7), (6,), 2, 2, [3, 2, 1, 0], False, 1.7),
    ((1, 2, 5, 8), (5,), [1, 3], [2, 1], 2, True, 0.3),
    ((2, 1, 5, 6), None, 3, 1, 0, False, 1.0),
    ((1, 3, 10, 11), (5, 5), 1, [3, 2], [-1, 2, 3, -2], False, 0.5),
    ((1, 2, 4, 4), (2, 3), [1, 2], 1, [0, 0, -1, -1], True, 1.0),
    ((1, 1, 1, 1), (3, 3), 1, 1, 2, False, 1.0),
    ((1, 1, 3, 3), (2, 2), 1, 1, [5, 4, 6, 5], False, 1.0),
    ((1, 2, 6, 6), (3, 4), 2, 3, [-3, -1, -4, 0], False, 1.0),
    ((1, 2, 5, 7), (1, 1), 4, 4, [4, 4, 3, 3], False, 3.0),
    ((1, 2, 12, 13), (9, 11), 1, 1, [4, 5, 3, 2], False, 1.0),  # > 8 taps per axis
    ((2, 2, 7, 6), (7, 8), [2, 1], [1, 2], [3, 4, 2, 3], True, 1.0),
]
IDS = [f"cfg{i}" for i in range(len(CONFIGS))]


# --- forward --------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference_float64(device: str, cfg: tuple) -> None:
    shape, fshape, up, down, padding, flip, gain = cfg
    x = torch.randn(shape, dtype=torch.float64, device=device)
    f = make_filter(fshape, device)
    kw = dict(up=up, down=down, padding=padding, flip_filter=flip, gain=gain)
    out = upfirdn2d(x, f, **kw)
    ref = reference_upfirdn2d(x, f, **kw)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, **TOL[torch.float64])


@pytest.mark.parametrize("device", DEVICES)
def test_convention_is_convolution_unless_flip_filter(device: str) -> None:
    # An impulse filtered with f gives f (a true convolution); flip_filter=True gives f flipped.
    x = torch.ones(1, 1, 1, 1, device=device)
    f = torch.arange(1.0, 7.0, device=device).reshape(2, 3)
    torch.testing.assert_close(upfirdn2d(x, f, padding=[2, 2, 1, 1]), f[None, None])
    torch.testing.assert_close(upfirdn2d(x, f, padding=[2, 2, 1, 1], flip_filter=True), f.flip([0, 1])[None, None])
    # Zero insertion: sample i lands at 2*i, the zeros after it.
    row = torch.tensor([[[[1.0, 2.0, 3.0]]]], device=device)
    torch.testing.assert_close(upfirdn2d(row, None, up=[2, 1]), torch.tensor([[[[1.0, 0, 2, 0, 3, 0]]]], device=device))
    # Keep every down-th sample starting at 0; negative padding crops.
    seq = torch.arange(10.0, device=device).reshape(1, 1, 1, 10)
    torch.testing.assert_close(upfirdn2d(seq, None, down=[3, 1]), seq[..., ::3])
    torch.testing.assert_close(upfirdn2d(seq, None, padding=[-2, -3, 0, 0]), seq[..., 2:7])


@pytest.mark.parametrize("device", DEVICES)
def test_dtypes(device: str) -> None:
    for dtype in ALL_DTYPES:
        for shape, fshape, up, down, padding, flip, gain in CONFIGS[:5]:
            x = torch.randn(shape, device=device).to(dtype)
            f = make_filter(fshape, device)
            kw = dict(up=up, down=down, padding=padding, flip_filter=flip, gain=gain)
            out = upfirdn2d(x, f, **kw)
            assert out.dtype == dtype
            ref = reference_upfirdn2d(x.double(), f, **kw)
            # Error bound scaled by the magnitude the sums pass through (separable
            # filters round to the dtype between their two passes).
            fabs = None if f is None else f.abs()
            scale = reference_upfirdn2d(x.double().abs(), fabs, **kw) + 1
            err = (out.double() - ref).abs()
            tol = TOL[dtype]["rtol"]
            assert bool((err <= tol * scale).all()), (dtype, shape, float((err / scale).max()))


@pytest.mark.parametrize("device", DEVICES)
def test_stylegan2_shapes(device: str) -> None:
    # The benchmark's shapes, scaled down: a [1,3,3,1] filter, up=2 and down=2.
    f = setup_filter([1, 3, 3, 1], device=device)
    x = torch.randn(2, 16, 16, 16, device=device)
    for cl in (False, True):
        xi = x.to(memory_format=torch.channels_last) if cl else x
        up = upsample2d(xi, f)
        assert up.shape == (2, 16, 32, 32)
        ref_up = reference_upfirdn2d(x, f, up=2, padding=[2, 1, 2, 1], gain=4)
        torch.testing.assert_close(up, ref_up, rtol=1e-5, atol=1e-5)
        down = downsample2d(xi, f)
        assert down.shape == (2, 16, 8, 8)
        torch.testing.assert_close(down, reference_upfirdn2d(x, f, down=2, padding=1), rtol=1e-5, atol=1e-5)
        both = upfirdn2d(xi, f, up=2, down=2, padding=[2, 1, 2, 1])
        torch.testing.assert_close(
            both, reference_upfirdn2d(x, f, up=2, down=2, padding=[2, 1, 2, 1]), rtol=1e-5, atol=1e-5
        )


# --- layouts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_layouts(device: str) -> None:
    f = torch.randn(3, 4, device=device)
    base = torch.randn(2, 5, 9, 12, dtype=torch.float64, device=device)
    kw = dict(up=2, down=[1, 2], padding=[1, 2, 2, 1])
    ref = reference_upfirdn2d(base, f, **kw)
    # Dense NCHW in -> NCHW out.
    out = upfirdn2d(base, f, **kw)
    assert out.is_contiguous()
    # channels_last in -> channels_last out, same values.
    cl = base.to(memory_format=torch.channels_last)
    out_cl = upfirdn2d(cl, f, **kw)
    assert out_cl.is_contiguous(memory_format=torch.channels_last) and not out_cl.is_contiguous()
    torch.testing.assert_close(out_cl, ref, **TOL[torch.float64])
    # Strided views are read through their strides (NCHW output).
    big = torch.randn(2, 10, 19, 25, dtype=torch.float64, device=device)
    sliced = big[:, ::2, 1::2, ::2]
    out_s = upfirdn2d(sliced, f, **kw)
    assert out_s.is_contiguous()
    torch.testing.assert_close(out_s, reference_upfirdn2d(sliced.contiguous(), f, **kw), **TOL[torch.float64])
    sliced_cl = big.to(memory_format=torch.channels_last)[:, 1:6, 2:11, 3:15]
    torch.testing.assert_close(
        upfirdn2d(sliced_cl, f, **kw), reference_upfirdn2d(sliced_cl.contiguous(), f, **kw), **TOL[torch.float64]
    )
    # Dense but neither NCHW nor NHWC (H and W swapped) -> NCHW output.
    t = base.transpose(2, 3)
    out_t = upfirdn2d(t, f, **kw)
    assert out_t.is_contiguous()
    torch.testing.assert_close(out_t, reference_upfirdn2d(t.contiguous(), f, **kw), **TOL[torch.float64])
    # Expanded (stride 0) input and a non-contiguous filter.
    e = torch.randn(1, 3, 1, 7, dtype=torch.float64, device=device).expand(2, 3, 5, 7)
    ft = torch.randn(4, 3, device=device).t()
    ref_e = reference_upfirdn2d(e.contiguous(), ft, **kw)
    torch.testing.assert_close(upfirdn2d(e, ft, **kw), ref_e, **TOL[torch.float64])


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_separable_and_1x1_channels(device: str) -> None:
    f = torch.randn(4, device=device)
    x = torch.randn(2, 3, 6, 7, device=device).to(memory_format=torch.channels_last)
    out = upfirdn2d(x, f, up=2, padding=2)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, reference_upfirdn2d(x.contiguous(), f, up=2, padding=2), rtol=1e-5, atol=1e-5)
    # C == 1: channels_last and NCHW strides coincide -> NCHW.
    one = torch.randn(2, 1, 5, 6, device=device).to(memory_format=torch.channels_last)
    assert upfirdn2d(one, f, padding=2).is_contiguous()


def test_fake_layout_rule_matches_kernel() -> None:
    f = torch.randn(2, 2)
    cases = [
        torch.randn(2, 3, 4, 5),
        torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        torch.randn(2, 3, 4, 5).transpose(2, 3),
        torch.randn(2, 3, 8, 5)[:, :, ::2],
        torch.randn(1, 3, 1, 1).to(memory_format=torch.channels_last),
        torch.randn(2, 1, 4, 5).to(memory_format=torch.channels_last),
        torch.randn(0, 3, 4, 5).to(memory_format=torch.channels_last),
    ]
    for x in cases:
        out = torch.ops.fusedops.upfirdn2d(x, f, 1, 1, 1, 1, 1, 1, 1, 1, False, 1.0)
        expect_cl = _wants_channels_last(x)
        fake = torch.empty(out.shape, memory_format=torch.channels_last if expect_cl else torch.contiguous_format)
        assert out.stride() == fake.stride(), (x.shape, x.stride())


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device: str) -> None:
    f = torch.randn(3, 3, device=device)
    for shape in [(0, 3, 5, 5), (2, 0, 5, 5)]:
        x = torch.randn(shape, device=device)
        out = upfirdn2d(x, f, up=2, padding=1)
        assert out.shape == (*shape[:2], 10, 10)
    # No input rows at all: the padding alone gives the output (zeros).
    x = torch.randn(2, 3, 0, 4, device=device)
    out = upfirdn2d(x, f, padding=[1, 1, 2, 2])
    assert out.shape == (2, 3, 2, 4)
    assert torch.count_nonzero(out) == 0


# --- helpers -------------------------------------------------------------------------------------


def test_setup_filter() -> None:
    f = setup_filter([1, 3, 3, 1])
    assert f.shape == (4, 4) and f.dtype == torch.float32
    torch.testing.assert_close(f, torch.outer(torch.tensor([1.0, 3, 3, 1]), torch.tensor([1.0, 3, 3, 1])) / 64)
    sep = setup_filter([1.0] * 8)
    assert sep.shape == (8,)
    torch.testing.assert_close(sep, torch.full((8,), 1 / 8))
    assert setup_filter([1, 2, 3], separable=True).shape == (3,)
    torch.testing.assert_close(setup_filter([1, 2], normalize=False, gain=4), torch.tensor([[4.0, 8], [8, 16]]))
    torch.testing.assert_close(setup_filter([1, 2], normalize=False, separable=True, gain=4), torch.tensor([2.0, 4]))
    torch.testing.assert_close(setup_filter([[1, 2], [3, 4]], normalize=False, flip_filter=True),
                               torch.tensor([[4.0, 3], [2, 1]]))
    torch.testing.assert_close(setup_filter(None), torch.ones(1, 1))
    t = torch.tensor([1.0, 3.0])
    setup_filter(t)
    torch.testing.assert_close(t, torch.tensor([1.0, 3.0]))  # the caller's tensor is left alone


@pytest.mark.parametrize("device", DEVICES)
def test_resampling_helpers(device: str) -> None:
    x = torch.randn(2, 3, 8, 10, dtype=torch.float64, device=device)
    for fl in ([1, 3, 3, 1], [1, 2, 1], [1] * 8):
        f = setup_filter(fl, device=device)
        fw = len(fl)
        up = upsample2d(x, f)
        assert up.shape == (2, 3, 16, 20)
        p = [(fw + 1) // 2, (fw - 2) // 2] * 2
        p = [p[0], p[1], p[2], p[3]]
        torch.testing.assert_close(up, reference_upfirdn2d(x, f, up=2, padding=p, gain=4), **TOL[torch.float64])
        down = downsample2d(x, f)
        assert down.shape == (2, 3, 4, 5)
        p = [(fw - 1) // 2, (fw - 2) // 2] * 2
        torch.testing.assert_close(down, reference_upfirdn2d(x, f, down=2, padding=p), **TOL[torch.float64])
        same = filter2d(x, f)
        assert same.shape == x.shape
        p = [fw // 2, (fw - 1) // 2] * 2
        torch.testing.assert_close(same, reference_upfirdn2d(x, f, padding=p), **TOL[torch.float64])
    # Normalised filters keep a constant image constant away from the borders.
    ones = torch.ones(1, 2, 12, 12, dtype=torch.float64, device=device)
    f = setup_filter([1, 3, 3, 1], device=device)
    torch.testing.assert_close(upsample2d(ones, f)[..., 4:-4, 4:-4], ones.new_ones(1, 2, 16, 16))
    torch.testing.assert_close(downsample2d(ones, f)[..., 1:-1, 1:-1], ones.new_ones(1, 2, 4, 4))
    torch.testing.assert_close(filter2d(ones, f)[..., 2:-2, 2:-2], ones.new_ones(1, 2, 8, 8))
    # Separate factors per axis and extra padding.
    assert upsample2d(x, f, up=[2, 3], padding=[1, 0, 0, 2]).shape == (2, 3, 26, 21)
    assert downsample2d(x, f, down=[2, 1], padding=1).shape == (2, 3, 10, 6)
    assert filter2d(x, None, padding=[1, 2]).shape == (2, 3, 12, 12)


# --- autograd --------------------------------------------------------------------------------


GRAD_CONFIGS = [
    ((1, 2, 4, 5), (3, 3), 2, 1, [1, 2, 2, 1], False, 1.0),
    ((1, 2, 6, 5), (4, 4), 1, 2, 1, True, 1.5),
    ((1, 1, 5, 4), (3, 2), [2, 3], [3, 2], [-1, 2, 0, 1], False, 0.7),
    ((2, 1, 4, 4), (4,), 2, 2, [2, 1, 1, 2], False, 2.0),
    ((1, 2, 3, 4), None, [1, 2], [2, 1], [0, 1, 1, 0], False, 1.0),
]


@pytest.mark.parametrize("cfg", GRAD_CONFIGS, ids=[f"g{i}" for i in range(len(GRAD_CONFIGS))])
@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_and_gradgradcheck(device: str, cfg: tuple) -> None:
    shape, fshape, up, down, padding, flip, gain = cfg
    f = make_filter(fshape, device)
    kw = dict(up=up, down=down, padding=padding, flip_filter=flip, gain=gain)
    x = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
    fn = lambda t: upfirdn2d(t, f, **kw)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))
    xc = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    assert torch.autograd.gradcheck(fn, (xc,))


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_matches_reference_and_filter_gets_none(device: str) -> None:
    f = torch.randn(4, 3, device=device, requires_grad=True)
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64, device=device, requires_grad=True)
    kw = dict(up=[2, 1], down=[1, 2], padding=[2, 1, 0, 3])
    g = torch.randn_like(upfirdn2d(x, f.detach(), **kw))
    (dx,) = torch.autograd.grad(upfirdn2d(x, f, **kw), x, g)
    (dx_ref,) = torch.autograd.grad(reference_upfirdn2d(x, f.detach(), **kw), x, g)
    torch.testing.assert_close(dx, dx_ref, **TOL[torch.float64])
    upfirdn2d(x, f, **kw).backward(g)
    assert f.grad is None


@pytest.mark.parametrize("device", DEVICES)
def test_helpers_gradcheck(device: str) -> None:
    f = setup_filter([1, 3, 3, 1], device=device)
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, device=device, requires_grad=True)
    fn = lambda t: downsample2d(filter2d(upsample2d(t, f), f), f)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


# --- op contracts --------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device: str) -> None:
    f = torch.randn(3, 4, device=device)
    cases = [
        (torch.randn(2, 3, 5, 6, device=device, requires_grad=True), f, 2, 1, 1, 2, 1, 2, 2, 1, False, 1.0),
        (torch.randn(2, 3, 5, 6, device=device).to(memory_format=torch.channels_last), f,
         1, 2, 2, 1, -1, 2, 0, 3, True, 0.5),
        (torch.randn(1, 2, 6, 5, device=device, dtype=torch.float64, requires_grad=True).transpose(2, 3), f,
         1, 1, 1, 1, 2, 1, 1, 2, False, 2.0),
        (torch.randn(0, 2, 4, 4, device=device), f, 1, 1, 1, 1, 2, 2, 2, 2, False, 1.0),
    ]
    for args in cases:
        opcheck(torch.ops.fusedops.upfirdn2d.default, args)


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_fullgraph(device: str) -> None:
    f = setup_filter([1, 3, 3, 1], device=device)
    f1 = setup_filter([1, 2, 1], device=device, separable=True)

    def fn(t: torch.Tensor) -> torch.Tensor:
        y = upsample2d(t * 2, f)
        y = upfirdn2d(y, f1, down=2, padding=1, gain=0.5)
        return downsample2d(y, f) + 1

    x = torch.randn(2, 3, 8, 8, device=device)
    torch.testing.assert_close(torch.compile(fn, fullgraph=True)(x), fn(x))
    xg = x.clone().requires_grad_()
    compiled = torch.compile(fn, fullgraph=True)
    compiled(xg).sum().backward()
    xe = x.clone().requires_grad_()
    fn(xe).sum().backward()
    torch.testing.assert_close(xg.grad, xe.grad)


# --- bad input -----------------------------------------------------------------------------


def test_rejects_bad_input_with_a_python_exception() -> None:
    x = torch.randn(1, 2, 5, 5)
    f = torch.ones(3, 3)
    with pytest.raises(TypeError, match=r"upfirdn2d: x must be a torch\.Tensor"):
        upfirdn2d([1.0], f)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"upfirdn2d: x must be float16"):
        upfirdn2d(torch.ones(1, 2, 5, 5, dtype=torch.int64), f)
    with pytest.raises(ValueError, match=r"upfirdn2d: x must be a 4-D"):
        upfirdn2d(torch.randn(2, 5, 5), f)
    with pytest.raises(TypeError, match=r"upfirdn2d: f must be a float32"):
        upfirdn2d(x, f.double())
    with pytest.raises(TypeError, match=r"upfirdn2d: f must be a torch\.Tensor"):
        upfirdn2d(x, [[1.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"upfirdn2d: f must be 1-D .* or 2-D"):
        upfirdn2d(x, torch.ones(1, 3, 3))
    with pytest.raises(ValueError, match=r"upfirdn2d: f must not be empty"):
        upfirdn2d(x, torch.ones(0))
    with pytest.raises(ValueError, match=r"upfirdn2d: up must be >= 1"):
        upfirdn2d(x, f, up=0)
    with pytest.raises(ValueError, match=r"upfirdn2d: down must be >= 1"):
        upfirdn2d(x, f, down=[1, 0])
    with pytest.raises(ValueError, match=r"upfirdn2d: up must be an int or"):
        upfirdn2d(x, f, up=[1, 2, 3])
    with pytest.raises(TypeError, match=r"upfirdn2d: down must be an int"):
        upfirdn2d(x, f, down=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"upfirdn2d: padding must be an int"):
        upfirdn2d(x, f, padding=[1, 2, 3])
    with pytest.raises(ValueError, match=r"upfirdn2d: padding .* gives an empty output"):
        upfirdn2d(x, f, padding=-2)
    with pytest.raises(ValueError, match=r"upfirdn2d: padding .* gives an empty output"):
        upfirdn2d(torch.randn(1, 1, 2, 2), torch.ones(4, 4))
    # The op itself checks too (RuntimeError naming the argument).
    op = torch.ops.fusedops.upfirdn2d
    with pytest.raises(RuntimeError, match=r"upfirdn2d: f must be a float32"):
        op(x, f.double(), 1, 1, 1, 1, 1, 1, 1, 1, False, 1.0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: f must be a 2-D"):
        op(x, torch.ones(3), 1, 1, 1, 1, 1, 1, 1, 1, False, 1.0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: x must be a 4-D"):
        op(torch.randn(5, 5), f, 1, 1, 1, 1, 1, 1, 1, 1, False, 1.0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: up must be >= 1"):
        op(x, f, 0, 1, 1, 1, 1, 1, 1, 1, False, 1.0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: down must be >= 1"):
        op(x, f, 1, 1, 1, -1, 1, 1, 1, 1, False, 1.0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: padding gives an empty output"):
        op(x, f, 1, 1, 1, 1, -3, 0, 0, 0, False, 1.0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: x must be a floating-point"):
        op(torch.ones(1, 1, 4, 4, dtype=torch.int32), f, 1, 1, 1, 1, 1, 1, 1, 1, False, 1.0)


@pytest.mark.cuda
def test_rejects_filter_on_another_device() -> None:
    x = torch.randn(1, 2, 5, 5, device="cuda")
    with pytest.raises(ValueError, match=r"upfirdn2d: f must be on the same device as x"):
        upfirdn2d(x, torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"upfirdn2d: f must be on the same device as x"):
        upfirdn2d(x.cpu(), torch.ones(3, 3, device="cuda"))
    with pytest.raises(RuntimeError, match=r"upfirdn2d: f must be on the same device as x"):
        torch.ops.fusedops.upfirdn2d(x, torch.ones(3, 3), 1, 1, 1, 1, 1, 1, 1, 1, False, 1.0)


# --- CUDA specifics ------------------------------------------------------------------------


@pytest.mark.cuda
def test_cuda_current_stream_and_device_guard() -> None:
    f = setup_filter([1, 3, 3, 1], device="cuda")
    x = torch.randn(4, 8, 32, 32, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = upsample2d(x, f)
    s.synchronize()
    torch.testing.assert_close(out, reference_upfirdn2d(x, f, up=2, padding=[2, 1, 2, 1], gain=4), rtol=1e-5, atol=1e-5)
    if torch.cuda.device_count() > 1:
        x1 = x.to("cuda:1")
        out1 = upsample2d(x1, f.to("cuda:1"))
        assert out1.device == x1.device
        torch.testing.assert_close(out1.cpu(), out.cpu())


@pytest.mark.cuda
def test_cuda_more_than_2_31_elements() -> None:
    free, _ = torch.cuda.mem_get_info()
    if free < 24 * 2**30:
        pytest.skip("needs about 20 GiB of free GPU memory")
    h, w = 2**16, 2**15 + 3  # > 2**31 elements: the 64-bit index path
    x = torch.zeros(1, 1, h, w, dtype=torch.float16, device="cuda")
    x[..., -4:, :] = torch.randn(4, w, device="cuda").half()
    x[..., :3, :] = torch.randn(3, w, device="cuda").half()
    f = setup_filter([1, 2, 1], device="cuda")
    y = filter2d(x, f)
    assert y.shape == x.shape
    tail = reference_upfirdn2d(x[..., -6:, :].float(), f, padding=[1, 1, 1, 1])
    torch.testing.assert_close(y[..., -5:, :].float(), tail[..., -5:, :], rtol=2e-3, atol=2e-3)
    head = reference_upfirdn2d(x[..., :6, :].float(), f, padding=[1, 1, 1, 1])
    torch.testing.assert_close(y[..., :5, :].float(), head[..., :5, :], rtol=2e-3, atol=2e-3)
    del y
    # Up and down in one call over the large tensor.
    z = upfirdn2d(x, f, up=[1, 2], down=[2, 1], padding=[1, 0, 1, 0])
    ztail = reference_upfirdn2d(x[..., -6:, :].float(), f, up=[1, 2], down=[2, 1], padding=[1, 0, 0, 0])
    torch.testing.assert_close(z[..., -8:, :].float(), ztail[..., -8:, :], rtol=2e-3, atol=2e-3)
