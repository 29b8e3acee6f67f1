"""``python -m ci build-win`` and ``matrix --os windows`` end to end, as a user on Linux sees them (the in-process
tests: tests/unit/windows/test_win_cli.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.universe import matrix

ROOT = Path(__file__).resolve().parents[2]


def _farm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)


@pytest.mark.skipif(sys.platform == "win32", reason="the Linux behaviour")
@pytest.mark.parametrize("args", [(), ("--cuda", "13"), ("--cuda", "12"), ("--toolset", "14.44", "--cuda", "13.2")])
def test_build_win_exits_at_once_off_windows(args: tuple[str, ...]) -> None:
    result = _farm("build-win", *args)
    assert result.returncode == 3
    last = (result.stdout + result.stderr).strip().splitlines()[-1]
    assert last == ("error: Windows builds need a Windows host with Visual Studio (linux): run this on Windows "
                    "(or in the GitHub Actions release workflow)")


def test_matrix_shows_the_windows_facts() -> None:
    result = _farm("matrix", "--os", "windows", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    msvc = {t["cuda"]: t["msvc"] for t in data["targets"]}
    # fusedops has a Windows target in every cell but the local stand-ins, each with its cell's facts.
    assert msvc == {
        c.cuda: {"msc_ver": list(c.windows.msc_ver), "toolset": c.windows.toolset, "toolkit": c.windows.toolkit}
        for c in matrix.CELLS if c.windows is not None and not c.stand_in_for
    }
    assert msvc["13.0"] == {"msc_ver": [1920, 1950], "toolset": "14.44", "toolkit": "pypi"}
    table = _farm("matrix", "--os", "windows", "--wide")
    assert "1920-1949" in table.stdout and "MSVC 14.44" in table.stdout and "nvidia-installer" in table.stdout
