"""The vectorised CPU kernels: accuracy at the edges of the float range, every
memory walk (bias rows, bias runs, channels_last, chunk boundaries), thread
counts, and every instruction-set build (the best the CPU has in this process;
the baseline and AVX2 builds forced with FUSEDOPS_CPU_ISA in subprocesses).

References are float64 computations from first principles.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import fusedops

ACTS = list(fusedops.activation_funcs)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def act64(name: str, z: torch.Tensor, alpha: float) -> torch.Tensor:
    """float64 activations written out (torch's own float64 kernels, no fusedops)."""
    if name == "linear":
        return z
    if name == "relu":
        return torch.relu(z)
    if name == "lrelu":
        return torch.where(z > 0, z, alpha * z)
    if name == "tanh":
        return torch.tanh(z)
    if name == "sigmoid":
        return torch.sigmoid(z)
    if name == "elu":
        return torch.where(z > 0, z, torch.expm1(z))
    if name == "selu":
        return F.selu(z)
    if name == "softplus":
        return torch.where(z > 0, z, torch.zeros_like(z)) + torch.log1p(torch.exp(-z.abs()))
    return z * torch.sigmoid(z)


EDGES = [-math.inf, -1e30, -1e4, -200.0, -104.5, -103.0, -88.5, -87.0, -50.0, -20.5, -9.5, -8.9, -1.0, -0.3466,
         -0.3, -1e-3, -1e-7, -1e-30, -0.0, 0.0, 1e-30, 1e-7, 1e-3, 0.3, 0.3466, 1.0, 8.9, 9.5, 20.5, 50.0, 87.0,
         88.5, 89.5, 200.0, 1e4, 1e30, math.inf]


@pytest.mark.parametrize("act", ACTS)
def test_bias_act_float32_accuracy_over_the_whole_range(act: str) -> None:
    x = torch.cat([torch.tensor(EDGES), torch.randn(4000) * 30, torch.randn(4000) * 3]).float()
    for gain, clamp in ((1.0, None), (1.7, 5.0)):
        got = fusedops.bias_act(x, act=act, gain=gain, clamp=clamp)
        want = act64(act, x.double(), 0.2) * gain
        if clamp is not None:
            want = want.clamp(-clamp, clamp)
        # rtol: a few float32 ulp; atol: results within ~1e-35 of 0 (e.g. sigmoid(-89), a denormal
        # in float32, which the kernel flushes to 0 once exp(89) overflows) may differ.
        torch.testing.assert_close(got, want.float(), rtol=4e-6, atol=1e-35, equal_nan=True)
    nan = fusedops.bias_act(torch.tensor([math.nan]), act=act)
    assert torch.isnan(nan).all()


@pytest.mark.parametrize("act", ACTS)
def test_bias_act_float32_derivatives_over_a_wide_range(act: str) -> None:
    z = torch.cat([torch.linspace(-90, 90, 721), torch.randn(2000) * 4]).float()
    z = torch.where(z.abs() < 1e-3, torch.full_like(z, 1e-3), z)  # away from the kinks at 0
    dy = torch.randn_like(z)
    zd = z.double().requires_grad_()
    (g1,) = torch.autograd.grad(act64(act, zd, 0.2), zd, dy.double(), create_graph=True)
    if g1.requires_grad:
        # d/dz sum(f'(z) dy) = f''(z) dy: what the order-2 kernel applies to dy
        (g2,) = torch.autograd.grad(g1, zd, torch.ones_like(g1), allow_unused=True, materialize_grads=True)
    else:  # linear: f' is constant
        g2 = torch.zeros_like(g1)
    spec = fusedops.activation_funcs[act]
    alpha = 0.2 if act == "lrelu" else (1.0 if act == "elu" else 0.0)
    for order, want in ((1, g1), (2, g2)):
        got = torch.ops.fusedops.bias_act_grad(dy, z, None, 0, spec.code, alpha, 1.0, -1.0, order)
        # Relative accuracy, except where the derivative is computed from a saturated
        # float32 value (tanh' = 1 - t^2 with t ~ 1): there the error is absolute, ~1 ulp of 1.
        torch.testing.assert_close(got.double(), want.detach(), rtol=5e-5,
                                   atol=4e-7 * dy.abs().max().item(), msg=f"{act} order {order}")


def _bias_act_cases() -> list[tuple[str, torch.Tensor, int]]:
    """(label, x, dim): every way the kernel walks the bias."""
    big = torch.randn(3, 7, 41, 53)  # 45k elements: several parallel chunks, runs of 2173 crossing them
    return [
        ("rows [N, C] (bias along the innermost dim)", torch.randn(300, 257), 1),
        ("expanded row (channel stride 9 < 16)", torch.randn(50, 33, 3, 3), 1),
        ("runs (channel stride 64)", torch.randn(9, 10, 8, 8), 1),
        ("runs crossing chunk boundaries", big, 1),
        ("dim 0", torch.randn(129, 300), 0),
        ("channels_last", torch.randn(4, 24, 17, 19).to(memory_format=torch.channels_last), 1),
        ("non-contiguous (sliced)", big[:, :, ::2, 1:], 1),
        ("transposed", torch.randn(37, 101).t(), 0),
        ("tiny", torch.randn(1, 3), 1),
    ]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_bias_act_every_memory_walk(threads: int) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for label, x, dim in _bias_act_cases():
            b = torch.randn(x.shape[dim])
            for act in ("lrelu", "swish"):
                got = fusedops.bias_act(x, b, dim=dim, act=act, clamp=2.0)
                shape = [1] * x.dim()
                shape[dim] = -1
                want = (act64(act, x.double() + b.double().reshape(shape), 0.2) * fusedops.activation_funcs[
                    act].def_gain).clamp(-2, 2)
                torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6, msg=label)
                if x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
                    assert got.stride() == x.stride(), label
                # gradient kernels walk the same way
                xg = x.clone().requires_grad_()
                (gx,) = torch.autograd.grad(fusedops.bias_act(xg, b, dim=dim, act=act, clamp=2.0).sum(), xg)
                xr = x.double().requires_grad_()
                (gr,) = torch.autograd.grad(
                    (act64(act, xr + b.double().reshape(shape), 0.2) * fusedops.activation_funcs[act].def_gain
                     ).clamp(-2, 2).sum(), xr)
                torch.testing.assert_close(gx.double(), gr, rtol=1e-5, atol=1e-6, msg=label)
    finally:
        torch.set_num_threads(before)


