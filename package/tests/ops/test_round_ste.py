"""Op tests: CPU always; the same cases on CUDA when a GPU is visible."""

from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

import fusedops
from fusedops import reference

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
FLOAT_DTYPES = [torch.float32, torch.float64]


def dtypes_for(device: str) -> list[torch.dtype]:
    return FLOAT_DTYPES + ([torch.float16, torch.bfloat16] if device == "cuda" else [])


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# --- round_ste -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_round_matches_torch_round_including_halves(device: str) -> None:
    for dtype in dtypes_for(device):
        x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51, 3.7], dtype=dtype, device=device)
        torch.testing.assert_close(fusedops.round_ste(x), torch.round(x), rtol=0, atol=0)
        big = torch.randn(10_003, dtype=dtype, device=device) * 50
        torch.testing.assert_close(fusedops.round_ste(big), torch.round(big), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_round_gradient_is_straight_through(device: str) -> None:
    x = torch.randn(64, dtype=torch.float64, device=device, requires_grad=True)
    g = torch.randn_like(x)
    fusedops.round_ste(x).backward(g)
    torch.testing.assert_close(x.grad, g, rtol=0, atol=0)
    # No gradcheck here: rounding is piecewise constant, so its numerical
    # gradient is 0 and differs from the straight-through estimator by design.


@pytest.mark.parametrize("device", DEVICES)
def test_round_layouts(device: str) -> None:
    x = torch.randn(2, 8, 5, 7, device=device) * 4
    cl = x.to(memory_format=torch.channels_last)
    out = fusedops.round_ste(cl)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, torch.round(x))
    sliced = x[:, ::2, 1:, ::3]
    torch.testing.assert_close(fusedops.round_ste(sliced), torch.round(sliced))
    t = x.transpose(1, 3)
    torch.testing.assert_close(fusedops.round_ste(t), torch.round(t))
    empty = torch.empty(0, 3, device=device)
    assert fusedops.round_ste(empty).shape == (0, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_round_opcheck(device: str) -> None:
    for x in (torch.randn(3, 5, device=device, requires_grad=True),
              torch.randn(2, 3, 4, 5, device=device).to(memory_format=torch.channels_last),
              torch.randn(6, 4, device=device).t()):
        opcheck(torch.ops.fusedops.round_ste.default, (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_round_compiles_fullgraph(device: str) -> None:
    def f(t: torch.Tensor) -> torch.Tensor:
        return fusedops.round_ste(t * 3) + 1

    x = torch.randn(33, 7, device=device)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x))


def test_round_reference_agrees() -> None:
    x = torch.randn(100, dtype=torch.float64) * 10
    torch.testing.assert_close(fusedops.round_ste(x), reference.round_ste(x))


def test_round_rejects_bad_input_with_a_python_exception() -> None:
    with pytest.raises(TypeError, match=r"round_ste: x must be float16, bfloat16, float32 or float64"):
        fusedops.round_ste(torch.arange(4))
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor"):
        fusedops.round_ste([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="round_ste: x must be a floating-point tensor, got Long"):
        torch.ops.fusedops.round_ste(torch.arange(4))


def test_build_info_reports_how_the_wheel_was_built() -> None:
    info = fusedops.build_info()
    assert info["torch_target_version"] == "2.10"
    if torch.version.cuda is None:
        assert not fusedops.cuda_kernels_available()
        # A wheel with CUDA kernels under a CPU-only torch, or a CPU-only build.
        expected = "CPU-only" if info.get("cuda") else "no CUDA kernels"
        assert expected in info["cuda_kernels_reason"]
