"""A new user's first builds that cannot give a wheel, through the command line: each ends in one line naming the
cause, the value and the fix, exit 2, no traceback, and nothing made (no wheelhouse, no build folder, the project's
folder as it was). Refused before anything is installed (ci/builds/preflight.py):

* ``pyproject_only``: a pyproject.toml with a name and an empty farm table, a CUDA source, no setup.py nor backend;
* ``stable_pybind11``: ``abi = "stable"`` on a pybind11 module over torch/extension.h.

Refused after the build, before the repair (ci/builds/failure/pure.py), since only the build shows it:

* ``ext_if_variable``: a setup.py that compiles its extension only when MYEXT_BUILD_CUDA=1, so the build writes a
  pure-Python wheel; the line names the variable (before, auditwheel's "could not repair the wheel"). It runs the
  real build (about 12 s with the farm's cached toolkit and torch 2.11 environment for CPython 3.11).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration import engine

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def build(tmp_path: Path, fixture: str, *args: str, env: dict[str, str] | None = None,
          ) -> tuple[subprocess.CompletedProcess[str], Path]:
    project = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, project)
    env = {**os.environ, "COLUMNS": "300", "PYTHONPATH": str(ROOT), "FARM_WHEELHOUSE": str(tmp_path / "wh"),
           "FARM_BUILD_DIR": str(tmp_path / "build"), **(env or {})}
    result = subprocess.run([sys.executable, "-m", "ci", *(args or ("build",)), "--project", str(project)],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=900)
    assert "Traceback" not in result.stdout, result.stdout[-3000:]
    assert result.returncode == 2, result.stdout[-3000:]
    assert not (tmp_path / "wh").exists()
    assert files(project) == files(FIXTURES / fixture)
    return result, project


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts)


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("fixture", "line"), [
    ("pyproject_only",
     'error: nothing in the project folder compiles an extension (no setup.py, and pyproject.toml names no build '
     'backend): add a setup.py that compiles it: setup(ext_modules=[CUDAExtension("myext._C", ["csrc/ops.cu"])], '
     'cmdclass={"build_ext": BuildExtension}) with torch.utils.cpp_extension; or build with CMake (build-backend = '
     '"scikit_build_core.build" and a CMakeLists.txt)'),
    ("stable_pybind11",
     'error: abi = "stable" but a source the build compiles includes a classic extension\'s header (csrc/ops.cpp '
     "line 1: #include <pybind11/pybind11.h>; and 1 more): a stable-ABI wheel serves every torch from one build, "
     'and pybind11 or torch/extension.h code is bound to one torch and one CPython: set abi = "classic" in '
     "[tool.cuda-ext-farm] (a wheel per torch and Python), or port the sources to torch's stable ABI headers "
     "(torch/csrc/stable/library.h: STABLE_TORCH_LIBRARY; torch/csrc/stable/tensor.h)"),
])
def test_a_project_that_cannot_give_a_wheel_is_refused_before_anything_is_made(tmp_path: Path, fixture: str,
                                                                               line: str) -> None:
    result, _ = build(tmp_path, fixture)
    assert last_line(result) == line
    assert not (tmp_path / "build").exists()  # no toolkit, environment or build folder was needed to say it
    assert "toolkit and build environment" not in result.stdout


@pytest.mark.slow
def test_a_build_that_compiles_nothing_is_named_with_the_variable_before_the_repair(tmp_path: Path) -> None:
    result, _ = build(tmp_path, "ext_if_variable")
    assert "Successfully built myext-0.1.0-py3-none-any.whl" in result.stdout
    assert last_line(result) == (
        "error: the build wrote a pure-Python wheel with no compiled library (myext-0.1.0-py3-none-any.whl): setup.py "
        'decides ext_modules from MYEXT_BUILD_CUDA (compared with "1"): set the value that builds the extension in '
        'build-env of [tool.cuda-ext-farm] (build-env = { MYEXT_BUILD_CUDA = "1" }), then build again; nothing was '
        "written to the wheelhouse")
    assert "auditwheel" not in result.stdout and "> repair" not in result.stdout


@pytest.mark.docker
def test_a_container_build_that_compiles_nothing_is_named_with_the_variable(tmp_path: Path) -> None:
    """cibuildwheel stops at the pure wheel before its repair in the image; the line is the host build's."""
    engine.skip_without(base=engine.BOOKWORM)
    base = subprocess.run([sys.executable, "-m", "ci", "base-image"], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert base.returncode == 0, base.stdout[-3000:]
    result, _ = build(tmp_path, "ext_if_variable", "build-cuda", "13.0", env={"FARM_BASE_IMAGE": "cuda-ext-farm/base"})
    assert "Build failed because a pure Python wheel was generated." in result.stdout
    assert last_line(result) == (
        "error: the container build of myext-torch2.11-cu130-cp311-linux_x86_64 failed: the build wrote a pure-Python "
        "wheel with no compiled library (Build failed because a pure Python wheel was generated): setup.py decides "
        'ext_modules from MYEXT_BUILD_CUDA (compared with "1"): set the value that builds the extension in build-env '
        'of [tool.cuda-ext-farm] (build-env = { MYEXT_BUILD_CUDA = "1" }), then build again; nothing was written to '
        "the wheelhouse")
