"""The entry end to end: ``python -m ci`` run as a subprocess refuses a bare ``release`` with one line and prints
every setting with where it came from (``--show-settings``) on stderr, the results alone on stdout (the in-process
tests: tests/unit/commands/test_table.py, tests/unit/test_settings.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bare_release_still_refuses_with_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "ci", "release"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert result.returncode == 2
    assert result.stdout.strip().splitlines()[-1].startswith("error: no release mode given (python -m ci release)")


def test_show_settings_prints_each_value_and_where_it_came_from() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FARM_WHEELHOUSE": "/tmp/wh-from-env"}
    result = subprocess.run([sys.executable, "-m", "ci", "--show-settings", "matrix", "--json", "--arch-list", "9.0"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any(re.match(r"FARM_WHEELHOUSE += /tmp/wh-from-env \(env\)", line) for line in lines), lines
    assert any(re.match(r"TORCH_CUDA_ARCH_LIST += 9\.0 \(flag\)", line) for line in lines), lines
    assert any(re.match(r"FARM_BUILD_DIR += .* \(default\)", line) for line in lines), lines
    assert result.stdout.lstrip().startswith("{")  # the results stay alone on stdout
