"""What a real wheel says about itself, checked against real pip and torch's own wheels on PyPI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.audit import describe
from ci.universe import matrix


@pytest.mark.wheel
@pytest.mark.slow
def test_pip_refuses_the_wheel_below_its_floor(built_wheel: Path) -> None:
    """Resolution only: pip refuses the wheel one release below its floor. The index this runs against serves no PEP 658
    metadata files, so a plain resolve downloads torch (900 MB; pip 23 also its CUDA libraries, 3 GB, which filled
    CI's disk at stop 36): pip's fast-deps reads each wheel's METADATA by range requests instead (about 2 MB).
    The other half, the install and smoke test at the floor, downloads torch 2.10 and its CUDA libraries (3 GB) and is
    `nox -s compat-floor`."""
    at, below = describe.floor_releases(built_wheel)
    assert (at, below) == ("2.10.0", "2.9.1")

    def dry_run(torch: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pip", "install", "--use-feature=fast-deps", "--dry-run",
                               "--ignore-installed", str(built_wheel), f"torch=={torch}"],
                              capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PIP_CONSTRAINT": "/dev/null",
                                   "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": str(Path.home())})

    refused = dry_run(below)
    assert refused.returncode != 0 and "ResolutionImpossible" in refused.stdout + refused.stderr
    assert "depends on torch>=2.10" in refused.stdout + refused.stderr


@pytest.mark.slow
def test_the_recorded_architectures_are_torchs_own() -> None:
    """One release read from PyPI by range requests (about 10 MB of a 900 MB wheel); `nox -s torch-archs` reads all."""
    from ci.universe import torch_archs

    read = torch_archs.read_archs("2.11.0", "aarch64")
    assert read.sass == matrix.get_torch("2.11").archs_for("aarch64") == ("8.0", "9.0", "10.0", "11.0", "12.0")
    assert read.fetched < 64 * 2**20
