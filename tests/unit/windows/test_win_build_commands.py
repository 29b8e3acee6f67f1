"""The exact commands and environments the Windows build produces: toolkit, torch, cibuildwheel, delvewheel."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path, PureWindowsPath

import pytest
from cibuildwheel.environment import parse_environment

from ci.builds import arch_flags, cuda_available, project_source
from ci.errors import UsageError
from ci.universe import matrix
from ci.universe.targets import Target
from windows import cibw, dlls, repair, torchenv
from windows.toolkit import installer, layout, wheels

HOME = PureWindowsPath(r"C:\farm\tools\cuda-win-13.0-0123456789ab\nvidia\cu13")
SITE = PureWindowsPath(r"C:\farm\torch-win\torch2.11.0-py3.10-cu13-abcdef0123")

# --- toolkit --------------------------------------------------------------------------------------


def test_pypi_toolkit_uses_the_cells_pins() -> None:
    cell = matrix.get_cell("13.0")
    assert wheels.requirements(cell) == ("nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88",
                                          "nvidia-cuda-crt==13.0.88", "nvidia-cuda-runtime==13.0.96",
                                          "nvidia-cuda-cccl==13.0.85")
    # nvcc, nvvm and crt of one version, every pin exact.
    for c in matrix.CELLS:
        if c.windows is not None and c.windows.toolkit == "pypi":
            pins = dict(p.split("==") for p in wheels.requirements(c))
            assert pins["nvidia-cuda-nvcc"] == pins["nvidia-nvvm"] == pins["nvidia-cuda-crt"]
    with pytest.raises(UsageError, match="does not take its Windows toolkit from PyPI"):
        wheels.requirements(matrix.get_cell("12.4"))


def test_required_files_and_missing_ones() -> None:
    cell = matrix.get_cell("13.0")
    files = layout.required_files(cell)
    assert {"bin/nvcc.exe", "nvvm/bin/cicc.exe", "lib/x64/cudart.lib", "include/crt/host_config.h"} <= set(files)
    assert "include/cublas_v2.h" in files  # classic extensions include ATen/cuda/CUDAContext.h
    present = {str(HOME / f) for f in files if f != "include/cusolverDn.h"}
    assert layout.missing_files(HOME, cell, present.__contains__) == ["include/cusolverDn.h"]
    assert "include/cublas_v2.h" in layout.required_files(matrix.get_cell("12.4"))


def test_toolkit_environment() -> None:
    assert layout.toolkit_env(HOME) == {"CUDA_HOME": str(HOME), "CUDA_PATH": str(HOME)}
    assert layout.path_entries(HOME) == [str(HOME / "bin"), str(HOME / "bin" / "x86_64")]


def test_cuda12_installer() -> None:
    cell = matrix.get_cell("12.4")
    assert installer.installer_command(cell, "cuda_12.4.1_windows_network.exe") == [
        "cuda_12.4.1_windows_network.exe", "-s", "nvcc_12.4", "cudart_12.4", "thrust_12.4", "cublas_dev_12.4",
        "cusparse_dev_12.4", "cusolver_dev_12.4", "-n"]
    assert str(installer.installer_dir(cell, {})) == r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.4"
    assert str(installer.installer_dir(cell, {"CUDA_PATH_V12_4": r"D:\cuda\12.4"})) == r"D:\cuda\12.4"
    hint = installer.installer_hint(cell)
    assert "cuda_12.4.1_windows_network.exe -s nvcc_12.4" in hint and "FARM_CUDA_HOME" in hint
    with pytest.raises(UsageError):
        installer.installer_command(matrix.get_cell("13.0"))


# --- torch ----------------------------------------------------------------------------------------


def test_torch_index_and_install_command(fusedops_targets: tuple[Target, ...]) -> None:
    cu130 = next(t for t in fusedops_targets if t.cell.cuda == "13.0")
    cu128 = next(t for t in fusedops_targets if t.cell.cuda == "12.8")
    assert torchenv.index_url(cu130, {}) == "https://download.pytorch.org/whl/cu130"
    assert torchenv.index_url(cu128, {}) == "https://download.pytorch.org/whl/cu128"  # torch 2.10 is a 12.8 build
    assert torchenv.index_url(cu130, {"FARM_TORCH_INDEX_URL": "https://mirror/torch/cu{cuda}"}) == \
        "https://mirror/torch/cu130"
    cmd = torchenv.install_command(Path("C:/Python310/python.exe"), Path("C:/farm/torch"), cu130.torch_requirement,
                                   "https://download.pytorch.org/whl/cu130")
    assert cmd[1:5] == ["-m", "pip", "install", "--target"]
    assert cmd[-1] == "torch==2.11.0,!=2.11.0+cpu"
    assert cmd[cmd.index("--index-url") + 1] == "https://download.pytorch.org/whl/cu130"
    folder = torchenv.folder_for(cu130, "3.10", "https://download.pytorch.org/whl/cu130", Path("/c"))
    assert folder.parent == Path("/c/torch-win") and folder.name.startswith("torch2.11.0-py3.10-cu13-")
    assert folder != torchenv.folder_for(cu130, "3.11", "https://download.pytorch.org/whl/cu130", Path("/c"))


def test_interpreter_override(tmp_path: Path) -> None:
    python = tmp_path / "python.exe"
    python.write_text("")
    assert torchenv.interpreter("3.12", {"FARM_PYTHON_3_12": str(python)}) == python
    with pytest.raises(UsageError, match="FARM_PYTHON_3_12 is not a file"):
        torchenv.interpreter("3.12", {"FARM_PYTHON_3_12": str(tmp_path / "nope.exe")})
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert torchenv.interpreter(running, {}).name.startswith("python")


def test_torch_version_file(fusedops_targets: tuple[Target, ...]) -> None:
    text = ("from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n"
            "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n")
    assert torchenv.parse_version_py(text) == ("2.11.0+cu130", "13.0")
    assert torchenv.parse_version_py("__version__ = '2.11.0'\ncuda: Optional[str] = None\n") == ("2.11.0", None)
    cu130 = next(t for t in fusedops_targets if t.cell.cuda == "13.0")
    torchenv.check_torch("2.11.0+cu130", "13.0", cu130)
    with pytest.raises(UsageError, match="CUDA 13 build of torch"):
        torchenv.check_torch("2.11.0", None, cu130)  # PyPI's Windows wheel: a CPU build
    with pytest.raises(UsageError, match="not the target's"):
        torchenv.check_torch("2.13.0+cu130", "13.0", cu130)


# --- cibuildwheel ---------------------------------------------------------------------------------


def test_build_python_and_identifier(fusedops_targets: tuple[Target, ...],
                                     classic_targets: tuple[Target, ...]) -> None:
    stable = fusedops_targets[0]
    assert stable.id == "fusedops-stable-cu130-cp310abi3-win_amd64"
    assert cibw.build_python(stable) == "3.10"
    assert cibw.build_identifier("3.10") == "cp310-win_amd64"
    # torch 2.15 has no 3.10 wheel: the abi3 build takes the oldest CPython it has.
    assert cibw.build_python(dataclasses.replace(stable, torch="2.15.0")) == "3.11"
    classic = next(t for t in classic_targets if t.python == "3.12")
    assert cibw.build_python(classic) == "3.12"


def test_cibuildwheel_environment(fusedops_targets: tuple[Target, ...]) -> None:
    target = fusedops_targets[0]
    variables = cibw.build_variables(target, HOME, "13.0.88", None, 4, {})
    assert variables == {
        "CUDA_HOME": str(HOME), "CUDA_PATH": str(HOME), "DISTUTILS_USE_SDK": "1",
        "TORCH_CUDA_ARCH_LIST": "7.5;8.0;8.6;9.0;10.0;12.0", "MAX_JOBS": "4",
        "FORCE_CUDA": "1", "FUSEDOPS_CUDA": "1", "FUSEDOPS_NVCC_VERSION": "13.0.88",
        "FUSEDOPS_GIT_COMMIT": project_source.git_commit(target.project.root) or "unknown",
        "PYTHONPATH": str(cuda_available.SITE),
        # the farm's deterministic and compression flags, as on Linux (ci/builds/environment.py)
        "NVCC_APPEND_FLAGS": f"-objtemp --threads 0 -frandom-seed={target.id} --compress-mode=size",
        # the wrapper in front of the toolkit's nvcc.exe (ci/nvcc/wrapper.py)
        "PYTORCH_NVCC": f"python -I {arch_flags.WRAPPER}", "FARM_NVCC_NEXT": str(HOME / "bin" / "nvcc.exe"),
        "FARM_NVCC_ARCH_LIST": "7.5;8.0;8.6;9.0;10.0;12.0", "FARM_NVCC_ARCH_MODE": "refuse",
    }
    env = cibw.cibuildwheel_env(target, "3.10", SITE, variables)
    assert env["CIBW_PLATFORM"] == "windows" and env["CIBW_ARCHS"] == "AMD64"
    assert env["CIBW_BUILD"] == "cp310-win_amd64"
    assert env["CIBW_BUILD_FRONTEND"] == "build; args: --no-isolation"
    assert env["CIBW_REPAIR_WHEEL_COMMAND"] == "" and env["CIBW_TEST_COMMAND"] == ""
    # cibuildwheel's own parser gives back every value exactly (backslashes, spaces, semicolons).
    parsed = parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary({})
    assert parsed == variables
    spaced = dict(variables, CUDA_HOME=r"C:\Users\Zoë Doe\cache\cu13")
    assert parse_environment(cibw.environment_option(spaced)).as_dictionary({}) == spaced
    # A quote of either kind, a dollar sign, backslashes: each value exactly as composed (issue 45).
    odd = {"NVCC_APPEND_FLAGS": '-DNAME=\\"it\'s\\" -DCOST=$5 -DP=C:\\a\\', "X": "$(echo no) `no` <(no)"}
    assert parse_environment(cibw.environment_option(odd)).as_dictionary({}) == odd


def test_the_build_sees_cuda_available_unless_the_project_says_no(fusedops_targets: tuple[Target, ...]) -> None:
    """ci/buildsite first on the build's PYTHONPATH (Windows' separator), then the project's own; the farm
    process's own (its code, which the launcher puts there) never: a Windows build takes only the caller's flag
    variables (ci/builds/environment.py), and an empty PYTHONPATH where the build names none
    (cuda-available-in-build = false; cibuildwheel's repair and test are off)."""
    target = fusedops_targets[0]
    caller = {"PYTHONPATH": r"C:\farm\code"}
    inherited = cibw.build_variables(target, HOME, "13.0.88", None, 4, caller)
    assert inherited["PYTHONPATH"] == str(cuda_available.SITE)
    own = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, "PYTHONPATH": r"C:\tools"}))
    assert cibw.build_variables(own, HOME, "13.0.88", None, 4, caller)["PYTHONPATH"] == \
        f"{cuda_available.SITE};C:\\tools"
    off = dataclasses.replace(target, project=dataclasses.replace(target.project, cuda_available_in_build=False))
    assert cibw.build_variables(off, HOME, "13.0.88", None, 4, caller)["PYTHONPATH"] == ""


