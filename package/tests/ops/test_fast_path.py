"""The eager fast path of round_ste and bias_act on CUDA (csrc/cuda/fast_launch.h).

A contiguous CUDA call without autograd, in plain eager code, launches the
kernel without the dispatcher: fusedops._C_cuda's round_ste and bias_act read
the tensors, allocate and launch, or return None for a call they do not take.
These tests hold it to the registered op's results, show when it is taken and
when the op is (autograd, torch.compile, modes, the profiler, arguments it does
not take), and that it runs on torch's current stream and inside CUDA graphs.
The counting wrapper below calls the real module: every launch still runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import fusedops
from fusedops import _bias_act, _round_ste

pytestmark = pytest.mark.cuda

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
ACTS = list(fusedops.activation_funcs)


class CountingLaunchers:
    """Wraps fusedops._C_cuda: records the calls the fast path took (those that returned a tensor, not None)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[str] = []

    def round_ste(self, x: Any) -> Any:
        y = self.real.round_ste(x)
        if y is not None:
            self.calls.append("round_ste")
        return y

    def bias_act(self, *args: Any) -> Any:
        y = self.real.bias_act(*args)
        if y is not None:
            self.calls.append("bias_act")
        return y


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    if not fusedops.cuda_kernels_available():
        pytest.skip(fusedops.build_info()["cuda_kernels_reason"])
    counting = CountingLaunchers(_round_ste._launchers)
    monkeypatch.setattr(_round_ste, "_launchers", counting)
    monkeypatch.setattr(_bias_act, "_launchers", counting)
    yield counting.calls


def _op_round(x: torch.Tensor) -> torch.Tensor:
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.fusedops.round_ste.default(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 1024, 10_003, 2**20 + 5])
def test_round_fast_path_matches_the_op(launches: list[str], dtype: torch.dtype, n: int) -> None:
    x = torch.randn(n, device="cuda", dtype=dtype) * 40
    y = fusedops.round_ste(x)
    assert launches == ["round_ste"]
    torch.testing.assert_close(y, _op_round(x), rtol=0, atol=0)
    torch.testing.assert_close(y, torch.round(x), rtol=0, atol=0)
    # A view that starts 4 bytes in: not 16-byte aligned, so the kernel takes its one-element path.
    if n > 1:
        torch.testing.assert_close(fusedops.round_ste(x[1:]), torch.round(x[1:]), rtol=0, atol=0)


def _op_bias_act(x: torch.Tensor, b: torch.Tensor | None, dim: int, act: str, alpha: Any, gain: Any,
                 clamp: Any) -> torch.Tensor:
    d, spec, alpha_, gain_, clamp_ = _bias_act._resolve(x, b, dim, act, alpha, gain, clamp)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.fusedops.bias_act.default(x, b, d, spec.code, alpha_, gain_, clamp_)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_act_fast_path_matches_the_op(launches: list[str], act: str, dtype: torch.dtype) -> None:
    cases: list[tuple[tuple[int, ...], int, dict[str, Any], bool]] = [
        ((4096, 256), 1, {}, True),                 # [N, C], bias along the last dimension
        ((4096, 256), -1, {"gain": 0.5}, True),
        ((2, 64, 8, 9), 1, {"clamp": 1.5}, True),   # NCHW, bias along the channels
        ((2, 3, 5, 7), 0, {"alpha": 0.3, "clamp": 0}, True),
        ((3, 5, 7), 2, {"gain": 2}, False),         # no bias
        ((0, 4), 1, {}, True),                      # empty
    ]
    for shape, dim, kwargs, with_bias in cases:
        x = torch.randn(shape, device="cuda", dtype=dtype) * 3
        b = torch.randn(shape[dim], device="cuda", dtype=dtype) if with_bias else None
        launches.clear()
        y = fusedops.bias_act(x, b, dim=dim, act=act, **kwargs)
        assert launches == ["bias_act"], (shape, dim, kwargs)
        torch.testing.assert_close(y, _op_bias_act(x, b, dim, act, kwargs.get("alpha"), kwargs.get("gain"),
                                                   kwargs.get("clamp")), rtol=0, atol=0, equal_nan=True)


