"""Parity with the LLTM of the PyTorch C++/CUDA extension tutorial (pytorch/extension-cpp).

The tutorial's documented module and function, written as tests: its module
keeps ``weights`` ``(3*state_size, input_features + state_size)`` and ``bias``
``(1, 3*state_size)``, initialises both uniformly in ``+-1/sqrt(state_size)``,
and its step is ``LLTMFunction.apply(input, weights, bias, old_h, old_cell)``
returning ``(new_h, new_cell)``; the cell is ``X = cat([old_h, input])``,
``gates = X @ weights.T + bias`` split in three, ``new_cell = old_cell +
elu(g2) * sigmoid(g0)``, ``new_h = tanh(new_cell) * sigmoid(g1)``. Checked
against float64 references from first principles, on the CPU and (tests marked
``cuda``) on a GPU. No code of the tutorial is used: ``TutorialShapedLLTM``
below only holds parameters with the tutorial's names and shapes, to make the
state dicts a user of the tutorial has.
"""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

import fusedops

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class TutorialShapedLLTM(nn.Module):
    """Parameters named and shaped like the tutorial's module (its forward is the reference)."""

    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.randn(3 * state_size, input_features + state_size) * 0.1)
        self.bias = nn.Parameter(torch.randn(1, 3 * state_size) * 0.1)

    def forward(self, input: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        return first_principles_lltm(input, self.weights, self.bias, *state)


def first_principles_lltm(input: torch.Tensor, weights: torch.Tensor, bias: torch.Tensor, old_h: torch.Tensor,
                          old_cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.cat([old_h, input], dim=1)
    gates = X @ weights.t() + bias  # bias (3S,) or (1, 3S): broadcast over the batch either way
    g0, g1, g2 = gates.chunk(3, dim=1)
    candidate = torch.where(g2 > 0, g2, torch.expm1(g2))
    new_cell = old_cell + candidate * (1 / (1 + torch.exp(-g0)))
    return torch.tanh(new_cell) * (1 / (1 + torch.exp(-g1))), new_cell


def make_args(batch: int, features: int, state: int, device: str, dtype: torch.dtype = torch.float64,
              bias_2d: bool = True) -> list[torch.Tensor]:
    bias = torch.randn(1, 3 * state, dtype=dtype, device=device) * 0.3
    return [
        torch.randn(batch, features, dtype=dtype, device=device),
        torch.randn(3 * state, features + state, dtype=dtype, device=device) * 0.3,
        bias if bias_2d else bias[0],
        torch.randn(batch, state, dtype=dtype, device=device),
        torch.randn(batch, state, dtype=dtype, device=device),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias_2d", [True, False], ids=["bias(1,3S)", "bias(3S,)"])
def test_lltm_step_matches_first_principles(device: str, bias_2d: bool) -> None:
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-5)):
        args = [a.requires_grad_() for a in make_args(5, 7, 6, device, dtype, bias_2d)]
        ref_args = [a.detach().double().requires_grad_() for a in args]
        h, c = fusedops.lltm(*args)
        rh, rc = first_principles_lltm(*ref_args)
        assert h.shape == c.shape == (5, 6) and h.dtype == dtype
        torch.testing.assert_close(h.double(), rh, rtol=tol, atol=tol)
        torch.testing.assert_close(c.double(), rc, rtol=tol, atol=tol)
        gh, gc = torch.randn_like(rh), torch.randn_like(rc)
        torch.autograd.backward((h, c), (gh.to(dtype), gc.to(dtype)))
        torch.autograd.backward((rh, rc), (gh, gc))
        for a, r in zip(args, ref_args, strict=True):
            assert a.grad is not None and r.grad is not None
            assert a.grad.shape == a.shape  # the bias's gradient has the bias's shape
            torch.testing.assert_close(a.grad.double(), r.grad, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_both_bias_shapes_give_the_same_step(device: str) -> None:
    args2d = make_args(4, 3, 5, device)
    args1d = list(args2d)
    args1d[2] = args2d[2].reshape(-1)
    h2, c2 = fusedops.lltm(*args2d)
    h1, c1 = fusedops.lltm(*args1d)
    torch.testing.assert_close(h1, h2, rtol=0, atol=0)
    torch.testing.assert_close(c1, c2, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_gradcheck_with_the_tutorials_bias(device: str) -> None:
    # The tutorial's grad_check.py: gradcheck of the step in double precision.
    args = [a.requires_grad_() for a in make_args(3, 4, 5, device)]
    assert torch.autograd.gradcheck(fusedops.lltm, args)
    assert torch.autograd.gradcheck(lambda *a: fusedops.lltm(*a)[0], args)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_partial_requires_grad(device: str) -> None:
    # Only some inputs need gradients (frozen weights, a detached state).
    args = make_args(4, 3, 5, device)
    for needs in ((True, False, False, False, False), (False, True, True, False, False),
                  (False, False, False, True, True), (False, False, True, False, False)):
        xs = [a.detach().clone().requires_grad_(n) for a, n in zip(args, needs, strict=True)]
        rs = [a.detach().clone().requires_grad_(n) for a, n in zip(args, needs, strict=True)]
        (fusedops.lltm(*xs)[0].sum() * 2 + fusedops.lltm(*xs)[1].pow(2).sum()).backward()
        (first_principles_lltm(*rs)[0].sum() * 2 + first_principles_lltm(*rs)[1].pow(2).sum()).backward()
        for x, r, n in zip(xs, rs, needs, strict=True):
            assert (x.grad is not None) == n
            if n:
                torch.testing.assert_close(x.grad, r.grad)


# --- the module and its state dict ---------------------------------------------------------


def test_module_parameters_have_the_tutorials_names_shapes_and_init() -> None:
    cell = fusedops.LLTM(32, 128)
    assert [name for name, _ in cell.named_parameters()] == ["weights", "bias"]
    assert cell.weights.shape == (384, 160)
    assert cell.bias.shape == (1, 384)
    bound = 1 / math.sqrt(128)
    for p in cell.parameters():
        assert p.abs().max() <= bound
        # uniform on [-bound, bound]: mean ~0, variance bound^2 / 3
        assert abs(p.mean().item()) < bound * 0.05
        assert p.var().item() == pytest.approx(bound**2 / 3, rel=0.1)


@pytest.mark.parametrize("device", DEVICES)
def test_state_dict_saved_from_the_tutorials_module_loads(device: str) -> None:
    tutorial = TutorialShapedLLTM(6, 10).to(device)
    buf = io.BytesIO()
    torch.save(tutorial.state_dict(), buf)  # through torch.save, as a checkpoint would
    buf.seek(0)
    cell = fusedops.LLTM(6, 10).to(device)
    result = cell.load_state_dict(torch.load(buf, map_location=device), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert torch.equal(cell.weights, tutorial.weights) and torch.equal(cell.bias, tutorial.bias)
    x = torch.randn(3, 6, device=device)
    state = (torch.randn(3, 10, device=device), torch.randn(3, 10, device=device))
    for got, want in zip(cell(x, state), tutorial(x, state), strict=True):
        torch.testing.assert_close(got, want)


def test_state_dict_of_fusedops_loads_into_the_tutorials_module() -> None:
    cell = fusedops.LLTM(6, 10)
    tutorial = TutorialShapedLLTM(6, 10)
    tutorial.load_state_dict(cell.state_dict(), strict=True)
    assert torch.equal(tutorial.bias, cell.bias)


def test_state_dict_with_a_flat_bias_loads() -> None:
    # fusedops 0.1 kept the bias as (3 * state_size,): such checkpoints still load.
    state = {"weights": torch.randn(30, 16), "bias": torch.randn(30)}
    cell = fusedops.LLTM(6, 10)
    cell.load_state_dict(state)
    assert cell.bias.shape == (1, 30) and torch.equal(cell.bias[0], state["bias"])
    # Inside a parent module (a prefixed key) too.
    parent = nn.Sequential(fusedops.LLTM(6, 10))
    parent.load_state_dict({"0.weights": state["weights"], "0.bias": state["bias"]})
    assert torch.equal(parent[0].bias[0], state["bias"])
    # A wrong shape is still an error.
    with pytest.raises(RuntimeError, match="size mismatch for bias"):
        cell.load_state_dict({"weights": state["weights"], "bias": torch.randn(29)})


@pytest.mark.parametrize("device", DEVICES)
def test_module_forward_backward_like_the_tutorial(device: str) -> None:
    # The tutorial's benchmark loop: forward with (h, c), loss on both outputs, backward.
    tutorial = TutorialShapedLLTM(32, 128).to(device).double()
    cell = fusedops.LLTM(32, 128, device=device, dtype=torch.float64)
    cell.load_state_dict(tutorial.state_dict())
    x = torch.randn(16, 32, device=device, dtype=torch.float64)
    h = torch.randn(16, 128, device=device, dtype=torch.float64)
    c = torch.randn(16, 128, device=device, dtype=torch.float64)
    new_h, new_c = cell(x, (h, c))
    (new_h.sum() + new_c.sum()).backward()
    rh, rc = tutorial(x, (h, c))
    (rh.sum() + rc.sum()).backward()
    torch.testing.assert_close(new_h, rh)
    torch.testing.assert_close(new_c, rc)
    for p, q in zip(cell.parameters(), tutorial.parameters(), strict=True):
        assert p.grad is not None and p.grad.shape == p.shape
        torch.testing.assert_close(p.grad, q.grad)
    # The state may be a list, as `*state` unpacking allows.
    torch.testing.assert_close(cell(x, [h, c])[0], new_h)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_is_first_order_and_says_so(device: str) -> None:
    # Like the tutorial's extension, the step differentiates once; a second
    # derivative is an error, never a silently wrong number.
    args = [a.requires_grad_() for a in make_args(3, 4, 5, device)]
    h, _ = fusedops.lltm(*args)
    (g,) = torch.autograd.grad(h.sum(), args[0], create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()
