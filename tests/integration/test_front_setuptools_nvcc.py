"""The nvcc wrapper in front of a build that runs nvcc without ninja (tests/fixtures/setuptools_nvcc:
``BuildExtension.with_options(use_ninja=False)``, where torch runs ``CUDA_HOME/bin/nvcc`` itself; issue 45): its
compiles print the wrapper's line, get its architecture decision and go through the compile cache, as torch's
ninja compiles do (the host build's ``CUDA_HOME`` is the toolkit folder of ci/nvcc/shim.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_fixture_projects import copy_fixture

from ci.audit.gpu_code import list_archs
from ci.toolchain import toolkit

pytestmark = [pytest.mark.slow, pytest.mark.extended]

ROOT = Path(__file__).resolve().parents[2]
FARM_FLAGS = "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90"
COMPILED = re.compile(r"^cuda-ext-farm nvcc: (?:\S+/)?csrc/scale\.cu: (.*?); NVCC_APPEND_FLAGS: ", re.M)


def build(project: Path, tmp_path: Path, name: str, env: dict[str, str]) -> tuple[str, Path]:
    wheelhouse = tmp_path / name
    done = subprocess.run([sys.executable, "-m", "ci", "build", "--arch-list", "8.0;9.0", "--wheelhouse",
                           str(wheelhouse), "--build-dir", str(tmp_path / "build")], cwd=project, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250", **env})
    assert done.returncode == 0, done.stdout[-5000:]
    (wheel,) = wheelhouse.glob("*/*.whl")
    return done.stdout, wheel


def sass_of(wheel: Path, folder: Path) -> tuple[str, ...]:
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(".so")]
        zf.extract(member, folder)
    return list_archs(toolkit.ensure_cuobjdump(), [folder / member])[0]


def test_setuptools_own_compile_runs_through_the_wrapper_and_the_cache(tmp_path: Path) -> None:
    project = copy_fixture("setuptools_nvcc", tmp_path)
    env = {"FARM_COMPILE_CACHE": "ccache", "CCACHE_DIR": str(tmp_path / "ccache")}
    first, wheel = build(project, tmp_path, "w1", env)
    assert re.search(r"^\S+/nvcc-front/bin/nvcc .* -c csrc/scale\.cu ", first, re.M), first[-4000:]  # setuptools' own
    assert COMPILED.findall(first) == [FARM_FLAGS], first[-4000:]
    assert "compile cache (ccache): 0 hits, 1 misses" in first
    shutil.rmtree(tmp_path / "build")  # a second machine: the same path, an empty folder, the warm cache
    second, again = build(project, tmp_path, "w2", env)
    assert COMPILED.findall(second) == [FARM_FLAGS] and "compile cache (ccache): 1 hits, 0 misses" in second
    assert again.read_bytes() == wheel.read_bytes()


def test_replace_gives_setuptools_own_compile_the_farms_list(tmp_path: Path) -> None:
    """``-Xcompiler -march=...`` makes torch drop its architecture flags: the compile has none, and the wrapper
    gives it the farm's list (without it nvcc would build its default architecture alone)."""
    project = copy_fixture("setuptools_nvcc", tmp_path)
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'project-arch-flags = "replace"\n')
    output, wheel = build(project, tmp_path, "w", {"SETUPTOOLS_NVCC_HOST_ARCH": "x86-64"})
    assert "-march=x86-64" in output and COMPILED.findall(output) == [FARM_FLAGS], output[-4000:]
    assert sass_of(wheel, tmp_path / "x") == ("sm_80", "sm_90")
