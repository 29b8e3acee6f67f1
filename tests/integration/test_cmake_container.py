"""A CMake project's container build compiles through the nvcc wrapper: tests/fixtures/cmake_skbuild built in the
cell's image (the bootstrapped Debian base, no registry here), where CMake's CUDA compiler is the ``bin/nvcc`` of
the folder made in the container before the build (ci/builds/cmake_compiler.py, ci/linux/container.py). The
landed container route left CMake on the image's /usr/local/cuda/bin/nvcc: no wrapper line, no decision."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ci.linux import container, images
from tests.integration import engine
from tests.integration.test_fixture_projects import TORCH, assert_every_check_passed, copy_fixture, farm

#: The wrapper's line for the fixture's CUDA source, as cibuildwheel's copy in the container names it.
WRAPPER_LINE = re.compile(r"cuda-ext-farm nvcc: /project/csrc/scale_add_cuda\.cu: (?P<flags>[^;]*); "
                          r"NVCC_APPEND_FLAGS: (?P<appended>.*)")

# A CMake build in a container: nox -s tests-extended, with a Docker engine.
pytestmark = [pytest.mark.slow, pytest.mark.extended, pytest.mark.docker]


def test_a_cmake_container_build_compiles_through_the_nvcc_wrapper(farm_command: list[str], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    engine.skip_without(base=engine.BOOKWORM)
    monkeypatch.setenv("FARM_BASE_IMAGE", images.BASE_REPO)
    base = farm(farm_command, tmp_path, "base-image")
    assert base.returncode == 0, base.stdout[-3000:]
    folder = copy_fixture("cmake_skbuild", tmp_path)
    result = farm(farm_command, folder, "build-cuda", "--cuda", "13.0", "--torch", TORCH, "--arch-list", "9.0",
                  "--wheelhouse", str(tmp_path / "wheelhouse"), "--build-dir", str(tmp_path / "build"))
    out = result.stdout
    assert result.returncode == 0, out[-5000:]
    lines = [m for m in map(WRAPPER_LINE.search, out.splitlines()) if m]
    assert [m["flags"] for m in lines] == ["-gencode=arch=compute_90,code=sm_90"], out[-5000:]
    assert "-objtemp" in lines[0]["appended"]  # the farm's NVCC_APPEND_FLAGS, folded by the wrapper
    assert f"Check for working CUDA compiler: {container.NVCC_FRONT}/bin/nvcc" in out, out[-5000:]
    (wheel,) = sorted((tmp_path / "wheelhouse").glob("*/*.whl"))
    assert_every_check_passed(wheel, "sass", "cuda-code")
