"""A CMake project (issue 19, fixture d): scikit-build-core builds tests/fixtures/cmake_skbuild/CMakeLists.txt,
which finds torch with ``find_package(Torch)`` and compiles a CPU and a CUDA kernel into one TORCH_LIBRARY
library, loaded by the package's ``__init__`` with ``torch.ops.load_library``.

The farm knows nothing of CMake: it installs ``[build-system] requires`` (scikit-build-core, cmake, ninja) into
the target's build environment, runs ``python -m build --no-isolation`` with FORCE_CUDA=1, CUDA_HOME/PATH naming
its PyPI CUDA toolkit (nvidia/cu13) and TORCH_CUDA_ARCH_LIST, and ``[tool.cuda-ext-farm] build-env`` passes the
toolkit's nvcc version to CMake (SKBUILD_CMAKE_DEFINE), which CMakeLists.txt checks against the nvcc it found.

The project is copied into pytest's tmp_path and built from its own folder by the installed command, as in
tests/integration/test_fixture_projects.py: torch 2.11, CPython 3.11, the pinned CUDA 13.0 toolkit, one architecture
(sm_90).
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from ci import wheelmeta
from tests.integration.test_fixture_projects import (
    FIXTURES,
    LOCAL,
    PYTHON,
    TORCH,
    Built,
    assert_every_check_passed,
    build,
    copy_fixture,
    farm,
    files_of,
)

#: The nvcc wrapper's line for the fixture's CUDA source (ci/nvcc/wrapper.py COMPILED): CMake's compile of it ran
#: through the wrapper, with these architecture flags and these flags of NVCC_APPEND_FLAGS.
WRAPPER_LINE = re.compile(r"cuda-ext-farm nvcc: \S+/csrc/scale_add_cuda\.cu: (?P<flags>[^;]*); NVCC_APPEND_FLAGS: "
                          r"(?P<appended>.*)")

# A CMake build of its own: nox -s tests-extended.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


@pytest.fixture(scope="module")
def cmake_project(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("cmake_skbuild")
    folder = copy_fixture("cmake_skbuild", root)
    return build(farm_command, folder, root / "wheelhouse")


def test_cmake_project_builds_one_wheel_pinned_to_its_torch(cmake_project: Built) -> None:
    wheel = cmake_project.wheel
    assert wheel.name.startswith(f"cmake_skbuild-0.3.0{LOCAL}-cp311-cp311-manylinux_"), wheel.name
    assert wheel.name.endswith("_x86_64.whl")
    assert f"torch=={TORCH}.*" in wheelmeta.read_metadata(wheel)["Requires-Dist"]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "cmake_skbuild/__init__.py" in names
    assert "cmake_skbuild/_C.cpython-311-x86_64-linux-gnu.so" in names
    assert not [n for n in names if n.endswith((".cpp", ".cu", "CMakeLists.txt"))], names
    out = cmake_project.result.stdout
    assert "scikit-build-core" in out and "Found Torch" in out  # CMake, find_package(Torch)
    assert "Added CUDA NVCC flags for: -gencode;arch=compute_90,code=sm_90" in out  # TORCH_CUDA_ARCH_LIST


def test_cmake_project_audit_passed_with_cuda_code(cmake_project: Built) -> None:
    checks = assert_every_check_passed(cmake_project.wheel, "wheel-tag", "module-suffix", "metadata", "needed",
                                       "bundled", "cuda-code", "cuda-runtime", "c10_cuda", "symbols", "rpath",
                                       "sass", "ptx")
    assert "sm_90" in str(checks["sass"]["detail"])
    assert "libc10_cuda.so" in str(checks["needed"]["detail"])
    # The farm wrote nothing into the project (no build/, no wheelhouse/).
    assert files_of(cmake_project.project) == files_of(FIXTURES / "cmake_skbuild")


def test_cmake_project_test_command_through_the_farm(cmake_project: Built, farm_command: list[str]) -> None:
    """The farm's test subcommand from the project's folder: the import smoke test and `pytest {project}/tests`
    (the CPU kernel runs; the CUDA kernel is registered; the GPU case skips without a GPU)."""
    assert cmake_project.result.returncode == 0, cmake_project.result.stdout[-3000:]
    result = farm(farm_command, cmake_project.project, "test", "--torch", TORCH, "--python", PYTHON,
                  "--wheelhouse", str(cmake_project.wheelhouse))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "3 passed, 1 skipped" in result.stdout, result.stdout[-2000:]


def wrapper_lines(output: str) -> list[re.Match[str]]:
    return [m for m in map(WRAPPER_LINE.search, output.splitlines()) if m]


def library_of(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read("cmake_skbuild/_C.cpython-311-x86_64-linux-gnu.so")


def test_cmake_compiles_through_the_nvcc_wrapper(cmake_project: Built) -> None:
    """CMake's CUDA compiler is the wrapper's (CMAKE_CUDA_COMPILER through CMAKE_ARGS): one line for the compile,
    the farm's flags (torch's CMake package writes TORCH_CUDA_ARCH_LIST's), and the farm's own NVCC_APPEND_FLAGS;
    CMake's probes of the compiler ran through it too, unrefused (the link found -lcudadevrt)."""
    out = cmake_project.result.stdout
    (line,) = wrapper_lines(out)
    assert line["flags"] == "-gencode=arch=compute_90,code=sm_90"
    assert line["appended"].startswith("-objtemp ") and "--compress-mode=size" in line["appended"]
    assert "Detecting CUDA compiler ABI info - done" in out
    assert re.search(r"Check for working CUDA compiler: \S+/nvcc-front/bin/nvcc", out), out[-5000:]


