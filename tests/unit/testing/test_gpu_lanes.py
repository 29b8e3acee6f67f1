"""The GPU lanes refuse a torch that cannot run the wheel's kernels (issue 33, item 5): the decision as a pure
function, where the wheel's CUDA is read from, and the check against real interpreters (the test venv's CUDA 13
torch; a CPU torch stand-in) before any lane runs."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from ci.errors import MissingRequirement
from ci.testing import gpu_lanes
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
NEEDS_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the test venv has no torch")


@pytest.fixture(scope="module")
def by_cuda() -> dict[str, targets.Target]:
    """fusedops' x86_64 targets by their cell's CUDA (12.8, 13.0, ...)."""
    return {t.cell.cuda: t for t in targets.platform_targets(reading.load(ROOT)) if t.arch == "x86_64"}


def wheel_with_record(folder: Path, cuda: str | None) -> Path:
    """A wheel whose dist-info holds cuda-ext-farm.json saying ``cuda`` (None: a CPU build)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo-0.1.0-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("demo-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 0.1.0\n")
        zf.writestr("demo-0.1.0.dist-info/cuda-ext-farm.json", json.dumps({"format": 1, "cuda": cuda}))
    return path


@pytest.mark.parametrize(("torch", "torch_cuda", "wheel_cuda", "refused"), [
    ("2.11.0+cpu", None, "13.0", "the GPU lanes need a CUDA build of torch (torch 2.11.0+cpu has none)"),
    ("2.11.0+cpu", None, None, "the GPU lanes need a CUDA build of torch (torch 2.11.0+cpu has none)"),
    ("2.10.0", None, "12.8", "the GPU lanes need a CUDA build of torch (torch 2.10.0 has none)"),
    ("2.10.0+cu128", "12.8", "13.0",
     "the GPU lanes need a torch of the wheel's CUDA major 13 (torch 2.10.0+cu128 is a CUDA 12.8 build)"),
    ("2.11.0+cu130", "13.0", "12.8",
     "the GPU lanes need a torch of the wheel's CUDA major 12 (torch 2.11.0+cu130 is a CUDA 13.0 build)"),
    ("2.11.0+cu130", "13.0", "13.0", None),
    ("2.11.0+cu130", "13.0", "13.2", None),  # one major, one runtime ABI: minor versions mix
    ("2.10.0+cu126", "12.6", "12.8", None),
    ("2.11.0+cu130", "13.0", None, None),  # a CPU build of the project: any CUDA torch
])
def test_torch_refusal(torch: str, torch_cuda: str | None, wheel_cuda: str | None, refused: str | None) -> None:
    assert gpu_lanes.torch_refusal(torch, torch_cuda, wheel_cuda) == refused


def test_the_wheel_s_cuda_comes_from_its_record_else_from_the_target(
        tmp_path: Path, by_cuda: dict[str, targets.Target]) -> None:
    target = by_cuda["13.0"]
    wheel = wheel_with_record(tmp_path, "12.8")
    assert gpu_lanes.wheel_cuda(wheel, target) == ("12.8", f"{wheel.name}'s cuda-ext-farm.json")
    assert gpu_lanes.wheel_cuda(wheel_with_record(tmp_path / "cpu", None), target)[0] is None
    assert gpu_lanes.wheel_cuda(None, target) == ("13.0", f"the cu130 cell of {target.id}")
    bare = tmp_path / "bare" / "demo-0.1.0-cp310-abi3-linux_x86_64.whl"
    bare.parent.mkdir()
    with zipfile.ZipFile(bare, "w") as zf:
        zf.writestr("demo-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 0.1.0\n")
    assert gpu_lanes.wheel_cuda(bare, by_cuda["12.8"]) == ("12.8", f"the cu128 cell of {by_cuda['12.8'].id}")


