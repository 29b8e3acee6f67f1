"""Release commands run as a user runs them: `python -m ci release ...` in a subprocess over built artifacts,
real pip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.release import assembly
from ci.universe import project
from ci.universe.project import reading
from tests.unit.release.test_release import (
    RELEASED_CELLS,
    ROOT,
    VERSION,
    build_artifacts,
    fake_sdist,
)


@pytest.fixture(scope="module")
def fusedops() -> project.ProjectConfig:
    return reading.load(Path(__file__).resolve().parents[2])


@pytest.mark.extended
def test_assemble_writes_a_release_folder_from_workflow_artifacts(tmp_path: Path,
                                                                  fusedops: project.ProjectConfig) -> None:
    made = build_artifacts(tmp_path / "artifacts", fusedops)
    fake_sdist(tmp_path / "sdist", "fusedops", VERSION)
    out = tmp_path / "release"
    args = ("release", "--assemble", str(tmp_path / "artifacts"), "--sdist-dir", str(tmp_path / "sdist"), "--out",
            str(out), "--tag", "v0.1.0", "--no-audit")
    # fusedops asks for one PyPI wheel across CUDA majors: the assemble job merges its cu128 and cu130 wheels, and
    # these stand-in wheels hold no CUDA library to merge (tests/unit/release/test_majors.py merges real ones).
    assert fusedops.pypi_cuda_majors
    refused = run_ci(*args)
    assert refused.returncode == 2, refused.stdout
    assert refused.stdout.strip().splitlines()[-1] == (
        "error: the CUDA 13 wheel holds no library matching cuda-libraries (fusedops/_C_cuda.*): check "
        "[tool.cuda-ext-farm] cuda-libraries against the wheel's files")
    assert not out.exists()
    # The same release without the key: every wheel as built.
    config = tmp_path / "pyproject.toml"
    config.write_text((fusedops.root / "pyproject.toml").read_text().replace("pypi-cuda-majors = true",
                                                                            "pypi-cuda-majors = false"))
    result = run_ci(*args, "--config", str(config))
    assert result.returncode == 0, result.stdout
    manifest = assembly.verify_release(out)
    # Every target's wheel as built: each cell's on x86_64, on aarch64 where the cell has it, and on Windows, the
    # free-threaded CPythons' beside the abi3 one where the cell builds them.
    assert manifest.tag == "v0.1.0" and sorted(f.name for f in manifest.wheels) == sorted(w.name for w in made)
    assert len(made) > sum(1 + c.aarch64 + (c.windows is not None) for c in RELEASED_CELLS)  # cp313t, cp314t
    assert all(dict(f.checks)["index-install"].startswith("ok") for f in manifest.wheels)
    assert all(dict(f.checks)["extra-index"].startswith("ok") for f in manifest.wheels)
    notes = (out / "release-notes.md").read_text()
    assert "--extra-index-url" in notes and "/cu128" in notes


def run_ci(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("GITHUB_SHA", None)
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_release_without_a_mode_says_which_to_pick() -> None:
    result = run_ci("release")
    assert result.returncode == 2
    assert result.stdout.strip().splitlines()[-1].startswith("error: no release mode given")


def test_import_test_needs_a_target(tmp_path: Path) -> None:
    result = run_ci("release", "--import-test", str(tmp_path))
    assert result.returncode == 2 and "--target" in result.stdout
