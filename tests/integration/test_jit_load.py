"""``python -m ci jit`` end to end on Linux: the command runs with the farm's toolkit (a stand-in nvcc, the
hermetic toolkit of the cache), refuses another version or a container-only cell, and
torch.utils.cpp_extension.load() compiles a real CUDA source with it (the in-process tests:
tests/unit/windows/test_win_jit.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ci import toolenv
from ci.audit import symbols
from ci.toolchain import toolkit
from ci.universe import matrix

ROOT = Path(__file__).resolve().parents[2]

JIT_SOURCE = r"""
#include <c10/cuda/CUDAFunctions.h>

__global__ void farm_fill(float* out, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

extern "C" int farm_jit_device_count() { return static_cast<int>(c10::cuda::device_count()); }
"""

JIT_SCRIPT = r"""
import os, sys
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]  # ninja of this env
from torch.utils.cpp_extension import load
load(name="farm_jit_probe", sources=[sys.argv[1]], build_directory=sys.argv[2], is_python_module=False)
print("loaded")
"""


def _farm(*args: str, env: dict[str, str] | None = None, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=timeout)


def _fake_toolkit(folder: Path, version: str = "13.0.88") -> Path:
    """A folder whose bin/nvcc answers --version like nvcc (enough for FARM_CUDA_HOME)."""
    nvcc = folder / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    major_minor = ".".join(version.split(".")[:2])
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {major_minor}, V{version}'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return folder


def test_linux_jit_runs_the_command_with_the_farms_toolkit(tmp_path: Path) -> None:
    home = _fake_toolkit(tmp_path / "cuda")
    code = "import os, shutil; print('CUDA_HOME=' + os.environ['CUDA_HOME']); print('NVCC=' + shutil.which('nvcc'))"
    result = _farm("jit", "--cuda", "13.0", "--", sys.executable, "-c", code, env={"FARM_CUDA_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert f"CUDA_HOME={home}" in result.stdout
    assert f"NVCC={home / 'bin' / 'nvcc'}" in result.stdout
    # The command's exit status is the farm's.
    failing = _farm("jit", "--cuda", "13.0", "--", sys.executable, "-c", "raise SystemExit(7)",
                    env={"FARM_CUDA_HOME": str(home)})
    assert failing.returncode == 7
    printed = _farm("jit", "--cuda", "13.0", "--print-env", env={"FARM_CUDA_HOME": str(home)})
    assert f"export CUDA_HOME={home}" in printed.stdout.splitlines()


def test_linux_jit_refuses_a_toolkit_of_another_version(tmp_path: Path) -> None:
    home = _fake_toolkit(tmp_path / "cuda", "13.2.86")
    result = _farm("jit", "--cuda", "13.0", "--", "true", env={"FARM_CUDA_HOME": str(home)})
    assert result.returncode == 2
    assert "FARM_CUDA_HOME holds CUDA 13.2.86, but the target's cell is cu130" in result.stdout + result.stderr


def test_linux_jit_for_a_container_only_cell_says_where_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FARM_CUDA_HOME", raising=False)
    result = _farm("jit", "--cuda", "12.4", "--", "true")
    assert result.returncode == 3
    assert "python -m ci shell --cuda 12.4 -- COMMAND" in (result.stdout + result.stderr).replace("\n", " ")


def _cached_toolkit() -> Path | None:
    return toolkit.cached_toolkit(matrix.get_cell("13.0"))


def test_linux_jit_with_the_hermetic_toolkit() -> None:
    root = _cached_toolkit()
    if root is None:
        pytest.skip("the pinned CUDA 13.0 toolkit is not in the farm's cache (nox -s build or nox -s toolkit "
                    "installs it); not downloaded by a test")
    result = _farm("jit", "--", sys.executable, "-c", "import os; print(os.environ['CUDA_HOME'])",
                   env={"FARM_CUDA_HOME": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(root / "nvidia" / "cu13")


def _cuda_torch_python() -> Path | None:
    """A Python of the farm's cache with a CUDA 13 build of torch and ninja (what `nox -s build` leaves)."""
    for env in sorted((toolenv.cache_root() / "envs").glob("build-torch2.1*-py*")):
        python = env / "bin" / "python"
        if not (env / ".farm-complete").is_file() or not (env / "bin" / "ninja").exists():
            continue
        probe = subprocess.run([str(python), "-c", "import torch; print(torch.version.cuda or '')"],
                               capture_output=True, text=True, timeout=120)
        if probe.returncode == 0 and probe.stdout.strip().startswith("13."):
            return python
    return None


@pytest.mark.slow
def test_linux_jit_load_of_a_cuda_extension(tmp_path: Path) -> None:
    """torch.utils.cpp_extension.load() builds a CUDA source with the farm's toolkit and links c10_cuda."""
    if _cached_toolkit() is None:
        pytest.skip("the pinned CUDA 13.0 toolkit is not in the farm's cache (nox -s build installs it)")
    python = _cuda_torch_python()
    if python is None:
        pytest.skip("no CUDA 13 build of torch with ninja in the farm's cache (nox -s build creates one)")
    source = tmp_path / "probe.cu"
    source.write_text(JIT_SOURCE)
    script = tmp_path / "jit.py"
    script.write_text(JIT_SCRIPT)
    out = tmp_path / "build"
    out.mkdir()
    result = _farm("jit", "--cuda", "13.0", "--", str(python), str(script), str(source), str(out),
                   env={"FARM_CUDA_HOME": "", "TORCH_CUDA_ARCH_LIST": "8.0", "MAX_JOBS": "1"}, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "loaded" in result.stdout
    info = symbols.read_elf(out / "farm_jit_probe.so")
    assert "libc10_cuda.so" in info.needed
    assert info.has_cuda_code