@NEEDS_TORCH
def test_the_test_venv_s_cuda_13_torch_runs_a_cu13_wheel_and_not_a_cu12_one(
        tmp_path: Path, built_wheel: Path, by_cuda: dict[str, targets.Target]) -> None:
    subject = gpu_lanes.Subject(Path(sys.executable), (), "the test venv", built_wheel)
    info = gpu_lanes.environment_report(subject)
    assert str(info["cuda"]).startswith("13.")
    gpu_lanes.check_torch(info, subject, by_cuda["13.0"])  # fusedops' cu130 wheel: its record says 13.0
    gpu_lanes.check_torch(info, gpu_lanes.Subject(Path(sys.executable), (), "in place"), by_cuda["13.2"])
    cu12 = gpu_lanes.Subject(Path(sys.executable), (), "a cu128 wheel", wheel_with_record(tmp_path, "12.8"))
    with pytest.raises(MissingRequirement) as caught:
        gpu_lanes.check_torch(info, cu12, by_cuda["13.0"])
    line = caught.value.line()
    assert line.startswith(f"error: the GPU lanes need a torch of the wheel's CUDA major 12 (torch {info['torch']} "
                           f"is a CUDA {info['cuda']} build) ({sys.executable}; the wheel: CUDA 12.8, from "
                           f"{cu12.wheel.name}'s cuda-ext-farm.json): install a CUDA 12 build of torch "  # type: ignore[union-attr]
                           "(https://download.pytorch.org/whl/cu128)"), line
    assert "\n" not in line
    with pytest.raises(MissingRequirement, match="CUDA major 12"):  # a cu128 target, no wheel record
        gpu_lanes.check_torch(info, gpu_lanes.Subject(Path(sys.executable), (), "in place"), by_cuda["12.8"])


def test_a_cpu_torch_stops_the_lanes_before_any_runs(tmp_path: Path, by_cuda: dict[str, targets.Target]) -> None:
    """A CPU build of torch (here a stand-in package: this machine has no CPU torch) on the lanes' path."""
    stand_in = tmp_path / "cpu-torch" / "torch"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("from . import cuda, version\n__version__ = '2.11.0+cpu'\n")
    (stand_in / "version.py").write_text("cuda = None\n")
    (stand_in / "cuda.py").write_text("def is_available():\n    return False\n")
    wheel = wheel_with_record(tmp_path / "wheel", "13.0")
    subject = gpu_lanes.Subject(Path(sys.executable), (str(stand_in.parent),), "stand-in", wheel)
    out = tmp_path / "out"
    with pytest.raises(MissingRequirement) as caught:
        gpu_lanes.run_gpu_lanes(by_cuda["13.0"], subject, ptx=None, lanes=["default"], quick=True, out=out)
    assert caught.value.line().startswith(
        "error: the GPU lanes need a CUDA build of torch (torch 2.11.0+cpu has none) ("), caught.value.line()
    assert "install a CUDA 13 build of torch (https://download.pytorch.org/whl/cu130)" in caught.value.line()
    assert not (out / "summary.json").exists() and not list(out.glob("junit-*.xml"))  # no lane ran


def test_quick_reaches_the_lanes_environment_not_this_process(tmp_path: Path, by_cuda: dict[str, targets.Target],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """--quick is FARM_QUICK=1 in every command run on the subject; the farm's own environment stays as it was."""
    monkeypatch.delenv("FARM_QUICK", raising=False)
    assert gpu_lanes.Subject(Path(sys.executable), (), "x", quick=True).env()["FARM_QUICK"] == "1"
    assert "FARM_QUICK" not in gpu_lanes.Subject(Path(sys.executable), (), "x").env()
    stand_in = tmp_path / "cpu-torch" / "torch"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("from . import cuda, version\n__version__ = '2.11.0+cpu'\n")
    (stand_in / "version.py").write_text("cuda = None\n")
    (stand_in / "cuda.py").write_text("def is_available():\n    return False\n")
    subject = gpu_lanes.Subject(Path(sys.executable), (str(stand_in.parent),), "stand-in",
                                wheel_with_record(tmp_path / "wheel", "13.0"))
    with pytest.raises(MissingRequirement):
        gpu_lanes.run_gpu_lanes(by_cuda["13.0"], subject, ptx=None, lanes=["default"], quick=True, out=tmp_path / "o")
    assert "FARM_QUICK" not in os.environ