def test_results_do_not_depend_on_the_thread_count() -> None:
    before = torch.get_num_threads()
    x = torch.randn(5, 16, 67, 71)
    b = torch.randn(16)
    f = fusedops.setup_filter([1, 3, 3, 1])
    lltm_args = [torch.randn(s) for s in ((300, 40), (3 * 70, 110), (3 * 70,), (300, 70), (300, 70))]

    def run() -> list[torch.Tensor]:
        return [fusedops.bias_act(x, b, act="tanh"), fusedops.round_ste(x * 10),
                fusedops.upfirdn2d(x, f, up=2, padding=[2, 1, 2, 1]), fusedops.upfirdn2d(x, f, down=2),
                *fusedops.lltm(*lltm_args)]

    try:
        torch.set_num_threads(1)
        one = run()
        torch.set_num_threads(3)
        three = run()
    finally:
        torch.set_num_threads(before)
    for a, c in zip(one, three, strict=True):
        assert torch.equal(a, c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_round_ste_special_values_and_large_tensors(dtype: torch.dtype) -> None:
    big = 2.0**23 if dtype == torch.float32 else 2.0**52
    special = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.0, 0.0, big - 0.5, big + 1, -big - 1,
                            1e30, -1e30, math.inf, -math.inf, math.nan], dtype=dtype)
    x = torch.cat([special, torch.randn(200_003, dtype=dtype) * 1000, torch.arange(-2000, 2000, dtype=dtype) / 2])
    got = fusedops.round_ste(x)
    want = torch.round(x)
    assert torch.equal(got[~torch.isnan(x)], want[~torch.isnan(x)])
    assert torch.isnan(got[torch.isnan(x)]).all()
    zero = special == 0
    assert torch.signbit(got[: len(special)][zero]).tolist() == torch.signbit(special[zero]).tolist()