def test_before_build_is_a_valid_cmd_line(fusedops_targets: tuple[Target, ...]) -> None:
    target = fusedops_targets[0]
    env = cibw.cibuildwheel_env(target, "3.10", SITE, {})
    before = env["CIBW_BEFORE_BUILD"]
    pth, install = before.split(" && ")
    assert pth.startswith('python -c "import sysconfig, pathlib;')
    assert "'C:/farm/torch-win/torch2.11.0-py3.10-cu13-abcdef0123\\n'" in pth
    # `>` is a redirection in cmd.exe: requirements with it are quoted.
    assert install == 'python -m pip install "setuptools>=77" wheel ninja'
    assert cibw.cmd_quote("ninja") == "ninja"
    assert cibw.cmd_quote("a b") == '"a b"'
    with pytest.raises(UsageError):
        cibw.cmd_quote("100%")
    # The code run by `python -c` is valid Python that writes the .pth line.
    code = pth.split(" -c ", 1)[1].strip('"')
    compile(code, "<before-build>", "exec")


def test_cibuildwheel_command(tmp_path: Path) -> None:
    cmd = cibw.cibuildwheel_command(tmp_path / "src", tmp_path / "out")
    assert cmd == [sys.executable, "-m", "cibuildwheel", "--output-dir", str(tmp_path / "out"), str(tmp_path / "src")]


# --- delvewheel and the import test -------------------------------------------------------------


def test_delvewheel_command_repeats_exclude_flags(tmp_path: Path) -> None:
    cmd = repair.delvewheel_command(tmp_path / "a.whl", tmp_path / "out", add_paths=[Path("C:/dlls"), Path("D:/x")])
    assert cmd[1:6] == ["-m", "delvewheel", "repair", "--wheel-dir", str(tmp_path / "out")]
    assert cmd[cmd.index("--add-path") + 1] == str(Path("C:/dlls")) and cmd.count("--add-path") == 2
    excluded = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--exclude"]
    assert excluded == list(dlls.repair_excludes())
    assert not any(";" in e or ":" in e for e in excluded)  # one name per flag, whatever os.pathsep is
    assert {"c10.dll", "c10_cuda.dll", "torch_cpu.dll", "torch_cuda.dll", "cudart64_*.dll"} <= set(excluded)
    assert cmd[-1] == str(tmp_path / "a.whl")
