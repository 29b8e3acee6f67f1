"""LLTM tests: CPU always; the same cases on CUDA when a GPU is visible."""

from __future__ import annotations

import math

import pytest
import torch
from torch.library import opcheck

import fusedops  # noqa: F401  (loads the libraries)
from fusedops._lltm import LLTM, lltm, reference_lltm

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
FLOAT_DTYPES = [torch.float32, torch.float64]
# Forward / gradient tolerances against a float64 reference computed from the
# same (rounded) inputs; half and bfloat16 run the matrix product in their own
# precision, so most of their error comes from there.
TOL = {
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
}


def dtypes_for(device: str) -> list[torch.dtype]:
    return FLOAT_DTYPES + ([torch.float16, torch.bfloat16] if device == "cuda" else [])


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def make_args(
    batch: int, features: int, state: int, dtype: torch.dtype = torch.float32, device: str = "cpu",
    requires_grad: bool = False,
) -> list[torch.Tensor]:
    stdv = 1.0 / math.sqrt(state)
    args = [
        torch.randn(batch, features, dtype=dtype, device=device),
        (torch.rand(3 * state, features + state, dtype=dtype, device=device) * 2 - 1) * stdv * 2,
        (torch.rand(3 * state, dtype=dtype, device=device) * 2 - 1) * stdv * 2,
        torch.randn(batch, state, dtype=dtype, device=device),
        torch.randn(batch, state, dtype=dtype, device=device),
    ]
    return [a.requires_grad_(requires_grad) for a in args]


def run_with_grads(fn, args, grad_h, grad_cell):  # type: ignore[no-untyped-def]
    """Forward, then backward of <new_h, grad_h> + <new_cell, grad_cell>; returns outputs and input grads."""
    args = [a.detach().clone().requires_grad_(True) for a in args]
    new_h, new_cell = fn(*args)
    loss = (new_h.float() * grad_h.float()).sum() + (new_cell.float() * grad_cell.float()).sum()
    loss.backward()
    return (new_h.detach(), new_cell.detach()), [a.grad for a in args]


