"""The entry end to end: ``python -m ci`` run as a subprocess refuses a bare ``release`` with one line on stderr
(stdout holds only results), and prints every setting with where it came from (``--show-settings``: the result it
was asked for, on stdout; the command does not run), or with ``FARM_DEBUG=1`` on stderr before the command's own
results (the in-process tests: tests/unit/commands/test_table.py, tests/unit/test_settings.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bare_release_still_refuses_with_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "ci", "release"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip().splitlines()[-1].startswith("error: no release mode given (python -m ci release)")


@pytest.mark.parametrize("how", ["--show-settings", "FARM_DEBUG"])
def test_show_settings_prints_each_value_and_where_it_came_from(how: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FARM_WHEELHOUSE": "/tmp/wh-from-env",
           **({"FARM_DEBUG": "1"} if how == "FARM_DEBUG" else {})}
    flag = ["--show-settings"] if how == "--show-settings" else []
    result = subprocess.run([sys.executable, "-m", "ci", *flag, "matrix", "--json", "--arch-list", "9.0"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = (result.stdout if flag else result.stderr).splitlines()
    assert any(re.match(r"FARM_WHEELHOUSE += /tmp/wh-from-env \(env\)", line) for line in lines), lines
    assert any(re.match(r"TORCH_CUDA_ARCH_LIST += 9\.0 \(flag\)", line) for line in lines), lines
    assert any(re.match(r"FARM_BUILD_DIR += .* \(default\)", line) for line in lines), lines
    if flag:  # printed instead of running the command
        assert "{" not in result.stdout and "FARM_WHEELHOUSE" not in result.stderr
    else:  # printed as progress: the command's results stay alone on stdout
        assert result.stdout.lstrip().startswith("{")
