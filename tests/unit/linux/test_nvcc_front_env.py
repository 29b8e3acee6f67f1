"""CMake's CUDA compiler is the nvcc wrapper's (ci/nvcc/shim.py's ``bin/nvcc``) on the host, cross and develop
routes (ci/linux/host.py ``nvcc_wrapper_env``): ``CUDACXX``, and in a CMake build ``-DCMAKE_CUDA_COMPILER`` in
``CMAKE_ARGS``, with ``CUDAARCHS`` the farm's list as CMake writes it. The real CMake build of
tests/fixtures/cmake_skbuild through the farm is in tests/integration/test_cmake_fixture.py."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest

from ci.builds import arch_flags
from ci.linux import cross, develop, host
from ci.toolchain import envs, toolkit
from ci.universe import archs
from ci.universe.project import reading
from ci.universe.selection import Selection, select
from ci.universe.targets import Target

ROOT = Path(__file__).resolve().parents[3]
CMAKE = ROOT / "tests" / "fixtures" / "cmake_skbuild"


def fake_toolkit(tmp_path: Path) -> toolkit.InstalledToolkit:
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    (tk.cuda_home / "bin").mkdir(parents=True, exist_ok=True)
    (tk.cuda_home / "lib").mkdir(exist_ok=True)
    return tk


def target_of(project: Path, arch: str = "x86_64", arch_list: str = "8.0;9.0+PTX") -> Target:
    target = select(reading.load(project), Selection(cuda="13.0", arch=arch))[0]
    return dataclasses.replace(target, cell=archs.with_arch_list(target.cell, arch_list))


def build_env(target: Target, tk: toolkit.InstalledToolkit, work: Path) -> dict[str, str]:
    setup = (cross.CrossSetup(cross.CrossCompiler("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "12.2.0"),
                              Path("/rt"), Path("/site")) if target.cross else None)
    return host._build_env(target, tk, envs.PythonEnv(work / "env"), work / "src", work, setup, None, None, 2)


def test_a_cmake_builds_cuda_compiler_is_the_wrappers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scikit-build-core reads CMAKE_ARGS (the caller's first); CUDA_HOME stays the real toolkit's, where CMake
    finds its libraries (their paths shape the library's bytes). A compiler the caller names is left alone."""
    monkeypatch.setenv("CMAKE_ARGS", "-DCALLER=1")
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.delenv("CUDAARCHS", raising=False)
    tk = fake_toolkit(tmp_path)
    env = build_env(target_of(CMAKE), tk, tmp_path)
    nvcc = tmp_path / host.NVCC_SHIM / "bin" / "nvcc"
    assert f"-I {arch_flags.WRAPPER}" in nvcc.read_text()
    assert env["CUDACXX"] == str(nvcc) and env["CUDA_HOME"] == str(tk.cuda_home)
    assert shlex.split(env["CMAKE_ARGS"]) == ["-DCALLER=1", f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    assert env["CUDAARCHS"] == "80-real;90" and env["FARM_NVCC_ARCH_LIST"] == "8.0;9.0+PTX"
    # a compiler or architectures the caller names stay theirs
    monkeypatch.setenv("CUDACXX", "/opt/cuda/bin/nvcc")
    monkeypatch.setenv("CUDAARCHS", "native")
    monkeypatch.delenv("CMAKE_ARGS")
    assert not {"CUDACXX", "CUDAARCHS", "CMAKE_ARGS"} & set(build_env(target_of(CMAKE), tk, tmp_path))
    monkeypatch.delenv("CUDACXX")
    monkeypatch.setenv("CMAKE_ARGS", "-DCMAKE_CUDA_COMPILER=/opt/cuda/bin/nvcc")
    assert not {"CUDACXX", "CMAKE_ARGS"} & set(build_env(target_of(CMAKE), tk, tmp_path))


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_a_setuptools_build_runs_cmake_through_the_wrapper_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              arch: str) -> None:
    """A setup.py that runs CMake itself (host and cross routes): CUDACXX and CUDA_HOME name the shim."""
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    env = build_env(target_of(ROOT, arch, "9.0"), fake_toolkit(tmp_path), tmp_path)
    assert env["CUDACXX"] == str(tmp_path / host.NVCC_SHIM / "bin" / "nvcc")
    assert env["CUDA_HOME"] == str(tmp_path / host.NVCC_SHIM) and "CMAKE_ARGS" not in env
    assert env["CUDAARCHS"] == "90-real"


def test_the_develop_route_gives_cmake_the_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDACXX", raising=False)
    folder = tmp_path / "develop"
    env, _ = develop._compile_env(target_of(ROOT, arch_list="9.0"), fake_toolkit(tmp_path), tmp_path / "python",
                                  folder, debug=False, max_jobs=2, use_cache=False)
    assert env["CUDACXX"] == str(folder / host.NVCC_SHIM / "bin" / "nvcc") and env["CUDAARCHS"] == "90-real"