# --- numerics -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(5, 7, 9), (16, 32, 128), (3, 1, 33)])
def test_lltm_matches_reference(device: str, shape: tuple[int, int, int]) -> None:
    batch, features, state = shape
    for dtype in dtypes_for(device):
        args = make_args(batch, features, state, dtype, device)
        grad_h = torch.randn(batch, state, dtype=dtype, device=device)
        grad_cell = torch.randn(batch, state, dtype=dtype, device=device)
        (h, c), grads = run_with_grads(lltm, args, grad_h, grad_cell)
        ref_args = [a.double() for a in args]
        (rh, rc), rgrads = run_with_grads(reference_lltm, ref_args, grad_h.double(), grad_cell.double())
        assert h.dtype == dtype and c.dtype == dtype
        assert h.shape == (batch, state) and h.is_contiguous() and c.is_contiguous()
        tol = TOL[dtype]
        torch.testing.assert_close(h.double(), rh, **tol)
        torch.testing.assert_close(c.double(), rc, **tol)
        for name, g, rg in zip(("input", "weights", "bias", "old_h", "old_cell"), grads, rgrads, strict=True):
            scale = max(1.0, rg.abs().max().item())  # weights/bias grads sum over the batch
            torch.testing.assert_close(
                g.double() / scale, rg / scale, **tol, msg=lambda m, n=name, d=dtype: f"{n} ({d}): {m}"
            )


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_matches_reference_in_float32_exactly_enough(device: str) -> None:
    # Same-precision comparison with the eager reference (no float64 detour).
    args = make_args(16, 32, 128, torch.float32, device)
    gh, gc = torch.randn(16, 128, device=device), torch.randn(16, 128, device=device)
    (h, c), grads = run_with_grads(lltm, args, gh, gc)
    (rh, rc), rgrads = run_with_grads(reference_lltm, args, gh, gc)
    torch.testing.assert_close(h, rh)
    torch.testing.assert_close(c, rc)
    for g, rg in zip(grads, rgrads, strict=True):
        torch.testing.assert_close(g, rg, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_one_output_used(device: str) -> None:
    # Only new_h (or only new_cell) feeds the loss: the other gradient is None in
    # the backward and must count as zeros.
    args = make_args(4, 6, 10, torch.float64, device)
    for pick in (0, 1):
        xs = [a.detach().clone().requires_grad_(True) for a in args]
        rs = [a.detach().clone().requires_grad_(True) for a in args]
        lltm(*xs)[pick].pow(2).sum().backward()
        reference_lltm(*rs)[pick].pow(2).sum().backward()
        for x, r in zip(xs, rs, strict=True):
            torch.testing.assert_close(x.grad, r.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_gradcheck(device: str) -> None:
    args = make_args(3, 4, 5, torch.float64, device, requires_grad=True)
    assert torch.autograd.gradcheck(lltm, args)
    assert torch.autograd.gradcheck(lambda *a: lltm(*a)[0], args)
    assert torch.autograd.gradcheck(lambda *a: lltm(*a)[1], args)
    # The registered autograd of the op itself (the path torch.compile takes;
    # lltm() uses an equivalent autograd.Function in eager mode).
    cell = torch.ops.fusedops.lltm_cell.default
    gate_weights = torch.randn(3, 15, dtype=torch.float64, device=device, requires_grad=True)
    old_cell = torch.randn(3, 5, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(cell, (gate_weights, old_cell))
    assert torch.autograd.gradcheck(lambda g, c: cell(g, c)[0], (gate_weights, old_cell))


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_elu_branch_and_saturation(device: str) -> None:
    # Gate pre-activations across elu's kink and deep into sigmoid/tanh saturation.
    state = 8
    g = torch.tensor([-40.0, -5.0, -1e-3, 0.0, 1e-3, 2.0, 30.0, 90.0], dtype=torch.float64, device=device)
    gate_weights = torch.stack([torch.cat([g.roll(k), g.roll(k + 1), g.roll(k + 2)]) for k in range(3)])
    old_cell = torch.randn(3, state, dtype=torch.float64, device=device) * 5
    new_h, new_cell = torch.ops.fusedops.lltm_cell(gate_weights, old_cell)
    gates = gate_weights.chunk(3, 1)
    ref_c = old_cell + torch.nn.functional.elu(gates[2]) * torch.sigmoid(gates[0])
    ref_h = torch.tanh(ref_c) * torch.sigmoid(gates[1])
    torch.testing.assert_close(new_cell, ref_c)
    torch.testing.assert_close(new_h, ref_h)
    assert torch.isfinite(new_h).all() and torch.isfinite(new_cell).all()


# --- layouts and shapes --------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_non_contiguous_inputs(device: str) -> None:
    batch, features, state = 6, 5, 7
    args = make_args(batch, features, state, torch.float64, device)
    input, weights, bias, old_h, old_cell = args
    nc = [
        torch.randn(features * 2, batch, dtype=torch.float64, device=device)[::2].t(),
        weights.t().contiguous().t(),
        torch.randn(3 * state * 2, dtype=torch.float64, device=device)[::2],
        old_h.t().contiguous().t(),
        old_cell.t().contiguous().t(),
    ]
    nc[0].copy_(input)
    nc[2].copy_(bias)
    for a in nc[:1] + nc[2:]:
        assert not a.is_contiguous()
    gh = torch.randn(batch, state, dtype=torch.float64, device=device)
    gc = torch.randn(batch, state, dtype=torch.float64, device=device)
    (h, c), grads = run_with_grads(lltm, nc, gh, gc)
    (rh, rc), rgrads = run_with_grads(reference_lltm, args, gh, gc)
    assert h.is_contiguous() and c.is_contiguous()
    torch.testing.assert_close(h, rh)
    torch.testing.assert_close(c, rc)
    for g, rg in zip(grads, rgrads, strict=True):
        torch.testing.assert_close(g, rg)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_cell_strided_gates_and_broadcast_grads(device: str) -> None:
    # The kernels read every input through its strides: transposed gate
    # pre-activations and cell, and gradients expanded from a scalar (stride 0),
    # as `new_h.sum().backward()` produces.
    batch, state = 5, 6
    gate_weights = torch.randn(3 * state, batch, dtype=torch.float64, device=device).t()
    old_cell = torch.randn(state, batch, dtype=torch.float64, device=device).t()
    new_h, new_cell = torch.ops.fusedops.lltm_cell(gate_weights, old_cell)
    rh, rc = torch.ops.fusedops.lltm_cell(gate_weights.contiguous(), old_cell.contiguous())
    assert new_h.is_contiguous() and new_cell.is_contiguous()
    torch.testing.assert_close(new_h, rh, rtol=0, atol=0)
    torch.testing.assert_close(new_cell, rc, rtol=0, atol=0)
    grad_h = torch.tensor(1.5, dtype=torch.float64, device=device).expand(batch, state)
    grad_cell = torch.randn(state, batch, dtype=torch.float64, device=device).t()
    d_g, d_c = torch.ops.fusedops.lltm_cell_backward(grad_h, grad_cell, gate_weights, new_cell)
    r_g, r_c = torch.ops.fusedops.lltm_cell_backward(
        grad_h.contiguous(), grad_cell.contiguous(), gate_weights.contiguous(), new_cell
    )
    assert d_g.is_contiguous() and d_g.shape == (batch, 3 * state) and d_c.is_contiguous()
    torch.testing.assert_close(d_g, r_g, rtol=0, atol=0)
    torch.testing.assert_close(d_c, r_c, rtol=0, atol=0)
    # Absent gradients count as zeros.
    z = torch.zeros(batch, state, dtype=torch.float64, device=device)
    for gh, gc in ((None, grad_cell), (grad_h, None), (None, None)):
        d_g, d_c = torch.ops.fusedops.lltm_cell_backward(gh, gc, gate_weights, new_cell)
        r_g, r_c = torch.ops.fusedops.lltm_cell_backward(
            z if gh is None else gh, z if gc is None else gc, gate_weights, new_cell
        )
        torch.testing.assert_close(d_g, r_g, rtol=0, atol=0)
        torch.testing.assert_close(d_c, r_c, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_empty_batch(device: str) -> None:
    args = make_args(0, 4, 5, torch.float32, device, requires_grad=True)
    new_h, new_cell = lltm(*args)
    assert new_h.shape == (0, 5) and new_cell.shape == (0, 5)
    (new_h.sum() + new_cell.sum()).backward()
    assert args[1].grad is not None and args[1].grad.shape == (15, 9)
    torch.testing.assert_close(args[1].grad, torch.zeros_like(args[1]))
    torch.testing.assert_close(args[2].grad, torch.zeros_like(args[2]))


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_module(device: str) -> None:
    cell = LLTM(32, 128).to(device)
    assert cell.weights.shape == (384, 160) and cell.bias.shape == (1, 384)  # the tutorial's shapes
    bound = 1 / math.sqrt(128)
    for p in cell.parameters():
        assert p.abs().max() <= bound and p.abs().max() > bound / 2
    x = torch.randn(16, 32, device=device)
    h = torch.randn(16, 128, device=device)
    c = torch.randn(16, 128, device=device)
    new_h, new_cell = cell(x, (h, c))
    rh, rc = reference_lltm(x, cell.weights, cell.bias, h, c)
    torch.testing.assert_close(new_h, rh)
    torch.testing.assert_close(new_cell, rc)
    (new_h.sum() + new_cell.sum()).backward()
    assert cell.weights.grad is not None and cell.bias.grad is not None
    double = LLTM(3, 4, dtype=torch.float64)
    assert double.weights.dtype == torch.float64 and "state_size=4" in repr(double)
    with pytest.raises(TypeError, match="state must be a pair"):
        cell(x, h)


@pytest.mark.cuda
def test_lltm_cell_more_than_2_31_elements() -> None:
    # 64-bit indexing: B*S > 2^31 with broadcast (stride-0) inputs, so only the
    # outputs take memory (~8.6 GB for the forward, ~17 GB for the backward).
    if torch.cuda.mem_get_info()[0] < 24 * 2**30:
        pytest.skip("needs ~24 GiB of free GPU memory")
    state = 1024
    batch = 2**31 // state + 3
    gate_row = torch.randn(1, 3 * state, device="cuda", dtype=torch.float16)
    cell_row = torch.randn(1, state, device="cuda", dtype=torch.float16)
    new_h, new_cell = torch.ops.fusedops.lltm_cell(gate_row.expand(batch, -1), cell_row.expand(batch, -1))
    ref_h, ref_c = torch.ops.fusedops.lltm_cell(gate_row, cell_row)
    for r in (0, batch // 2, batch - 1):
        torch.testing.assert_close(new_h[r], ref_h[0], rtol=0, atol=0)
        torch.testing.assert_close(new_cell[r], ref_c[0], rtol=0, atol=0)
    del new_h
    grad_h = torch.randn(1, state, device="cuda", dtype=torch.float16)
    d_g, d_c = torch.ops.fusedops.lltm_cell_backward(
        grad_h.expand(batch, -1), None, gate_row.expand(batch, -1), new_cell
    )
    r_g, r_c = torch.ops.fusedops.lltm_cell_backward(grad_h, None, gate_row, ref_c)
    for r in (0, batch // 2, batch - 1):
        torch.testing.assert_close(d_g[r], r_g[0], rtol=0, atol=0)
        torch.testing.assert_close(d_c[r], r_c[0], rtol=0, atol=0)


# --- the CUDA step (two op calls a step, CUDA graphs) against the step of one op per stage ----------


def _step_grads(step, args, grad_h, grad_cell, needs=(True,) * 5):  # type: ignore[no-untyped-def]
    leaves = [a.detach().clone().requires_grad_(n) for a, n in zip(args, needs, strict=True)]
    new_h, new_cell = step(*leaves)
    outs = [(o, g) for o, g in ((new_h, grad_h), (new_cell, grad_cell)) if g is not None]
    torch.autograd.backward([o for o, _ in outs], [g for _, g in outs])
    return new_h.detach(), new_cell.detach(), [a.grad for a in leaves]


# The step's bias gradient sums the rows in its own fixed order (torch's sum(0) in the per-op step): equal up to
# rounding; every other output is the same bit for bit.
BIAS_TOL = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5), torch.float16: (4e-3, 4e-3),
            torch.bfloat16: (3e-2, 3e-2)}


def _assert_step_equal(got, ref, dtype, needs=(True,) * 5):  # type: ignore[no-untyped-def]
    (h, c, grads), (rh, rc, rgrads) = got, ref
    torch.testing.assert_close(h, rh, rtol=0, atol=0)
    torch.testing.assert_close(c, rc, rtol=0, atol=0)
    for i, (g, rg) in enumerate(zip(grads, rgrads, strict=True)):
        assert (g is None) == (rg is None) and (g is None) != needs[i]
        if g is None:
            continue
        assert g.shape == rg.shape
        rtol, atol = BIAS_TOL[dtype] if i == 2 else (0, 0)
        scale = max(1.0, rg.abs().max().item()) if rg.numel() else 1.0
        torch.testing.assert_close(g, rg, rtol=rtol, atol=atol * scale)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(16, 32, 128), (5, 0, 9), (512, 256, 1024)])
def test_cuda_step_is_the_per_op_step(dtype: torch.dtype, shape: tuple[int, int, int]) -> None:
    # fusedops::_lltm_step / _lltm_step_backward (concatenation, torch's addmm/mm called from C++, the cell
    # kernels; at 512x1280x3072 the two backward GEMMs run side by side on two streams) against cat, addmm, the
    # cell op, mm and sum called one by one: the same kernels and cuBLAS calls.
    from fusedops import _lltm

    batch, features, state = shape
    args = make_args(batch, features, state, dtype, "cuda")
    grad_h = torch.randn(batch, state, dtype=dtype, device="cuda")
    grad_cell = torch.randn(batch, state, dtype=dtype, device="cuda")
    for bias_2d in (False, True):
        step_args = list(args)
        if bias_2d:
            step_args[2] = args[2][None]
        got = _step_grads(_lltm._LLTMCudaStep.apply, step_args, grad_h, grad_cell)
        ref = _step_grads(_lltm._LLTMFunction.apply, step_args, grad_h, grad_cell)
        _assert_step_equal(got, ref, dtype)
        assert got[2][2].shape == step_args[2].shape


@pytest.mark.cuda
def test_cuda_step_strided_inputs_partial_grads_and_no_grad() -> None:
    from fusedops import _lltm

    batch, features, state = 6, 5, 7
    input, weights, bias, old_h, old_cell = make_args(batch, features, state, torch.float64, "cuda")
    strided = [
        torch.randn(features * 2, batch, dtype=torch.float64, device="cuda")[::2].t().copy_(input),
        weights.t().contiguous().t(),
        torch.randn(3 * state * 2, dtype=torch.float64, device="cuda")[::2].copy_(bias),
        old_h.t().contiguous().t(),
        old_cell.t().contiguous().t(),
    ]
    gh = torch.randn(batch, state, dtype=torch.float64, device="cuda")
    for needs in ((True,) * 5, (False, True, False, False, False), (True, False, True, True, False),
                  (False, False, False, False, True)):
        got = _step_grads(_lltm._LLTMCudaStep.apply, strided, gh, None, needs)
        ref = _step_grads(_lltm._LLTMFunction.apply, strided, gh, None, needs)
        _assert_step_equal(got, ref, torch.float64, needs)
    with torch.no_grad():
        h, c = lltm(*strided)
    torch.testing.assert_close(h, ref[0], rtol=0, atol=0)
    torch.testing.assert_close(c, ref[1], rtol=0, atol=0)


def _graph_counts() -> list[int]:
    return [torch.ops.fusedops._lltm_graph_stats(torch.cuda.current_device(), k) for k in range(4)]


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(16, 32, 128), (512, 256, 1024)])
def test_cuda_step_graph_replays_are_exact(shape: tuple[int, int, int]) -> None:
    # A training loop: the same tensors every step, the outputs freed before the next one, so torch's allocator
    # hands the step the same memory and the step's CUDA graphs replay. Every replayed step gives what the first
    # (eager) step gave, and the per-op step, bit for bit (the bias gradient: up to rounding, see BIAS_TOL); a
    # changed cuBLAS setting (TF32) is a new key, never a stale graph.
    from fusedops import _lltm

    batch, features, state = shape
    args = [a.requires_grad_() for a in make_args(batch, features, state, torch.float32, "cuda")]
    gh = torch.randn(batch, state, device="cuda")
    gc = torch.randn(batch, state, device="cuda")
    saved = [torch.empty_like(t) for t in (gh, gc, *args)]

    def step() -> None:
        h, c = lltm(*args)
        grads = torch.autograd.grad((h, c), args, (gh, gc))
        for out, value in zip(saved, (h, c, *grads), strict=True):
            out.copy_(value)

    before = _graph_counts()
    step()
    first = [t.clone() for t in saved]
    for _ in range(8):
        step()
        for got, want in zip(saved, first, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    after = _graph_counts()
    assert after[0] > before[0] and after[1] > before[1], (before, after)
    assert after[2] - before[2] >= 3 and after[3] - before[3] >= 3, (before, after)
    ref = _step_grads(_lltm._LLTMFunction.apply, args, gh, gc)
    _assert_step_equal((first[0], first[1], first[2:]), ref, torch.float32)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        step()
        ref = _step_grads(_lltm._LLTMFunction.apply, args, gh, gc)
        _assert_step_equal((saved[0], saved[1], saved[2:]), ref, torch.float32)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


@pytest.mark.cuda
def test_cuda_step_inside_a_users_cuda_graph() -> None:
    # Under the caller's own stream capture the step launches eagerly into that capture.
    args = make_args(16, 32, 128, torch.float32, "cuda")
    with torch.no_grad():
        want = lltm(*args)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            lltm(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = lltm(*args)
        for t in got:
            t.fill_(float("nan"))
        graph.replay()
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)


@pytest.mark.cuda
def test_cuda_step_ops_reject_bad_input() -> None:
    args = make_args(4, 3, 5, torch.float32, "cuda")
    step = torch.ops.fusedops._lltm_step
    with pytest.raises(RuntimeError, match=r"_lltm_step: the shapes of input"):
        step(args[0][:, 1:], *args[1:], -1)
    with pytest.raises(RuntimeError, match=r"_lltm_step: weights must have the dtype of"):
        step(args[0], args[1].double(), *args[2:], -1)
    with pytest.raises(RuntimeError, match=r"_lltm_step: bias must have shape"):
        step(args[0], args[1], args[2][:-1], *args[3:], -1)
    with pytest.raises(RuntimeError, match=r"Could not run 'fusedops::_lltm_step' with arguments from the 'CPU'"):
        step(*[a.cpu() for a in args], -1)  # a CUDA-only op: the dispatcher says so
    new_h, new_cell, X, gates = step(*args, -1)
    with pytest.raises(RuntimeError, match=r"_lltm_step_backward: X \(B, S\+F\) and weights"):
        torch.ops.fusedops._lltm_step_backward(new_h, None, X[:, 1:], args[1], gates, new_cell, True, True, True,
                                               False, -1)


# --- registration --------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_opcheck(device: str) -> None:
    for dtype in (torch.float32, torch.float64):
        gate_weights = torch.randn(4, 15, dtype=dtype, device=device, requires_grad=True)
        old_cell = torch.randn(4, 5, dtype=dtype, device=device, requires_grad=True)
        opcheck(torch.ops.fusedops.lltm_cell.default, (gate_weights, old_cell))
        transposed = torch.randn(5, 4, dtype=dtype, device=device).t().requires_grad_(True)
        opcheck(torch.ops.fusedops.lltm_cell.default, (gate_weights, transposed))
        opcheck(torch.ops.fusedops.lltm_cell.default, (torch.randn(0, 15, dtype=dtype, device=device),
                                                       torch.randn(0, 5, dtype=dtype, device=device)))
        new_cell = torch.randn(4, 5, dtype=dtype, device=device)
        g = torch.randn(4, 5, dtype=dtype, device=device)
        for gh, gc in ((g, g), (None, g), (g, None), (None, None)):
            opcheck(torch.ops.fusedops.lltm_cell_backward.default, (gh, gc, gate_weights.detach(), new_cell))


@pytest.mark.parametrize("device", DEVICES)
def test_lltm_compiles_fullgraph(device: str) -> None:
    def step(x, w, b, h, c):  # type: ignore[no-untyped-def]
        new_h, new_cell = lltm(x, w, b, h, c)
        return (new_h * 2).sum() + new_cell.pow(2).sum()

    args = make_args(8, 6, 10, torch.float32, device)
    eager_args = [a.detach().clone().requires_grad_(True) for a in args]
    compiled_args = [a.detach().clone().requires_grad_(True) for a in args]
    eager = step(*eager_args)
    eager.backward()
    compiled = torch.compile(step, fullgraph=True)(*compiled_args)
    compiled.backward()
    torch.testing.assert_close(compiled, eager)
    for a, b in zip(compiled_args, eager_args, strict=True):
        torch.testing.assert_close(a.grad, b.grad)


# --- bad input -----------------------------------------------------------------------


def test_lltm_rejects_bad_input_with_a_python_exception() -> None:
    good = make_args(4, 3, 5)

    def with_arg(i: int, value: object) -> list[object]:
        args: list[object] = list(good)
        args[i] = value
        return args

    with pytest.raises(TypeError, match=r"lltm: old_h must be a torch\.Tensor"):
        lltm(*with_arg(3, [1.0]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"lltm: input must be float16, bfloat16, float32 or float64"):
        lltm(*with_arg(0, torch.ones(4, 3, dtype=torch.int64)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"lltm: weights must have the dtype of input"):
        lltm(*with_arg(1, good[1].double()))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"lltm: old_cell must have the dtype of input"):
        lltm(*with_arg(4, good[4].to(torch.int32)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lltm: bias must have shape \(3\*state_size,\) = \(15,\) or \(1, 3\*state"):
        lltm(*with_arg(2, good[2][None, None]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lltm: bias must have shape"):
        lltm(*with_arg(2, good[2].reshape(3, 5)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lltm: input must be 2-D"):
        lltm(*with_arg(0, good[0][None]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lltm: weights must have shape \(3\*state_size, input_features \+ state"):
        lltm(*with_arg(1, good[1][:, 1:]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lltm: bias must have shape"):
        lltm(*with_arg(2, good[2][1:]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lltm: old_cell must have the shape of old_h"):
        lltm(*with_arg(4, good[4][:, 1:]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lltm: old_h must have shape \(batch=4"):
        lltm(*with_arg(3, good[3][1:]))  # type: ignore[arg-type]
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"lltm: old_cell must be on the device of input"):
            lltm(*with_arg(4, good[4].cuda()))  # type: ignore[arg-type]
    else:
        with pytest.raises(ValueError, match=r"lltm: old_cell must be on the device of input"):
            lltm(*with_arg(4, good[4].to("meta")))  # type: ignore[arg-type]
    # Direct op calls are checked in C++ (RuntimeError naming the argument).
    gate_weights, old_cell = torch.randn(4, 15), torch.randn(4, 5)
    with pytest.raises(RuntimeError, match=r"lltm_cell: gate_weights must have shape \(B, 3\*S\)"):
        torch.ops.fusedops.lltm_cell(gate_weights[:, 1:], old_cell)
    with pytest.raises(RuntimeError, match=r"lltm_cell: old_cell must have the dtype of gate_weights"):
        torch.ops.fusedops.lltm_cell(gate_weights, old_cell.double())
    with pytest.raises(RuntimeError, match=r"lltm_cell: old_cell must be 2-D"):
        torch.ops.fusedops.lltm_cell(gate_weights, old_cell[0])
    with pytest.raises(RuntimeError, match=r"lltm_cell: gate_weights must be a floating-point tensor, got Long"):
        torch.ops.fusedops.lltm_cell(gate_weights.long(), old_cell)
    with pytest.raises(RuntimeError, match=r"lltm_cell_backward: grad_h must have shape \(4, 5\)"):
        torch.ops.fusedops.lltm_cell_backward(old_cell[:2], None, gate_weights, old_cell)


@pytest.mark.cuda
def test_lltm_cuda_rejects_mixed_devices() -> None:
    gate_weights = torch.randn(4, 15, device="cuda")
    with pytest.raises(RuntimeError, match=r"lltm_cell: old_cell must be on the device of gate_weights"):
        torch.ops.fusedops.lltm_cell(gate_weights, torch.randn(4, 5))
    with pytest.raises(RuntimeError, match=r"lltm_cell: gate_weights must be a CUDA tensor"):
        torch.ops.fusedops.lltm_cell(gate_weights.cpu(), torch.randn(4, 5, device="cuda"))