def test_calls_that_need_the_op_skip_the_fast_path(launches: list[str]) -> None:
    x = torch.randn(1000, 64, device="cuda")
    b = torch.randn(64, device="cuda")
    # Autograd: the op's registered autograd (straight-through for round_ste).
    xg = x.clone().requires_grad_()
    fusedops.round_ste(xg).sum().backward()
    assert xg.grad is not None and torch.equal(xg.grad, torch.ones_like(x))
    fusedops.bias_act(x, b.clone().requires_grad_(), act="lrelu")
    # Not contiguous: the op handles any strides.
    t = x.t()
    torch.testing.assert_close(fusedops.round_ste(t), torch.round(t), rtol=0, atol=0)
    bt = torch.randn(1000, device="cuda")
    torch.testing.assert_close(fusedops.bias_act(t, bt, dim=1, act="swish"),
                               fusedops.reference.bias_act(t, bt, dim=1, act="swish"))
    # A bias whose elements are not adjacent, or on the CPU.
    wide = torch.randn(128, device="cuda")
    torch.testing.assert_close(fusedops.bias_act(x, wide[::2], act="elu"),
                               fusedops.reference.bias_act(x, wide[::2], act="elu"))
    with pytest.raises(ValueError, match="b is on cpu"):
        fusedops.bias_act(x, b.cpu())
    # Bad arguments keep their one-line Python errors.
    with pytest.raises(ValueError, match="act must be one of"):
        fusedops.bias_act(x, b, act="nope")
    with pytest.raises(ValueError, match="b must be 1-D"):
        fusedops.bias_act(x, torch.randn(3, device="cuda"))
    with pytest.raises(ValueError, match="b must be 1-D"):  # the right number of elements, but 2-D
        fusedops.bias_act(x, b.view(1, 64))
    with pytest.raises(ValueError, match="clamp must be >= 0"):
        fusedops.bias_act(x, b, clamp=-1)
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        fusedops.bias_act(x, b, dim=2)
    with pytest.raises(TypeError, match=r"b has dtype torch\.float16"):
        fusedops.bias_act(x, b.half())
    with pytest.raises(TypeError, match="gain must be a number"):
        fusedops.bias_act(x, b, gain="2")
    assert launches == []
    # Without grad mode the same requires-grad tensor takes the fast path.
    with torch.no_grad():
        fusedops.round_ste(xg)
    assert launches == ["round_ste"]


class Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class FunctionRecorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_modes_profiler_tracer_and_transforms_see_the_op(launches: list[str]) -> None:
    x = torch.randn(4096, device="cuda")
    b = torch.randn(256, device="cuda")
    with Recorder() as rec:
        fusedops.round_ste(x)
        fusedops.bias_act(x.view(-1, 256), b, act="swish")
    assert "fusedops.round_ste.default" in rec.ops and "fusedops.bias_act.default" in rec.ops
    with torch.profiler.profile() as prof:
        fusedops.round_ste(x)
    assert any(e.name == "fusedops::round_ste" for e in prof.events())
    compiled = torch.compile(lambda t: fusedops.round_ste(t) + 1, fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.round(x) + 1)
    traced = torch.jit.trace(lambda t: fusedops.round_ste(t), (x,), check_trace=False)
    assert "fusedops::round_ste" in str(traced.graph)
    with FunctionRecorder() as functions:
        fusedops.bias_act(x.view(-1, 256), b, act="lrelu")
    assert "fusedops.bias_act.default" in functions.names
    assert launches == []


