"""Unit tests of command construction (no external tool runs here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ci import build, develop, matrix, proc, toolkit


def test_nvcc_version_is_parsed() -> None:
    text = "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0"
    assert toolkit.parse_nvcc_version(text) == "13.0.88"
    with pytest.raises(toolkit.ToolkitError):
        toolkit.parse_nvcc_version("gcc (Debian 12.2.0-14) 12.2.0")


def test_install_key_depends_only_on_the_set_of_pins() -> None:
    a = toolkit.install_key(("a==1", "b==2"))
    assert a == toolkit.install_key(("b==2", "a==1"))
    assert a != toolkit.install_key(("a==1", "b==3"))


def test_pip_target_install_is_pinned_binary_only(tmp_path: Path) -> None:
    cmd = toolkit.pip_install_target(("nvidia-cuda-nvcc==13.0.88",), tmp_path)
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    assert "--only-binary=:all:" in cmd and "--no-deps" in cmd
    assert cmd[cmd.index("--target") + 1] == str(tmp_path)


def test_cache_root_honours_overrides(tmp_path: Path) -> None:
    assert toolkit.cache_root({"FARM_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert toolkit.cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "cuda-ext-farm"


def test_repair_excludes_torch_and_cuda_runtime(tmp_path: Path) -> None:
    cmd = build.repair_command(tmp_path / "x.whl", tmp_path, matrix.get_cell("13.0"))
    excluded = {cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--exclude"}
    assert {"libc10.so", "libc10_cuda.so", "libtorch_cuda.so", "libcudart.so.13"} <= excluded
    cpu = build.repair_command(tmp_path / "x.whl", tmp_path, None)
    assert "libcudart.so.13" not in cpu


def test_compiler_env_sets_arch_list_and_jobs(tmp_path: Path) -> None:
    cell = matrix.resolve("13.0", "9.0+PTX")
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    env = build.compiler_env(build.BuildOptions(cell=cell, wheelhouse=tmp_path, max_jobs=3), tk)
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0+PTX"
    assert env["CUDA_HOME"] == str(tmp_path / "cu13")
    assert env["MAX_JOBS"] == "3" and env["FUSEDOPS_CUDA"] == "1"
    cpu = build.compiler_env(build.BuildOptions(cell=None, wheelhouse=tmp_path), None)
    assert cpu == {"FUSEDOPS_CUDA": "0"}


def test_launcher_wraps_both_compilers(tmp_path: Path) -> None:
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    env = develop.launcher_env("/usr/bin/ccache", tk, tmp_path / "wrap")
    assert env["PYTORCH_NVCC"] == f"/usr/bin/ccache {tmp_path / 'cu13' / 'bin' / 'nvcc'}"
    wrapper = Path(env["CXX"])
    assert wrapper.name == "g++" and "/usr/bin/ccache" in wrapper.read_text()
    assert wrapper.stat().st_mode & 0o111


def test_logged_command_is_replayable() -> None:
    line = proc.format_command(["nvcc", "-o", "a b.o"], {"FARM_X_UNSET_VAR": "1 2"}, Path("/tmp"))
    assert line == "cd /tmp && FARM_X_UNSET_VAR='1 2' nvcc -o 'a b.o'"


def test_failed_command_raises_with_status() -> None:
    with pytest.raises(proc.CommandError, match="exit status 3"):
        proc.run([sys.executable, "-c", "raise SystemExit(3)"])
