"""``develop``'s compiles get the farm's flags as the host build's do (issue 45): the deterministic ones
(``environment.farm_flags``), and in ``--debug`` the device and host debug flags its help promises, the project's
debug-env joining them rather than replacing them."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest

from ci.linux import develop
from tests.unit.linux.test_nvcc_front_env import ROOT, fake_toolkit, target_of


def flags_of(tmp_path: Path, *, debug: bool, debug_env: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    target = target_of(ROOT, arch_list="9.0")
    if debug_env is not None:
        target = dataclasses.replace(target, project=dataclasses.replace(target.project, debug_env=debug_env))
    env, _ = develop._compile_env(target, fake_toolkit(tmp_path), tmp_path / "python", tmp_path / "develop",
                                  debug=debug, max_jobs=2, use_cache=False)
    return shlex.split(env.get("NVCC_APPEND_FLAGS", "")), shlex.split(env.get("CPPFLAGS", ""))


def test_develop_compiles_with_the_farms_deterministic_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVCC_APPEND_FLAGS", raising=False)
    monkeypatch.delenv("CPPFLAGS", raising=False)
    nvcc, cpp = flags_of(tmp_path, debug=False)
    target = target_of(ROOT, arch_list="9.0")
    assert {"-objtemp", f"-frandom-seed={target.id}"} <= set(nvcc) and "-G" not in nvcc
    assert f"-ffile-prefix-map={target.project.root}=." in cpp and "-O0" not in cpp


def test_develop_debug_adds_the_farms_debug_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DCALLER")
    monkeypatch.delenv("CPPFLAGS", raising=False)
    nvcc, cpp = flags_of(tmp_path, debug=True, debug_env={"NVCC_APPEND_FLAGS": "-DPROJECT_DEBUG"})
    # the caller's, the project's debug-env, then the farm's (nvcc takes the last of a repeated option)
    assert nvcc.index("-DCALLER") < nvcc.index("-DPROJECT_DEBUG") < nvcc.index("-G") < nvcc.index("-objtemp")
    assert "-g" in nvcc and cpp[:2] == ["-O0", "-g"]


def test_develop_through_sccache_drops_objtemp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sccache replays nvcc's steps in a folder of its own and loses the object under ``-objtemp``
    (compiler_cache.sccache_nvcc_flags): develop's nvcc through it gets the rest of the farm's flags."""
    monkeypatch.delenv("NVCC_APPEND_FLAGS", raising=False)
    monkeypatch.setenv("FARM_COMPILE_CACHE", "sccache")
    target = target_of(ROOT, arch_list="9.0")
    env, launcher = develop._compile_env(target, fake_toolkit(tmp_path), tmp_path / "python", tmp_path / "develop",
                                         debug=True, max_jobs=2, use_cache=True)
    nvcc = shlex.split(env["NVCC_APPEND_FLAGS"])
    assert launcher is not None and "-objtemp" not in nvcc and {"-G", f"-frandom-seed={target.id}"} <= set(nvcc)