def test_fast_path_runs_on_the_current_stream(launches: list[str]) -> None:
    n = 1 << 22
    src = torch.randn(n, device="cuda") * 100
    x = torch.zeros(n, device="cuda")
    b = torch.randn(n // 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # x is written on the side stream after a long sleep: a kernel on any other stream would read zeros.
        torch.cuda._sleep(50_000_000)
        x.copy_(src)
        y = fusedops.round_ste(x)
        z = fusedops.bias_act(x.view(-1, 1024), b, dim=0)
    torch.cuda.current_stream().wait_stream(side)
    assert launches == ["round_ste", "bias_act"]
    torch.testing.assert_close(y, torch.round(src), rtol=0, atol=0)
    torch.testing.assert_close(z, src.view(-1, 1024) + b[:, None])


def test_fast_path_is_captured_in_cuda_graphs(launches: list[str]) -> None:
    x = torch.randn(1 << 16, device="cuda") * 10
    b = torch.randn(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as torch's graph docs ask
        fusedops.round_ste(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fusedops.round_ste(x)
        z = fusedops.bias_act(x.view(-1, 256), b, act="lrelu", clamp=4.0)
    x.copy_(torch.randn_like(x) * 10)
    graph.replay()
    torch.cuda.synchronize()
    assert launches == ["round_ste", "round_ste", "bias_act"]
    torch.testing.assert_close(y, torch.round(x), rtol=0, atol=0)
    torch.testing.assert_close(z, fusedops.reference.bias_act(x.view(-1, 256), b, act="lrelu", clamp=4.0))


def test_the_module_answers_calls_it_does_not_take_with_none() -> None:
    if not fusedops.cuda_kernels_available():
        pytest.skip(fusedops.build_info()["cuda_kernels_reason"])
    fast = _round_ste._launchers
    x = torch.randn(4, 4, device="cuda")
    b = torch.randn(4, device="cuda")

    def bias_act(x: Any, b: Any, dim: Any = 1, act: Any = "linear", alpha: Any = None, gain: Any = None,
                 clamp: Any = None, impl: Any = "cuda") -> Any:
        return fast.bias_act(x, b, dim, act, alpha, gain, clamp, impl)

    with pytest.raises(TypeError, match="takes 8 arguments"):
        fast.bias_act(x)
    with pytest.raises(TypeError):
        fast.round_ste()
    assert fast.round_ste("x") is None
    assert fast.round_ste(x.cpu()) is None
    assert fast.round_ste(x.int()) is None
    assert fast.round_ste(x.t()) is None
    # A sparse tensor's is_contiguous() raises: the fast path does not take it, and the error is not kept.
    assert fast.round_ste(x.to_sparse()) is None
    assert bias_act(x, b, act="nope") is None
    assert bias_act(x, b, impl="ref") is None
    assert bias_act(x, b, clamp=-1.0) is None
    assert bias_act(x, b, clamp=float("nan")) is None
    assert bias_act(x, b, alpha=True) is None       # a bool, or a subclass: the general path converts those
    assert bias_act(x, b, gain=2**2000) is None      # beyond a double: the general path raises
    assert bias_act(x, b, dim=2) is None
    assert bias_act(x, b, dim=1.0) is None
    assert bias_act(x, torch.randn(3, device="cuda")) is None
    assert bias_act(x, b.view(1, 4)) is None
    assert bias_act(x, b.double()) is None
    assert bias_act(x, b.cpu()) is None
    assert bias_act(x, torch.randn(8, device="cuda")[::2]) is None
    with torch.enable_grad():
        assert bias_act(x, b.clone().requires_grad_()) is None
    # What it takes: a negative dim, int or float coefficients, a parameter as the bias (inference).
    y = bias_act(x, b, dim=-1, act="lrelu", alpha=0.5, gain=2, clamp=1)
    torch.testing.assert_close(y, fusedops.reference.bias_act(x, b, dim=-1, act="lrelu", alpha=0.5, gain=2, clamp=1))
    with torch.no_grad():
        p = torch.nn.Parameter(b.clone())
        torch.testing.assert_close(bias_act(x, p, act="swish"), fusedops.reference.bias_act(x, b, act="swish"))
    # configure() holds for the process: a second call changes nothing.
    fast.configure((), None, None, (), (), ())
    assert fast.round_ste(x) is not None


_LAUNCH_CHECK = """
import torch, fusedops
x = torch.randn(1 << 20, device="cuda") * 10
b = torch.randn(256, device="cuda")
xr = x.view(-1, 256)
assert torch.equal(fusedops.round_ste(x), torch.round(x))
assert torch.equal(fusedops.round_ste(x[1:]), torch.round(x[1:]))  # the unaligned kernel
torch.testing.assert_close(fusedops.bias_act(xr, b, act="lrelu", clamp=4.0),
                           fusedops.reference.bias_act(xr, b, act="lrelu", clamp=4.0))
xg = xr.clone().requires_grad_()
fusedops.bias_act(xg, b, act="swish").sum().backward()  # the op's path launches the same way
torch.testing.assert_close(xg.grad, torch.func.grad(lambda t: fusedops.reference.bias_act(t, b, act="swish").sum())(xr))
print(fusedops._state.launchers.launch_api())
"""


@pytest.mark.parametrize(("switch", "api"), [("0", "cuLaunchKernel"), ("1", "cudaLaunchKernel")])
def test_driver_and_runtime_launches_give_the_same_results(switch: str, api: str) -> None:
    if not fusedops.cuda_kernels_available():
        pytest.skip(fusedops.build_info()["cuda_kernels_reason"])
    env = {**os.environ, "FUSEDOPS_RUNTIME_LAUNCH": switch}
    done = subprocess.run([sys.executable, "-c", _LAUNCH_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == api


@pytest.mark.multigpu
def test_fast_path_launches_on_the_inputs_device(launches: list[str]) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = torch.randn(1 << 16, device="cuda:1") * 10
    b = torch.randn(256, device="cuda:1")
    with torch.cuda.device(0):
        y = fusedops.round_ste(x)
        z = fusedops.bias_act(x.view(-1, 256), b, act="swish")
        # The op's path (autograd) on GPU 1 too: each device launches its own copy of a kernel.
        xg = x.view(-1, 256).clone().requires_grad_()
        fusedops.bias_act(xg, b, act="lrelu").sum().backward()
        t0 = torch.randn(1 << 16, device="cuda:0") * 10
        torch.testing.assert_close(fusedops.round_ste(t0), torch.round(t0), rtol=0, atol=0)  # the same kernel, GPU 0
    assert torch.cuda.current_device() == 0
    assert launches == ["round_ste", "bias_act", "round_ste"]
    assert xg.grad is not None
    torch.testing.assert_close(xg.grad, torch.where(x.view(-1, 256) + b > 0, 1.0, 0.2) * 2**0.5)
    assert y.device == x.device and z.device == x.device
    torch.testing.assert_close(y, torch.round(x), rtol=0, atol=0)
    torch.testing.assert_close(z, fusedops.reference.bias_act(x.view(-1, 256), b, act="swish"))
