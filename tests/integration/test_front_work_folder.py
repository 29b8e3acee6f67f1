"""The kept work folder is reused only when the build's whole key matches (ci/builds/build_key.py), on a fixture
with a hard-coded ``-gencode`` list built in ``"replace"`` mode (issue 45's second finding: ``--arch-list 9.0`` and
then ``--arch-list "8.0;9.0"`` in the same folder printed ``ninja: no work to do`` and the audit refused the wheel
for ``missing sm_80``): the second build starts from scratch with one line naming what changed, its wheel holds
exactly sm_80 and sm_90 and is byte-identical to one from an empty folder; a third, unchanged, compiles nothing."""

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
REBUILDING = re.compile(r"rebuilding the work folder of \S+ from scratch: changed since its last build: (.*)")


def replace_mode(tmp_path: Path) -> Path:
    folder = copy_fixture("hardcoded_gencode", tmp_path)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('python = ["3.11"]\n',
                                                       'python = ["3.11"]\nproject-arch-flags = "replace"\n'))
    return folder


def build(project: Path, build_dir: Path, wheelhouse: Path, arch_list: str) -> tuple[str, Path]:
    done = subprocess.run([sys.executable, "-m", "ci", "build", "--arch-list", arch_list, "--wheelhouse",
                           str(wheelhouse), "--build-dir", str(build_dir)], cwd=project, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"})
    assert done.returncode == 0, done.stdout[-5000:]
    (wheel,) = wheelhouse.glob("*/*.whl")
    return done.stdout, wheel


def sass_of(wheel: Path, folder: Path) -> tuple[str, ...]:
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(".so")]
        zf.extract(member, folder)
    return list_archs(toolkit.ensure_cuobjdump(), [folder / member])[0]


def test_another_arch_list_in_replace_mode_rebuilds_the_kept_folder(tmp_path: Path) -> None:
    project, kept = replace_mode(tmp_path), tmp_path / "build"
    first, wheel = build(project, kept, tmp_path / "w1", "9.0")
    assert sass_of(wheel, tmp_path / "x1") == ("sm_90",) and not REBUILDING.search(first)
    second, wheel = build(project, kept, tmp_path / "w2", "8.0;9.0")
    said = REBUILDING.findall(second)
    assert said == ["CUDAARCHS, FARM_NVCC_ARCH_LIST, TORCH_CUDA_ARCH_LIST"], second[-4000:]  # names, never values
    assert "ninja: no work to do" not in second
    assert sass_of(wheel, tmp_path / "x2") == ("sm_80", "sm_90")
    third, again = build(project, kept, tmp_path / "w3", "8.0;9.0")
    assert not REBUILDING.search(third) and "ninja: no work to do" in third
    assert again.read_bytes() == wheel.read_bytes()
    shutil.rmtree(kept)  # the same path (a build's bytes depend on its folder's: docs/reproducible-builds.md)
    _, fresh = build(project, kept, tmp_path / "w4", "8.0;9.0")
    assert fresh.read_bytes() == wheel.read_bytes()  # what a build from an empty folder gives
