from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

import fusedops
from fusedops import reference

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def make(batch: int, features: int, state: int, device: str, dtype: torch.dtype = torch.float64,
         grad: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    shapes = [(batch, features), (3 * state, features + state), (3 * state,), (batch, state), (batch, state)]
    return tuple(torch.randn(*s, generator=g, dtype=torch.float64).mul(0.5).to(device=device, dtype=dtype)
                 .requires_grad_(grad) for s in shapes)


def dtypes(device: str) -> list[torch.dtype]:
    return [torch.float32, torch.float64] + ([torch.float16, torch.bfloat16] if device == "cuda" else [])


@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference_in_every_dtype(device: str) -> None:
    exact = make(16, 32, 128, device)
    want_h, want_c = reference.lltm(*exact)
    for dtype in dtypes(device):
        args = tuple(a.to(dtype) for a in exact)
        h, c = fusedops.lltm(*args)
        assert h.dtype == dtype and h.shape == (16, 128)
        torch.testing.assert_close(h.double(), want_h, rtol=TOL[dtype], atol=TOL[dtype] * 4)
        torch.testing.assert_close(c.double(), want_c, rtol=TOL[dtype], atol=TOL[dtype] * 4)


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_match_reference_and_gradcheck(device: str) -> None:
    args = make(4, 5, 6, device, grad=True)
    assert torch.autograd.gradcheck(fusedops.lltm, args)
    h, c = fusedops.lltm(*args)
    grads = torch.autograd.grad((h * 1.3 + c * 0.7).sum(), args)
    rh, rc = reference.lltm(*args)
    want = torch.autograd.grad((rh * 1.3 + rc * 0.7).sum(), args)
    for got, ref in zip(grads, want, strict=True):
        torch.testing.assert_close(got, ref)
    # Only one of the outputs used: the other gradient is None inside the backward.
    (g_only_h,) = torch.autograd.grad(fusedops.lltm(*args)[0].sum(), args[0])
    (r_only_h,) = torch.autograd.grad(reference.lltm(*args)[0].sum(), args[0])
    torch.testing.assert_close(g_only_h, r_only_h)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_and_empty(device: str) -> None:
    inp, w, b, h, c = make(6, 4, 8, device)
    c_t = c.t().contiguous().t()  # same values, transposed strides
    torch.testing.assert_close(fusedops.lltm(inp, w, b, h, c_t), reference.lltm(inp, w, b, h, c))
    empty = make(0, 4, 8, device)
    out_h, out_c = fusedops.lltm(*empty)
    assert out_h.shape == (0, 8) and out_c.shape == (0, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device: str) -> None:
    gates = torch.randn(5, 3 * 7, device=device, requires_grad=True)
    cell = torch.randn(5, 7, device=device, requires_grad=True)
    opcheck(torch.ops.fusedops.lltm_cell.default, (gates, cell))
    new_cell = torch.randn(5, 7, device=device)
    opcheck(torch.ops.fusedops.lltm_cell_backward.default,
            (torch.randn(5, 7, device=device), torch.randn(5, 7, device=device), gates.detach(), new_cell))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward_and_backward(device: str) -> None:
    args = make(8, 6, 10, device, dtype=torch.float32, grad=True)

    def step(*a: torch.Tensor) -> torch.Tensor:
        h, c = fusedops.lltm(*a)
        return (h.sum() + 2 * c.sum())

    compiled = torch.compile(step, fullgraph=True)
    torch.testing.assert_close(compiled(*args), step(*args))
    g_compiled = torch.autograd.grad(compiled(*args), args)
    g_eager = torch.autograd.grad(step(*args), args)
    for a, b in zip(g_compiled, g_eager, strict=True):
        torch.testing.assert_close(a, b)


def test_module() -> None:
    torch.manual_seed(0)
    cell = fusedops.LLTM(32, 128)
    x = torch.randn(16, 32)
    h = torch.zeros(16, 128)
    c = torch.zeros(16, 128)
    new_h, new_c = cell(x, (h, c))
    (new_h.sum() + new_c.sum()).backward()
    assert cell.weights.grad is not None and cell.weights.grad.shape == (384, 160)
    torch.testing.assert_close(new_h, reference.lltm(x, cell.weights, cell.bias, h, c)[0])


@pytest.mark.parametrize(
    ("index", "value", "error", "match"),
    [
        (0, "not a tensor", TypeError, "input must be a torch.Tensor"),
        (1, torch.randn(3, 3, dtype=torch.float64), ValueError, r"weights must be \(3\*state, features\+state\)"),
        (2, torch.randn(7, dtype=torch.float64), ValueError, r"bias must have shape \(24,\)"),
        (3, torch.randn(2, 8, dtype=torch.float64), ValueError, "old_h and old_cell must both be"),
        (4, torch.ones(4, 8, dtype=torch.long), TypeError, "old_cell must be a floating-point tensor"),
        (4, torch.ones(4, 8, dtype=torch.float32), TypeError, "old_cell has dtype torch.float32"),
    ],
)
def test_bad_input_names_the_argument(index: int, value: object, error: type, match: str) -> None:
    args = list(make(4, 5, 8, "cpu"))
    args[index] = value
    with pytest.raises(error, match=match):
        fusedops.lltm(*args)


def test_direct_op_call_with_bad_shapes_raises() -> None:
    with pytest.raises(RuntimeError, match="gate_weights must be"):
        torch.ops.fusedops.lltm_cell(torch.randn(4, 10), torch.randn(4, 4))
