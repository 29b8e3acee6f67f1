"""Two clean host builds of one commit, from clones in different paths (one with a space and non-ASCII
characters), give byte-identical wheels: the cheapest of `nox -s reproduce`'s checks (one architecture)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.extended]


def test_host_build_is_byte_identical_from_two_clones() -> None:
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("the checkout is not a git repository")
    result = subprocess.run([sys.executable, "-m", "ci", "reproduce", "--arch-list", "9.0+PTX"], cwd=ROOT, text=True,
                            env={**os.environ, "COLUMNS": "250", "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout[-5000:]
    shas = [line.split("sha256 ")[1].split()[0] for line in result.stdout.splitlines()
            if line.startswith(("first:", "second:"))]
    assert len(shas) == 2 and shas[0] == shas[1] and len(shas[0]) == 64
    assert "reproducible: both builds of" in result.stdout
