from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

import fusedops
from fusedops import reference

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
ACTS = list(fusedops.activation_funcs)
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 4e-2}


def dtypes(device: str) -> list[torch.dtype]:
    return [torch.float32, torch.float64] + ([torch.float16, torch.bfloat16] if device == "cuda" else [])


def away_from_kinks(x: torch.Tensor) -> torch.Tensor:
    """Keep samples away from 0 where relu/lrelu/elu have kinks (numerical derivatives differ there)."""
    return torch.where(x.abs() < 0.05, x.sign() * 0.05 + x, x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
def test_forward_matches_reference(device: str, act: str) -> None:
    x64 = torch.randn(3, 5, 4, 6, dtype=torch.float64, device=device) * 2
    b64 = torch.randn(5, dtype=torch.float64, device=device)
    for clamp in (None, 0.7):
        want = reference.bias_act(x64, b64, act=act, clamp=clamp)
        for dtype in dtypes(device):
            got = fusedops.bias_act(x64.to(dtype), b64.to(dtype), act=act, clamp=clamp)
            assert got.dtype == dtype
            torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_alpha_gain_dim_and_no_bias(device: str) -> None:
    x = torch.randn(7, 9, dtype=torch.float64, device=device)
    b0 = torch.randn(7, dtype=torch.float64, device=device)
    b_last = torch.randn(9, dtype=torch.float64, device=device)
    for kwargs in ({"b": b0, "dim": 0}, {"b": b_last, "dim": -1}, {"b": None}):
        for act, alpha, gain in (("lrelu", 0.1, 3.0), ("elu", 0.5, None), ("swish", None, 0.5)):
            torch.testing.assert_close(fusedops.bias_act(x, act=act, alpha=alpha, gain=gain, **kwargs),
                                       reference.bias_act(x, act=act, alpha=alpha, gain=gain, **kwargs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
def test_first_and_second_order_gradients(device: str, act: str) -> None:
    x = away_from_kinks(torch.randn(2, 3, 2, 2, dtype=torch.float64, device=device)).requires_grad_()
    b = (torch.randn(3, dtype=torch.float64, device=device) * 0.01).requires_grad_()
    clamps = (None, 0.9) if act not in ("linear",) else (None,)
    for clamp in clamps:
        def f(x: torch.Tensor, b: torch.Tensor, clamp: float | None = clamp) -> torch.Tensor:
            return fusedops.bias_act(x, b, act=act, clamp=clamp)

        assert torch.autograd.gradcheck(f, (x, b))
        assert torch.autograd.gradgradcheck(f, (x, b))
    # without bias, dim 0 of a 2-D input
    x2 = away_from_kinks(torch.randn(4, 3, dtype=torch.float64, device=device)).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda t: fusedops.bias_act(t, act=act, dim=0), (x2,))


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_is_zero_where_clamped(device: str) -> None:
    x = torch.tensor([-5.0, -0.1, 0.1, 5.0], dtype=torch.float64, device=device, requires_grad=True)
    y = fusedops.bias_act(x, act="linear", gain=1.0, clamp=1.0)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.tolist() == [0.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("device", DEVICES)
def test_second_order_matches_reference(device: str) -> None:
    x = away_from_kinks(torch.randn(2, 4, 3, 3, dtype=torch.float64, device=device)).requires_grad_()
    b = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)
    for act in ("lrelu", "tanh", "swish", "softplus"):
        results = []
        for impl in (fusedops.bias_act, reference.bias_act):
            y = impl(x, b, act=act, clamp=2.0)
            (gx,) = torch.autograd.grad((y ** 2).sum(), x, create_graph=True)
            results.append(torch.autograd.grad(gx.pow(2).sum(), (x, b)))
        for got, want in zip(*results, strict=True):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_layouts_and_empty(device: str) -> None:
    x = torch.randn(2, 8, 5, 7, device=device)
    b = torch.randn(8, device=device)
    want = reference.bias_act(x, b, act="lrelu")
    cl = fusedops.bias_act(x.to(memory_format=torch.channels_last), b, act="lrelu")
    assert cl.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(cl, want)
    sliced = x[:, :, 1:, ::2]
    torch.testing.assert_close(fusedops.bias_act(sliced, b, act="tanh"), reference.bias_act(sliced, b, act="tanh"))
    t = x.transpose(2, 3)
    torch.testing.assert_close(fusedops.bias_act(t, b, act="swish"), reference.bias_act(t, b, act="swish"))
    assert fusedops.bias_act(torch.empty(0, 8, device=device), b, act="relu").shape == (0, 8)
    # channels_last gradient with a contiguous incoming gradient
    xg = x.to(memory_format=torch.channels_last).requires_grad_()
    (g,) = torch.autograd.grad(fusedops.bias_act(xg, b, act="elu"), xg, torch.ones_like(x))
    xr = x.clone().requires_grad_()
    (gr,) = torch.autograd.grad(reference.bias_act(xr, b, act="elu"), xr, torch.ones_like(x))
    torch.testing.assert_close(g, gr)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device: str) -> None:
    x = torch.randn(2, 3, 4, device=device, requires_grad=True)
    b = torch.randn(3, device=device, requires_grad=True)
    opcheck(torch.ops.fusedops.bias_act.default, (x, b, 1, 2, 0.2, 1.4, -1.0))
    opcheck(torch.ops.fusedops.bias_act.default, (x.detach().permute(2, 0, 1), None, 0, 3, 0.0, 1.0, 0.5))
    opcheck(torch.ops.fusedops.bias_act_grad.default,
            (torch.randn(2, 3, 4, device=device), x, b, 1, 8, 0.0, 1.4, 1.0, 1))
    dy = torch.randn(2, 3, 4, device=device, requires_grad=True)
    opcheck(torch.ops.fusedops.bias_act_grad_db.default, (dy, x, b, 1, 2, 0.2, 1.4, 0.5))
    opcheck(torch.ops.fusedops.bias_act_grad_db.default, (dy.detach(), x.detach(), b.detach(), 1, 8, 0.0, 1.4, -1.0))


# The backward's paths through the kernels: channel runs long enough for the CUDA kernel that reduces db in the same
# pass (NCHW with H*W >= 2048; one and several segments of a run), bias rows ([N, C], channels a multiple of the
# vector width and not), a size with a tail after the last 16-byte pack, and an unaligned view (the generic kernel).
BACKWARD_SHAPES = [((2, 3, 64, 48), 1), ((2, 2, 16404), 1), ((37, 24), 1), ((5, 7, 9), 2), ((3, 5, 4101), 1)]


def _unaligned(t: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:]
    return flat.view(t.shape).copy_(t)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
def test_backward_dx_and_db_on_every_kernel_path(device: str, act: str) -> None:
    gen = torch.Generator(device="cpu").manual_seed(3)
    for (shape, dim), unaligned in [(s, False) for s in BACKWARD_SHAPES] + [(BACKWARD_SHAPES[0], True)]:
        x64 = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(device)
        b64 = torch.randn(shape[dim], generator=gen, dtype=torch.float64).to(device)
        dy64 = torch.randn(shape, generator=gen, dtype=torch.float64).to(device)
        per_channel = x64.numel() // shape[dim]
        for clamp in (None, 0.8):
            for dtype in dtypes(device):
                # The reference starts from the inputs as rounded to dtype, so that both sides clamp the same elements.
                xr = x64.to(dtype).double().requires_grad_()
                br = b64.to(dtype).double().requires_grad_()
                want_dx, want_db = torch.autograd.grad(reference.bias_act(xr, br, dim=dim, act=act, clamp=clamp),
                                                       (xr, br), dy64.to(dtype).double())
                x = (_unaligned(x64.to(dtype)) if unaligned else x64.to(dtype)).requires_grad_()
                b = b64.to(dtype).requires_grad_()
                dx, db = torch.autograd.grad(fusedops.bias_act(x, b, dim=dim, act=act, clamp=clamp), (x, b),
                                             dy64.to(dtype))
                tol = TOL[dtype]
                torch.testing.assert_close(dx.double(), want_dx, rtol=tol, atol=tol)
                # db is the sum of dx as returned (in float), whichever kernel reduced it.
                dims = [d for d in range(len(shape)) if d != dim]
                torch.testing.assert_close(db.double(), dx.double().sum(dims), rtol=tol, atol=tol * per_channel**0.5)
                torch.testing.assert_close(db.double(), want_db, rtol=tol, atol=4 * tol * per_channel**0.5)


@pytest.mark.cuda
def test_fused_bias_gradient_is_deterministic() -> None:
    x = torch.randn(4, 8, 64, 64, device="cuda")
    b = torch.randn(8, device="cuda")
    dy = torch.randn_like(x)
    first = torch.ops.fusedops.bias_act_grad_db.default(dy, x, b, 1, 8, 0.0, 1.4, -1.0)
    for _ in range(3):
        again = torch.ops.fusedops.bias_act_grad_db.default(dy, x, b, 1, 8, 0.0, 1.4, -1.0)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device: str) -> None:
    def f(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return fusedops.bias_act(x * 2, b, act="lrelu", clamp=256.0).sum(dim=1)

    x = torch.randn(4, 16, 8, 8, device=device, requires_grad=True)
    b = torch.randn(16, device=device, requires_grad=True)
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x, b), f(x, b))
    g1 = torch.autograd.grad(compiled(x, b).sum(), (x, b))
    g2 = torch.autograd.grad(f(x, b).sum(), (x, b))
    for a, c in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, c)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"x": torch.arange(4)}, TypeError, "x must be float16"),
        ({"b": torch.randn(5)}, ValueError, r"b must be 1-D with x.shape\[1\] = 3"),
        ({"b": torch.randn(3, dtype=torch.float64)}, TypeError, "b has dtype torch.float64"),
        ({"act": "gelu"}, ValueError, "act must be one of"),
        ({"clamp": -1.0}, ValueError, "clamp must be >= 0"),
        ({"dim": 4}, ValueError, "dim=4 is out of range"),
    ],
)
def test_bad_input_names_the_argument(kwargs: dict[str, object], error: type, match: str) -> None:
    args: dict[str, object] = {"x": torch.randn(2, 3, 4), "b": torch.randn(3)}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        fusedops.bias_act(**args)  # type: ignore[arg-type]


def test_direct_op_call_with_bad_bias_raises() -> None:
    with pytest.raises(RuntimeError, match="b must be 1-D"):
        torch.ops.fusedops.bias_act(torch.randn(2, 3), torch.randn(4), 1, 0, 0.0, 1.0, -1.0)