def test_lltm_cell_float32_over_a_wide_range() -> None:
    state = 37
    gates = torch.cat([torch.linspace(-100, 100, 3 * state * 8).reshape(8, 3 * state),
                       torch.randn(40, 3 * state) * 5]).float()
    old_cell = torch.randn(gates.shape[0], state).float() * 4
    new_h, new_cell = torch.ops.fusedops.lltm_cell(gates, old_cell)
    g = gates.double().chunk(3, 1)
    ref_c = old_cell.double() + torch.where(g[2] > 0, g[2], torch.expm1(g[2])) * torch.sigmoid(g[0])
    ref_h = torch.tanh(ref_c) * torch.sigmoid(g[1])
    torch.testing.assert_close(new_cell.double(), ref_c, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(new_h.double(), ref_h, rtol=1e-5, atol=1e-6)
    # backward against autograd in float64, with a broadcast (stride-0) grad_h as `new_h.sum()` gives
    gd = gates.double().requires_grad_()
    cd = old_cell.double().requires_grad_()
    gd3 = gd.chunk(3, 1)
    rc = cd + torch.where(gd3[2] > 0, gd3[2], torch.expm1(gd3[2])) * torch.sigmoid(gd3[0])
    rh = torch.tanh(rc) * torch.sigmoid(gd3[1])
    grad_cell = torch.randn_like(old_cell)
    (rh.sum() + (rc * grad_cell.double()).sum()).backward()
    ones = torch.ones(1, 1).expand_as(old_cell)
    d_gates, d_old_cell = torch.ops.fusedops.lltm_cell_backward(ones, grad_cell, gates, new_cell)
    torch.testing.assert_close(d_gates.double(), gd.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(d_old_cell.double(), cd.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("width", [5, 8, 13, 16, 31, 33, 64, 100])
def test_upfirdn2d_widths_and_layouts(width: int) -> None:
    # Output widths below, at and above the kernel's vector chunks, every layout.
    x = torch.randn(2, 3, 23, width, dtype=torch.float64)
    tried = 0
    for taps in ([1, 3, 3, 1], [2, -1, 3], list(range(1, 10))):
        f = fusedops.setup_filter(taps)
        for kw in ({"up": 2, "padding": [2, 1, 2, 1], "gain": 4}, {"down": 2, "padding": 1},
                   {"up": [1, 3], "down": [3, 1], "padding": [0, 4, -1, 2]}, {"padding": [-2, 3, 1, 0]}):
            for variant in (x.float(), x.float().to(memory_format=torch.channels_last), x.float()[:, :, ::2, :],
                            x.float().transpose(2, 3).contiguous().transpose(2, 3)):
                try:
                    ref = fusedops.upfirdn2d(variant.double(), f, impl="ref", **kw)  # type: ignore[arg-type]
                except ValueError:  # this padding leaves no output for this size: both refuse it
                    with pytest.raises(ValueError, match="gives an empty output"):
                        fusedops.upfirdn2d(variant, f, **kw)  # type: ignore[arg-type]
                    continue
                got = fusedops.upfirdn2d(variant, f, **kw)  # type: ignore[arg-type]
                torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
                tried += 1
    assert tried >= 24


@pytest.mark.skipif("FUSEDOPS_CPU_ISA" in os.environ, reason="already running a forced instruction set")
# baseline: the path furthest from this machine's native one (the other tests); avx2 in the long runs.
@pytest.mark.parametrize("isa", ["baseline", pytest.param("avx2", marks=pytest.mark.extended)])
def test_every_cpu_kernel_test_passes_with_a_forced_instruction_set(isa: str) -> None:
    # The kernels are compiled for the x86-64 baseline, AVX2+FMA and AVX-512;
    # the process picks the best its CPU has, once. Run this file (and the op
    # tests) again with the lower builds forced, so every build is tested
    # wherever the CPU has it (a forced AVX2 on a CPU without it runs the baseline).
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "FUSEDOPS_CPU_ISA": isa}
    files = [os.path.join(here, name) for name in ("test_cpu_kernels.py", "test_bias_act.py", "test_lltm.py",
                                                   "test_round_ste.py", "test_upfirdn2d.py")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not cuda", "-p", "no:cacheprovider", *files],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
