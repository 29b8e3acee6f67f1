"""CMake's CUDA compiler in a Windows build is the nvcc wrapper's (ci/builds/cmake_compiler.py rendered by
windows/cibw.py ``nvcc_front``): ``CUDACXX`` names the stage's ``bin\\nvcc.exe`` (the launcher ci/nvcc/shim.py
writes), a CMake build's ``CMAKE_ARGS`` adds ``-DCMAKE_CUDA_COMPILER`` after the project's or the caller's (whose
environment cibuildwheel's steps inherit), ``CUDAARCHS`` is the farm's list. The values are read back through
cibuildwheel's own parser of ``CIBW_ENVIRONMENT`` (backslashes kept) and split as scikit-build-core splits
``CMAKE_ARGS``. No Windows here: the construction only."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path, PureWindowsPath

from cibuildwheel.environment import parse_environment

from ci.nvcc import wrapper
from ci.universe.targets import Target
from windows import cibw

PYTHON = PureWindowsPath(r"C:\hostedtoolcache\Python\3.11.9\x64\python.exe")


def toolkit(tmp_path: Path) -> Path:
    real = tmp_path / "cuda"
    for folder in ("bin", "include", "lib/x64"):
        (real / folder).mkdir(parents=True, exist_ok=True)
    (real / "bin" / "nvcc.exe").write_bytes(b"MZ")
    return real


def cmake_build(target: Target, **build_env: str) -> Target:
    return dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_requires=("scikit-build-core>=0.10", "cmake>=3.26"), build_env=build_env))


def built(target: Target, tmp_path: Path, caller: dict[str, str]) -> dict[str, str]:
    """The build's variables as cibuildwheel hands them to the build (its parser of CIBW_ENVIRONMENT)."""
    real = toolkit(tmp_path)
    variables = cibw.build_variables(target, real, "13.0.88", None, 4, caller)
    variables |= cibw.nvcc_front(target, variables, real, tmp_path / "stage" / "nvcc-front", PYTHON, caller)
    return parse_environment(cibw.environment_option(variables)).as_dictionary({})


def test_a_cmake_windows_builds_cuda_compiler_is_the_wrappers(fusedops_targets: tuple[Target, ...],
                                                              tmp_path: Path) -> None:
    """The landed Windows route set none of these: CMake ran the toolkit's nvcc.exe, past the wrapper."""
    target = cmake_build(fusedops_targets[0])
    env = built(target, tmp_path, {"CMAKE_ARGS": "-DCALLER=1"})
    nvcc = tmp_path / "stage" / "nvcc-front" / "bin" / "nvcc.exe"
    assert nvcc.read_bytes().startswith(b"MZ")  # the launcher exists when CMake runs it
    assert env["CUDACXX"] == str(PureWindowsPath(nvcc))
    # the caller's first; the -D value in CMake's slashes, one word whatever the path holds
    assert shlex.split(env["CMAKE_ARGS"]) == ["-DCALLER=1", f"-DCMAKE_CUDA_COMPILER={PureWindowsPath(nvcc).as_posix()}"]
    assert env["CUDAARCHS"] == wrapper.cmake_architectures(target.cell.arch_list)
    assert env["CUDA_HOME"] == str(tmp_path / "cuda")  # the real toolkit: CMake's library paths as before
    # a compiler or architectures the project or the caller names stay theirs
    env = built(cmake_build(fusedops_targets[0], CUDACXX=r"C:\cuda\bin\nvcc.exe"), tmp_path, {"CUDAARCHS": "90a"})
    assert env["CUDACXX"] == r"C:\cuda\bin\nvcc.exe" and "CMAKE_ARGS" not in env and "CUDAARCHS" not in env
    env = built(target, tmp_path, {"CMAKE_ARGS": r"-DCMAKE_CUDA_COMPILER=C:\cuda\bin\nvcc.exe"})
    assert "CUDACXX" not in env and "CMAKE_ARGS" not in env


def test_a_setuptools_windows_build_gives_cmake_the_wrapper_too(fusedops_targets: tuple[Target, ...],
                                                                tmp_path: Path) -> None:
    """A setup.py that runs CMake itself: CUDACXX names the nvcc.exe of the folder CUDA_HOME names."""
    target = fusedops_targets[0]
    env = built(target, tmp_path, {})
    folder = tmp_path / "stage" / "nvcc-front"
    assert env["CUDA_HOME"] == str(folder) and env["CUDACXX"] == str(PureWindowsPath(folder / "bin" / "nvcc.exe"))
    assert "CMAKE_ARGS" not in env and env["CUDAARCHS"] == wrapper.cmake_architectures(target.cell.arch_list)
