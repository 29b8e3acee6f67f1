"""Parity with StyleGAN2-ADA's ``torch_utils.ops`` (``bias_act``, ``upfirdn2d`` and its helpers).

The originals' documented behaviours, written as tests: their signatures
(argument names and defaults), the activation table (which activations take
``alpha``, the default gains), the argument forms (scalars or pairs, 1/2/4
element padding), the documented semantics (convolution vs correlation, output
sizes, DC gain of the helpers, separable filters) and the gradient behaviour,
each checked against float64 references computed from first principles (plain
PyTorch), for ``impl="cuda"`` and ``impl="ref"``, on the CPU and (tests marked
``cuda``) on a GPU. No code of the originals is used.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

import fusedops

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
IMPLS = ["cuda", "ref"]
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=2e-5, atol=2e-5)}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# --- signatures ----------------------------------------------------------------------------

# The originals' public signatures (name, default) in order, as documented.
_EMPTY = inspect.Parameter.empty
ORIGINAL_SIGNATURES = {
    "bias_act": [("x", _EMPTY), ("b", None), ("dim", 1), ("act", "linear"), ("alpha", None), ("gain", None),
                 ("clamp", None), ("impl", "cuda")],
    "upfirdn2d": [("x", _EMPTY), ("f", _EMPTY), ("up", 1), ("down", 1), ("padding", 0), ("flip_filter", False),
                  ("gain", 1), ("impl", "cuda")],
    "filter2d": [("x", _EMPTY), ("f", _EMPTY), ("padding", 0), ("flip_filter", False), ("gain", 1),
                 ("impl", "cuda")],
    "upsample2d": [("x", _EMPTY), ("f", _EMPTY), ("up", 2), ("padding", 0), ("flip_filter", False), ("gain", 1),
                   ("impl", "cuda")],
    "downsample2d": [("x", _EMPTY), ("f", _EMPTY), ("down", 2), ("padding", 0), ("flip_filter", False),
                     ("gain", 1), ("impl", "cuda")],
    # setup_filter's device defaults to the CPU (torch.device('cpu') in the original, 'cpu' here).
    "setup_filter": [("f", _EMPTY), ("device", "cpu"), ("normalize", True), ("flip_filter", False), ("gain", 1),
                     ("separable", None)],
}


@pytest.mark.parametrize("name", list(ORIGINAL_SIGNATURES))
def test_signature_has_the_originals_arguments_and_defaults(name: str) -> None:
    params = list(inspect.signature(getattr(fusedops, name)).parameters.values())
    expected = ORIGINAL_SIGNATURES[name]
    got = [(p.name, p.default) for p in params[: len(expected)]]
    assert [n for n, _ in got] == [n for n, _ in expected]
    for (n, default), (_, want) in zip(got, expected, strict=True):
        if n == "device":
            assert torch.device(default) == torch.device(want)
        else:
            assert default == want or (default is _EMPTY and want is _EMPTY), n
    # Anything beyond the original's arguments is optional (setup_filter's impl).
    assert all(p.default is not _EMPTY for p in params[len(expected):])


# --- bias_act: the activation table --------------------------------------------------------

SQRT2 = math.sqrt(2)
# name: (def_alpha, def_gain, has_2nd_grad, float64 reference of the activation (alpha given))
ACTIVATIONS = {
    "linear": (0.0, 1.0, False, lambda x, a: x),
    "relu": (0.0, SQRT2, False, lambda x, a: torch.where(x > 0, x, torch.zeros_like(x))),
    "lrelu": (0.2, SQRT2, False, lambda x, a: torch.where(x > 0, x, a * x)),
    "tanh": (0.0, 1.0, True, lambda x, a: torch.tanh(x)),
    "sigmoid": (0.0, 1.0, True, lambda x, a: 1 / (1 + torch.exp(-x))),
    "elu": (0.0, 1.0, True, lambda x, a: torch.where(x > 0, x, torch.expm1(x))),
    "selu": (0.0, 1.0, True, lambda x, a: 1.0507009873554804934193349852946 * torch.where(
        x > 0, x, 1.6732632423543772848170429916717 * torch.expm1(x))),
    "softplus": (0.0, 1.0, True, lambda x, a: torch.log1p(torch.exp(-x.abs())) + x.clamp(min=0)),
    "swish": (0.0, SQRT2, True, lambda x, a: x / (1 + torch.exp(-x))),
}


def test_activation_table_matches_the_original() -> None:
    assert list(fusedops.activation_funcs) == list(ACTIVATIONS)
    for name, (def_alpha, def_gain, has_2nd_grad, _) in ACTIVATIONS.items():
        spec = fusedops.activation_funcs[name]
        assert spec.def_alpha == pytest.approx(def_alpha), name
        assert spec.def_gain == pytest.approx(def_gain), name
        assert spec.has_2nd_grad is has_2nd_grad, name
        # dnnlib.EasyDict-style access, as StyleGAN2-ADA's networks read it.
        assert spec["def_gain"] == spec.def_gain
    # networks.py: `self.act_gain = bias_act.activation_funcs[activation].def_gain`
    assert fusedops.activation_funcs["lrelu"].def_gain == pytest.approx(SQRT2)


def first_principles_bias_act(x: torch.Tensor, b: torch.Tensor | None, dim: int, act: str, alpha: float | None,
                              gain: float | None, clamp: float | None) -> torch.Tensor:
    """The documented semantics in float64: (x + b along dim) -> act -> * gain -> clamp."""
    def_alpha, def_gain, _, fn = ACTIVATIONS[act]
    x = x.double()
    if b is not None:
        shape = [1] * x.dim()
        shape[dim] = -1
        x = x + b.double().reshape(shape)
    y = fn(x, def_alpha if alpha is None else alpha) * (def_gain if gain is None else gain)
    return y if clamp is None else y.clamp(-clamp, clamp)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_bias_act_matches_first_principles(device: str, impl: str, act: str) -> None:
    x = torch.randn(2, 5, 3, 4, dtype=torch.float64, device=device) * 3
    b = torch.randn(5, dtype=torch.float64, device=device)
    for kwargs in ({}, {"alpha": 0.3}, {"gain": 0.7}, {"clamp": 1.5}, {"alpha": 0.05, "gain": 2.0, "clamp": 0.4}):
        want = first_principles_bias_act(x, b, 1, act, kwargs.get("alpha"), kwargs.get("gain"), kwargs.get("clamp"))
        for dtype in (torch.float64, torch.float32):
            got = fusedops.bias_act(x.to(dtype), b.to(dtype), act=act, impl=impl, **kwargs)
            assert got.dtype == dtype and got.shape == x.shape
            torch.testing.assert_close(got.double(), want, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", [a for a in ACTIVATIONS if a != "lrelu"])
def test_only_lrelu_takes_alpha(device: str, act: str) -> None:
    x = torch.randn(4, 6, dtype=torch.float64, device=device) * 2
    for impl in IMPLS:
        base = fusedops.bias_act(x, act=act, impl=impl)
        for alpha in (0.0, 0.5, 3.0):
            assert torch.equal(fusedops.bias_act(x, act=act, alpha=alpha, impl=impl), base)


@pytest.mark.parametrize("device", DEVICES)
def test_lrelu_alpha_is_the_negative_slope(device: str) -> None:
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0], dtype=torch.float64, device=device)
    for impl in IMPLS:
        y = fusedops.bias_act(x, act="lrelu", alpha=0.1, gain=1, impl=impl)
        torch.testing.assert_close(y, torch.tensor([-0.2, -0.05, 0.0, 0.5, 2.0], dtype=torch.float64, device=device))
        y = fusedops.bias_act(x, act="lrelu", impl=impl)  # alpha 0.2 and gain sqrt(2) by default
        torch.testing.assert_close(y, torch.tensor([-0.4, -0.1, 0.0, 0.5, 2.0], dtype=torch.float64,
                                                   device=device) * SQRT2)


@pytest.mark.parametrize("device", DEVICES)
def test_bias_act_dim_and_missing_bias(device: str) -> None:
    x = torch.randn(3, 4, 5, dtype=torch.float64, device=device)
    for impl in IMPLS:
        for dim in range(3):
            b = torch.randn(x.shape[dim], dtype=torch.float64, device=device)
            got = fusedops.bias_act(x, b, dim=dim, act="swish", impl=impl)
            torch.testing.assert_close(got, first_principles_bias_act(x, b, dim, "swish", None, None, None))
        # Without a bias, dim is ignored (any value).
        for dim in (0, 1, 2):
            assert torch.equal(fusedops.bias_act(x, None, dim=dim, act="tanh", impl=impl),
                               fusedops.bias_act(x, act="tanh", impl=impl))
        # The defaults: no bias, linear, gain 1, no clamp: the identity.
        torch.testing.assert_close(fusedops.bias_act(x, impl=impl), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_bias_act_gradients_first_and_second_order(device: str, impl: str, act: str) -> None:
    # "It supports first and second order gradients": gradcheck and gradgradcheck
    # in float64, clamped and not; samples kept away from the kinks at 0.
    x = torch.randn(2, 3, 4, dtype=torch.float64, device=device)
    x = torch.where(x.abs() < 0.1, x.sign() * 0.1 + x, x).requires_grad_()
    b = (torch.randn(3, dtype=torch.float64, device=device) * 0.01).requires_grad_()
    for clamp in (None, 0.8):
        def fn(x: torch.Tensor, b: torch.Tensor, clamp: float | None = clamp) -> torch.Tensor:
            return fusedops.bias_act(x, b, act=act, clamp=clamp, impl=impl)

        assert torch.autograd.gradcheck(fn, (x, b))
        assert torch.autograd.gradgradcheck(fn, (x, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_bias_act_cuda_and_ref_impls_agree_on_gradients(device: str, act: str) -> None:
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64, device=device)
    x = torch.where(x.abs() < 0.1, x.sign() * 0.1 + x, x).requires_grad_()
    b = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)
    grads = []
    for impl in IMPLS:
        y = fusedops.bias_act(x, b, act=act, clamp=1.0, impl=impl)
        (gx,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
        grads.append(torch.autograd.grad(gx.pow(2).sum(), (x, b), allow_unused=True, materialize_grads=True))
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want)


def test_bias_act_rejects_an_unknown_impl() -> None:
    with pytest.raises(ValueError, match=r"bias_act: impl must be 'cuda' or 'ref', got 'triton'"):
        fusedops.bias_act(torch.randn(2, 3), impl="triton")


# --- upfirdn2d: semantics from first principles ------------------------------------------


def first_principles_upfirdn2d(x: torch.Tensor, f: torch.Tensor | None, up: tuple[int, int],
                               down: tuple[int, int], pad: tuple[int, int, int, int], flip_filter: bool,
                               gain: float) -> torch.Tensor:
    """The documented steps in float64, with explicit loops over the filter taps:
    1. insert up-1 zeros after each pixel, 2. pad (negative crops), 3. convolve
    with f (flip_filter=True: correlate), 4. keep every down-th pixel; times gain."""
    upx, upy = up
    downx, downy = down
    px0, px1, py0, py1 = pad
    x = x.double()
    n, c, h, w = x.shape
    if f is None:
        f = torch.ones(1, 1, dtype=torch.float64, device=x.device)
    f = f.double()
    if f.ndim == 1:
        f = torch.outer(f, f)
        gain_f = gain
    else:
        gain_f = gain
    xu = torch.zeros(n, c, h * upy, w * upx, dtype=torch.float64, device=x.device)
    xu[:, :, ::upy, ::upx] = x
    # pad with zeros, then crop for negative pads
    xp = F.pad(xu, [max(px0, 0), max(px1, 0), max(py0, 0), max(py1, 0)])
    xp = xp[:, :, max(-py0, 0): xp.shape[2] - max(-py1, 0), max(-px0, 0): xp.shape[3] - max(-px1, 0)]
    fh, fw = f.shape
    oh, ow = xp.shape[2] - fh + 1, xp.shape[3] - fw + 1
    w_ = f if flip_filter else f.flip(0, 1)  # convolution = correlation with the flipped filter
    out = torch.zeros(n, c, oh, ow, dtype=torch.float64, device=x.device)
    for ky in range(fh):
        for kx in range(fw):
            out += w_[ky, kx] * xp[:, :, ky: ky + oh, kx: kx + ow]
    return out[:, :, ::downy, ::downx] * gain_f


UPFIRDN_CASES = [
    # x shape, filter (list or None), up, down, padding, flip_filter, gain
    ((2, 3, 8, 7), [[1, 2, 3], [4, 5, 6]], 1, 1, 0, False, 1.0),
    ((1, 2, 6, 9), [[1, 3, 3, 1]] * 4, 2, 1, [2, 1, 2, 1], False, 4.0),
    ((1, 2, 9, 8), [[0.5, 1, -1], [2, 0, 1], [1, 1, 1]], 1, 2, 1, True, 1.5),
    ((2, 1, 5, 7), None, [3, 2], [1, 1], [1, 2], False, 2.0),
    ((1, 3, 10, 11), [[1, 2], [3, 4]], [1, 2], [2, 3], [-1, 2, 3, -2], True, 0.5),
    ((1, 1, 4, 4), [[1, -1, 2, 3, 0.5]], 2, 2, [2, 2, 0, 0], False, 1.0),
]


def _as_pair(v: int | list[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _as_pads(v: int | list[int]) -> tuple[int, int, int, int]:
    if isinstance(v, int):
        return v, v, v, v
    if len(v) == 2:
        return v[0], v[0], v[1], v[1]
    return v[0], v[1], v[2], v[3]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", range(len(UPFIRDN_CASES)))
def test_upfirdn2d_matches_first_principles(device: str, impl: str, case: int) -> None:
    shape, flist, up, down, padding, flip, gain = UPFIRDN_CASES[case]
    x = torch.randn(shape, dtype=torch.float64, device=device)
    f = None if flist is None else torch.tensor(flist, dtype=torch.float32, device=device)
    want = first_principles_upfirdn2d(x, f, _as_pair(up), _as_pair(down), _as_pads(padding), flip, gain)
    for dtype in (torch.float64, torch.float32):
        got = fusedops.upfirdn2d(x.to(dtype), f, up=up, down=down, padding=padding, flip_filter=flip, gain=gain,
                                 impl=impl)
        assert got.shape == want.shape and got.dtype == dtype
        torch.testing.assert_close(got.double(), want, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
def test_upfirdn2d_argument_forms_are_equivalent(device: str, impl: str) -> None:
    x = torch.randn(1, 2, 7, 6, device=device)
    f = fusedops.setup_filter([1, 2, 1], device=device)

    def run(**kw: object) -> torch.Tensor:
        return fusedops.upfirdn2d(x, f, impl=impl, **kw)  # type: ignore[arg-type]

    assert torch.equal(run(up=2), run(up=[2, 2]))
    assert torch.equal(run(up=(2, 2)), run(up=[2, 2]))
    assert torch.equal(run(down=2), run(down=[2, 2]))
    assert torch.equal(run(padding=1), run(padding=[1, 1]))
    assert torch.equal(run(padding=1), run(padding=[1, 1, 1, 1]))
    assert torch.equal(run(padding=1), run(padding=[1]))
    assert torch.equal(run(padding=[2, 1]), run(padding=[2, 2, 1, 1]))
    # [x, y] order: x (width) first.
    assert run(up=[2, 1]).shape == (1, 2, 7 - 2, 12 - 2)
    assert run(padding=[3, 0]).shape == (1, 2, 7 - 2, 6 + 6 - 2)


@pytest.mark.parametrize("device", DEVICES)
def test_upfirdn2d_output_size_formula(device: str) -> None:
    # [N, C, (H*upy + pady0 + pady1 - fh) // downy + 1, (W*upx + padx0 + padx1 - fw) // downx + 1]
    x = torch.randn(2, 3, 11, 13, device=device)
    for fh, fw in ((1, 1), (3, 4), (5, 2)):
        f = torch.ones(fh, fw, device=device)
        for up, down, pad in (((1, 1), (1, 1), (0, 0, 0, 0)), ((2, 3), (3, 2), (1, 2, -1, 3)),
                              ((1, 2), (2, 1), (4, 0, 0, 4))):
            for impl in IMPLS:
                y = fusedops.upfirdn2d(x, f, up=list(up), down=list(down), padding=list(pad), impl=impl)
                oh = (11 * up[1] + pad[2] + pad[3] - fh) // down[1] + 1
                ow = (13 * up[0] + pad[0] + pad[1] - fw) // down[0] + 1
                assert y.shape == (2, 3, oh, ow)


@pytest.mark.parametrize("device", DEVICES)
def test_flip_filter_false_is_convolution_true_is_correlation(device: str) -> None:
    x = torch.randn(1, 1, 6, 6, dtype=torch.float64, device=device)
    f = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    corr = F.conv2d(x, f.double()[None, None])  # conv2d correlates
    conv = F.conv2d(x, f.double().flip(0, 1)[None, None])
    for impl in IMPLS:
        torch.testing.assert_close(fusedops.upfirdn2d(x, f, flip_filter=True, impl=impl), corr)
        torch.testing.assert_close(fusedops.upfirdn2d(x, f, flip_filter=False, impl=impl), conv)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
def test_separable_filter_equals_its_outer_product(device: str, impl: str) -> None:
    x = torch.randn(2, 2, 9, 10, dtype=torch.float64, device=device)
    taps = [1.0, 3.0, -2.0, 5.0]
    f1 = torch.tensor(taps, device=device)
    f2 = torch.outer(f1, f1)
    for kw in ({"up": 2, "padding": [2, 1, 2, 1], "gain": 3.0}, {"down": 2, "padding": 1}, {"flip_filter": True}):
        torch.testing.assert_close(fusedops.upfirdn2d(x, f1, impl=impl, **kw),  # type: ignore[arg-type]
                                   fusedops.upfirdn2d(x, f2, impl=impl, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
def test_upfirdn2d_gradients_of_any_order(device: str, impl: str) -> None:
    # "It supports gradients of arbitrary order": gradcheck, gradgradcheck and a
    # third-order derivative against the float64 reference's.
    x = torch.randn(1, 2, 5, 6, dtype=torch.float64, device=device, requires_grad=True)
    f = fusedops.setup_filter([1, 2, 3, 1], device=device)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return fusedops.upfirdn2d(t, f, up=2, down=[1, 2], padding=[2, 1, 1, 2], gain=2.0, impl=impl)

    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))

    def third(fn_: object) -> torch.Tensor:
        y = fn_(x)  # type: ignore[operator]
        (g1,) = torch.autograd.grad(y.pow(3).sum(), x, create_graph=True)
        (g2,) = torch.autograd.grad(g1.pow(2).sum(), x, create_graph=True)
        (g3,) = torch.autograd.grad(g2.sum(), x)
        return g3

    want = third(lambda t: first_principles_upfirdn2d(t, f, (2, 2), (1, 2), (2, 1, 1, 2), False, 2.0))
    torch.testing.assert_close(third(fn), want)


@pytest.mark.parametrize("device", DEVICES)
def test_upfirdn2d_filter_gets_no_gradient(device: str) -> None:
    # The original asserts that f does not require grad; fusedops treats f as a constant.
    x = torch.randn(1, 1, 4, 4, device=device, requires_grad=True)
    f = torch.ones(2, 2, device=device, requires_grad=True)
    for impl in IMPLS:
        y = fusedops.upfirdn2d(x, f, impl=impl)
        y.sum().backward()
        assert x.grad is not None and f.grad is None
        x.grad = None


def test_upfirdn2d_rejects_an_unknown_impl() -> None:
    x = torch.randn(1, 1, 4, 4)
    for fn in (fusedops.upfirdn2d, fusedops.filter2d, fusedops.upsample2d, fusedops.downsample2d):
        with pytest.raises(ValueError, match=r"impl must be 'cuda' or 'ref', got 'fast'"):
            fn(x, None, impl="fast")
    with pytest.raises(ValueError, match=r"setup_filter: impl must be"):
        fusedops.setup_filter([1, 1], impl="fast")


# --- setup_filter and the helpers ----------------------------------------------------------


def test_setup_filter_documented_behaviour() -> None:
    # None: the identity; a scalar: an impulse; [] taps < 8: 2-D outer product; >= 8: separable.
    assert torch.equal(fusedops.setup_filter(None), torch.ones(1, 1))
    assert torch.equal(fusedops.setup_filter(3.0), torch.ones(1, 1))
    f = fusedops.setup_filter([1, 3, 3, 1])
    assert f.shape == (4, 4) and f.dtype == torch.float32
    torch.testing.assert_close(f, torch.outer(torch.tensor([1.0, 3, 3, 1]), torch.tensor([1.0, 3, 3, 1])) / 64)
    assert fusedops.setup_filter(list(range(1, 9))).shape == (8,)
    assert fusedops.setup_filter([1, 2], separable=True).shape == (2,)
    assert fusedops.setup_filter(list(range(1, 9)), separable=False).shape == (8, 8)
    # normalize: sums to 1 (DC preserved); off: left as given
    assert fusedops.setup_filter([[1, 2], [3, 4]]).sum().item() == pytest.approx(1.0)
    assert torch.equal(fusedops.setup_filter([[1, 2], [3, 4]], normalize=False), torch.tensor([[1.0, 2], [3, 4]]))
    # flip_filter flips every axis; gain scales by gain ** (ndim / 2)
    assert torch.equal(fusedops.setup_filter([[1, 2], [3, 4]], normalize=False, flip_filter=True),
                       torch.tensor([[4.0, 3], [2, 1]]))
    torch.testing.assert_close(fusedops.setup_filter([[1, 2], [3, 4]], normalize=False, gain=4),
                               torch.tensor([[4.0, 8], [12, 16]]))
    torch.testing.assert_close(fusedops.setup_filter([1, 2], normalize=False, separable=True, gain=4),
                               torch.tensor([2.0, 4]))
    # numpy arrays and tensors are accepted; the caller's tensor is not modified
    np = pytest.importorskip("numpy")
    assert fusedops.setup_filter(np.array([1.0, 1.0])).shape == (2, 2)
    given = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    fusedops.setup_filter(given)
    assert torch.equal(given, torch.ones(2, 2))


@pytest.mark.cuda
def test_setup_filter_device() -> None:
    assert fusedops.setup_filter([1, 2, 1], device="cuda").device.type == "cuda"
    assert fusedops.setup_filter([1, 2, 1], device=torch.device("cuda")).device.type == "cuda"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", IMPLS)
def test_helpers_sizes_and_dc_gain(device: str, impl: str) -> None:
    # Documented: filter2d keeps the size; upsample2d multiplies it by up,
    # downsample2d divides it by down; with a normalised filter a constant
    # image stays the same constant away from the borders (for upsample2d: with
    # a filter whose even and odd taps sum alike, as StyleGAN's [1, 3, 3, 1]).
    x = torch.full((1, 2, 16, 12), 3.0, dtype=torch.float64, device=device)
    for taps in ([1, 1], [1, 3, 3, 1], [1, 2, 1], list(range(1, 11))):  # 10 taps: separable
        f = fusedops.setup_filter(taps, device=device)
        y = fusedops.filter2d(x, f, impl=impl)
        assert y.shape == x.shape
        torch.testing.assert_close(y[:, :, 5:-5, 5:-5], x[:, :, 5:-5, 5:-5])
        y = fusedops.upsample2d(x, f, impl=impl)
        assert y.shape == (1, 2, 32, 24)
        if sum(taps[0::2]) == sum(taps[1::2]):
            torch.testing.assert_close(y[:, :, 8:-8, 8:-8], torch.full_like(y[:, :, 8:-8, 8:-8], 3.0))
        y = fusedops.upsample2d(x, f, up=[2, 4], impl=impl)
        assert y.shape == (1, 2, 64, 24)
        y = fusedops.downsample2d(x, f, impl=impl)
        assert y.shape == (1, 2, 8, 6)
        torch.testing.assert_close(y[:, :, 3:-3, 3:-3], torch.full_like(y[:, :, 3:-3, 3:-3], 3.0))
        y = fusedops.downsample2d(x, f, down=[3, 2], padding=[1, 2], impl=impl)
        assert y.shape == (1, 2, (16 + 4) // 2, (12 + 2) // 3)


@pytest.mark.parametrize("device", DEVICES)
def test_helpers_are_upfirdn2d_with_documented_padding(device: str) -> None:
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64, device=device)
    f = torch.randn(4, 3, device=device)  # fh = 4, fw = 3
    for impl in IMPLS:
        torch.testing.assert_close(
            fusedops.filter2d(x, f, padding=[1, 2], gain=2.0, impl=impl),
            first_principles_upfirdn2d(x, f, (1, 1), (1, 1), (1 + 1, 1 + 1, 2 + 2, 2 + 1), False, 2.0))
        torch.testing.assert_close(
            fusedops.upsample2d(x, f, up=[2, 3], flip_filter=True, impl=impl),
            first_principles_upfirdn2d(x, f, (2, 3), (1, 1), ((3 + 1) // 2, (3 - 2) // 2, (4 + 2) // 2, (4 - 3) // 2),
                                       True, 6.0))
        torch.testing.assert_close(
            fusedops.downsample2d(x, f, down=[2, 3], padding=1, impl=impl),
            first_principles_upfirdn2d(x, f, (1, 1), (2, 3), (1 + (3 - 2 + 1) // 2, 1 + (3 - 2) // 2,
                                                              1 + (4 - 3 + 1) // 2, 1 + (4 - 3) // 2), False, 1.0))


@pytest.mark.parametrize("device", DEVICES)
def test_impl_cuda_and_ref_agree_in_float32(device: str) -> None:
    # Same-precision comparison of the two implementations on a StyleGAN-sized case.
    x = torch.randn(2, 16, 32, 32, device=device)
    f = fusedops.setup_filter([1, 3, 3, 1], device=device)
    for fn, kw in ((fusedops.upsample2d, {}), (fusedops.downsample2d, {}), (fusedops.filter2d, {"padding": 1}),
                   (fusedops.upfirdn2d, {"up": 2, "down": 2, "padding": [1, 2, 1, 2]})):
        torch.testing.assert_close(fn(x, f, impl="cuda", **kw), fn(x, f, impl="ref", **kw),  # type: ignore[operator]
                                   rtol=1e-5, atol=1e-5)
    b = torch.randn(16, device=device)
    for act in ACTIVATIONS:
        torch.testing.assert_close(fusedops.bias_act(x, b, act=act, clamp=256, impl="cuda"),
                                   fusedops.bias_act(x, b, act=act, clamp=256, impl="ref"), rtol=2e-5, atol=2e-5)
