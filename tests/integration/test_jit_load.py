"""torch.utils.cpp_extension.load() with the farm's toolkit: a real CUDA compile."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.audit import symbols
from tests.unit.windows.test_win_jit import JIT_SCRIPT, JIT_SOURCE, _cached_toolkit, _cuda_torch_python, _farm


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