@pytest.fixture(scope="module")
def cmake_archs(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The fixture with CMAKE_SKBUILD_CMAKE_ARCHS=1: its CUDA code compiles for CMAKE_CUDA_ARCHITECTURES (from
    the farm's CUDAARCHS), CMake's spelling, not torch's flags; the farm's list has PTX."""
    root = tmp_path_factory.mktemp("cmake_archs")
    folder = copy_fixture("cmake_skbuild", root)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CMAKE_SKBUILD_CMAKE_ARCHS", "1")
        result = farm(farm_command, folder, "build", "--arch-list", "8.0;9.0+PTX", "--torch", TORCH, "--python",
                      PYTHON, "--wheelhouse", str(root / "wheelhouse"), "--build-dir", str(root / "build"))
    return Built(folder, root / "wheelhouse", result)


def test_cmakes_spelling_of_the_farms_list_is_the_farms_list(cmake_archs: Built) -> None:
    """CMake writes CUDAARCHS=80-real;90 as --generate-code=arch=compute_80,code=[sm_80] and
    --generate-code=arch=compute_90,code=[compute_90,sm_90]: the farm's outputs, which the wrapper lets through
    in its default mode (refuse); the wheel holds them."""
    (line,) = wrapper_lines(cmake_archs.result.stdout)
    assert line["flags"] == "-gencode=arch=compute_80,code=[sm_80] -gencode=arch=compute_90,code=[compute_90,sm_90]"
    checks = assert_every_check_passed(cmake_archs.wheel, "sass", "ptx", "cuda-code")
    assert "sm_80" in str(checks["sass"]["detail"]) and "sm_90" in str(checks["sass"]["detail"])


@pytest.fixture(scope="module")
def cmake_rebuilt(cmake_project: Built, farm_command: list[str]) -> tuple[bytes, Built]:
    """The first build's library, and a second build in the same folders with the caller's NVCC_APPEND_FLAGS
    (``-lineinfo``: line tables in the device code). Last in this module: it replaces cmake_project's wheel."""
    first = library_of(cmake_project.wheel)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NVCC_APPEND_FLAGS", "-lineinfo")
        again = build(farm_command, cmake_project.project, cmake_project.wheelhouse)
    return first, again


def test_a_changed_nvcc_append_flags_recompiles_the_cmake_build(cmake_rebuilt: tuple[bytes, Built]) -> None:
    first, again = cmake_rebuilt
    out = again.result.stdout
    assert "changed since its last build: NVCC_APPEND_FLAGS" in out, out[-5000:]
    (line,) = wrapper_lines(out)
    assert line["appended"].startswith("-lineinfo -objtemp ")
    assert library_of(again.wheel) != first
    assert_every_check_passed(again.wheel, "sass")


def test_cmake_fixture_is_a_cmake_project() -> None:
    """What the farm's check (ci/universe/project/reading.py) asks of a CMake project: find_package(Torch) in
    CMakeLists.txt."""
    text = (FIXTURES / "cmake_skbuild" / "CMakeLists.txt").read_text()
    assert "find_package(Torch REQUIRED)" in text
    assert "scikit_build_core.build" in (FIXTURES / "cmake_skbuild" / "pyproject.toml").read_text()
    assert Path(FIXTURES / "cmake_skbuild" / "csrc" / "scale_add_cuda.cu").is_file()
