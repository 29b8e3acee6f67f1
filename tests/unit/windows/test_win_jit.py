"""``python -m ci jit``: the command line, the environments, and (on Linux) a real run, up to a JIT load()."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ci import cli, toolenv
from ci.errors import UsageError
from ci.toolchain import toolkit
from ci.universe import matrix, shapes
from windows import jit

ROOT = Path(__file__).resolve().parents[3]


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


def test_arguments() -> None:
    opts = cli.parse(["jit", "--", "python", "train.py"])
    assert opts.command == "jit"  # the sub-command survives: the command to run has a dest of its own
    assert jit.command_of(list(opts.args.jit_command)) == ["python", "train.py"]
    args = cli.parse(["jit", "--cuda", "13.2", "--toolset", "14.44", "--print-env"]).args
    assert (args.cuda, args.toolset, args.print_env, args.jit_command) == ("13.2", "14.44", True, ())
    with pytest.raises(UsageError, match="no command to run"):
        jit.command_of(["--"])


def test_program_lookup_uses_the_new_path(tmp_path: Path) -> None:
    tool = tmp_path / "nvcc"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    # Only Windows needs it: CreateProcess looks the program up on the parent's PATH.
    assert jit.resolve_program(["nvcc", "-V"], str(tmp_path), windows=True) == [str(tool), "-V"]
    assert jit.resolve_program(["nvcc", "-V"], str(tmp_path), windows=False) == ["nvcc", "-V"]
    assert jit.resolve_program([str(tool)], "", windows=True) == [str(tool)]


def test_export_lines() -> None:
    assert jit.export_lines({"CUDA_HOME": "/x y"}, windows=False) == ["export CUDA_HOME='/x y'"]
    assert jit.export_lines({"CUDA_HOME": r"C:\x y"}, windows=True) == [r'set "CUDA_HOME=C:\x y"']


def test_toolset_is_windows_only() -> None:
    with pytest.raises(UsageError, match="only Windows has"):
        jit.main("13", ["python"], toolset="14.44", platform="linux")


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


def test_windows_jit_environment_and_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             data: Path, tmp_path: Path) -> None:
    """What the Windows runner hands the command: vcvars64 of the chosen toolset, the toolkit, DISTUTILS_USE_SDK."""
    from pathlib import PureWindowsPath

    from windows import environment, vcvars

    def dump(name: str) -> dict[str, str]:
        return vcvars.parse_set(vcvars.decode_set_output((data / name).read_bytes()))

    variables, prepend = vcvars.diff(dump("vcvars-before.set.utf16le"), dump("vcvars-14.44-after.set.utf16le"))
    vc = vcvars.VcvarsEnv("a1b2c3d4", "14.44.35207", "x64", variables, prepend)
    home = PureWindowsPath(r"C:\farm\tools\cuda-win-13.0-0123456789ab\nvidia\cu13")
    seen: list[tuple[str, str | None, bool]] = []

    def fake_windows_env(cell: shapes.Cell, toolset: str | None, refresh: bool) -> dict[str, str]:
        seen.append((cell.name, toolset, refresh))
        return environment.compose(os.environ, vc, home)

    monkeypatch.setattr(jit, "windows_env", fake_windows_env)
    assert jit.main("13", [], toolset="14.44", print_env=True, refresh=True, platform="win32") == 0
    lines = capsys.readouterr().out.splitlines()
    assert seen == [("cu130", "14.44", True)]
    for expected in (f'set "CUDA_HOME={home}"', 'set "DISTUTILS_USE_SDK=1"', 'set "VSCMD_ARG_TGT_ARCH=x64"',
                     'set "VCTOOLSVERSION=14.44.35207"'):
        assert expected in lines
    path_line = next(line for line in lines if line.startswith('set "PATH='))
    assert path_line.startswith(f'set "PATH={home}\\bin;{home}\\bin\\x86_64;C:\\Program Files\\Microsoft Visual '
                                r'Studio\2022\Enterprise\VC\Tools\MSVC\14.44.35207\bin\HostX64\x64;')
    # Running a command: the program is looked up on the new PATH (CreateProcess would use the farm's own).
    tool = tmp_path / "probe"
    tool.write_text("#!/bin/sh\nexit 5\n")
    tool.chmod(0o755)
    monkeypatch.setattr(jit, "windows_env", lambda cell, toolset, refresh: {"PATH": str(tmp_path)})
    assert jit.main("13", ["--", "probe"], platform="win32") == 5
