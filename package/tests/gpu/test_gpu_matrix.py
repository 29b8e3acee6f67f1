"""The GPU matrix beyond the per-op tests: every op on every visible GPU, on side
streams, inside CUDA graphs, in every dtype and layout, and past 2^31 elements.

Run by `nox -s test-gpu` (and `python -m ci test-gpu --system` on GPU boxes).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fusedops
from fusedops import reference

pytestmark = pytest.mark.cuda

TOL = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}
DTYPES = list(TOL)
FILTER = [1.0, 3.0, 3.0, 1.0]


def _gpus() -> list[str]:
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


Case = tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], list[torch.Tensor]]


def _cases(device: str) -> dict[str, Case]:
    """name -> (fused, reference, float64 inputs on ``device``)."""
    g = torch.Generator().manual_seed(0)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(device)

    f = fusedops.setup_filter(FILTER, device=device)

    def lltm_h(*a: torch.Tensor) -> torch.Tensor:
        return fusedops.lltm(*a)[0]

    def ref_lltm_h(*a: torch.Tensor) -> torch.Tensor:
        return reference.lltm(*a)[0]

    return {
        "round_ste": (fusedops.round_ste, reference.round_ste, [rnd(2, 6, 9, 11, scale=8)]),
        "bias_act": (lambda x, b: fusedops.bias_act(x, b, act="lrelu", clamp=3.0),
                     lambda x, b: reference.bias_act(x, b, act="lrelu", clamp=3.0),
                     [rnd(2, 6, 9, 11), rnd(6)]),
        "upfirdn2d": (lambda x: fusedops.upfirdn2d(x, f.to(device), up=2, padding=[2, 1, 2, 1], gain=4),
                      lambda x: reference.upfirdn2d(x, f.to(device), up=2, padding=[2, 1, 2, 1], gain=4),
                      [rnd(2, 6, 9, 11)]),
        "lltm": (lltm_h, ref_lltm_h, [rnd(8, 6), rnd(30, 16), rnd(30), rnd(8, 10), rnd(8, 10)]),
    }


OPS = ["round_ste", "bias_act", "upfirdn2d", "lltm"]


def _layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    if t.dim() != 4 or layout == "contiguous":
        return t
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "sliced":
        big = torch.zeros(t.shape[0], t.shape[1] * 2, t.shape[2] + 1, t.shape[3] * 2, dtype=t.dtype, device=t.device)
        view = big[:, ::2, 1:, ::2]
        view.copy_(t)
        return view
    return t.transpose(2, 3).contiguous().transpose(2, 3)  # "transposed"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced", "transposed"])
def test_dtype_and_layout(op: str, dtype: torch.dtype, layout: str) -> None:
    fused, ref, inputs = _cases("cuda:0")[op]
    want = ref(*inputs)
    args = [_layout(t.to(dtype), layout) for t in inputs]
    got = fused(*args)
    tol = TOL[dtype] * (8 if op == "upfirdn2d" else 1)
    if op == "round_ste" and dtype in (torch.float16, torch.bfloat16):
        want = ref(*[a.double() for a in args])  # rounding happens after the cast
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    if layout == "channels_last" and op != "lltm":
        assert got.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("op", OPS)
def test_every_gpu_runs_on_the_input_device(op: str) -> None:
    gpus = _gpus()
    for dev in gpus:
        fused, ref, inputs = _cases(dev)[op]
        with torch.cuda.device(0):  # current device differs from the input's on cuda:1
            got = fused(*[t.float() for t in inputs])
        assert got.device == torch.device(dev)
        torch.testing.assert_close(got.double(), ref(*inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.multigpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("op", OPS)
def test_second_gpu(op: str) -> None:
    fused, ref, inputs = _cases("cuda:1")[op]
    with torch.cuda.device(0):
        got = fused(*[t.float() for t in inputs])
        torch.cuda.synchronize(1)
    assert got.device == torch.device("cuda:1")
    torch.testing.assert_close(got.double(), ref(*inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", OPS)
def test_side_stream_without_caller_sync(op: str) -> None:
    fused, ref, inputs = _cases("cuda:0")[op]
    want = ref(*inputs)
    side = torch.cuda.Stream()
    placeholders = [torch.zeros_like(t, dtype=torch.float32) for t in inputs]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the inputs below are written late on this stream
        for p, t in zip(placeholders, inputs, strict=True):
            p.copy_(t)
        got = fused(*placeholders)
        result = got.double().cpu()  # ordered on the side stream, no explicit synchronize
    torch.testing.assert_close(result, want.cpu(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", OPS)
def test_cuda_graph_capture_and_replay(op: str) -> None:
    fused, ref, inputs = _cases("cuda:0")[op]
    static = [t.float().clone() for t in inputs]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fused(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused(*static)
    fresh = [t * 0.5 + 0.25 for t in inputs]
    for s, t in zip(static, fresh, strict=True):
        s.copy_(t)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), ref(*fresh), rtol=1e-4, atol=1e-4)


def _free_bytes() -> int:
    free, _total = torch.cuda.mem_get_info()
    return int(free)


@pytest.mark.large
@pytest.mark.parametrize("op", ["round_ste", "bias_act"])
def test_more_than_2_pow_31_elements(op: str) -> None:
    n = 2**31 + 4099  # odd tail too
    if _free_bytes() < 3 * n * 2 + (1 << 30):
        pytest.skip(f"needs {3 * n * 2 / 2**30:.1f} GiB of free GPU memory")
    x = torch.empty(n, dtype=torch.float16, device="cuda")
    x[: 1 << 20].uniform_(-8, 8)
    x[-(1 << 20):].uniform_(-8, 8)
    if op == "round_ste":
        y = fusedops.round_ste(x)
        check = torch.round
    else:
        xx = x.view(1, n)
        b = torch.tensor([0.5], dtype=torch.float16, device="cuda")
        y = fusedops.bias_act(xx, b, dim=0, act="relu").view(n)

        def check(t: torch.Tensor) -> torch.Tensor:
            return (torch.relu(t.float() + 0.5) * 2**0.5).half()

    for part in (slice(0, 1 << 20), slice(n - (1 << 20), n)):
        torch.testing.assert_close(y[part], check(x[part]), rtol=2e-3, atol=2e-3)
    del x, y
    torch.cuda.empty_cache()
