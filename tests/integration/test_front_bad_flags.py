"""An unbalanced double quote in NVCC_APPEND_FLAGS (the caller's shell or the project's build-env) is one error
line before anything compiles, naming the variable, where it came from, its value and the fix; never a traceback
from the nvcc wrapper in the middle of the build's output (issue 45, item 11)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_fixture_projects import copy_fixture

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("whose", ["caller", "build-env"])
def test_an_unbalanced_quote_is_one_error_line(tmp_path: Path, whose: str) -> None:
    project = copy_fixture("hardcoded_gencode", tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"}
    if whose == "caller":
        env["NVCC_APPEND_FLAGS"] = '-DA="x'
    else:
        pyproject = project / "pyproject.toml"
        pyproject.write_text(pyproject.read_text() + "build-env = { NVCC_APPEND_FLAGS = '-DA=\"x' }\n")
    done = subprocess.run([sys.executable, "-m", "ci", "build", "--arch-list", "9.0", "--wheelhouse",
                           str(tmp_path / "w"), "--build-dir", str(tmp_path / "b")], cwd=project, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert done.returncode == 2 and "Traceback" not in done.stdout, done.stdout[-3000:]
    errors = [line for line in done.stdout.splitlines() if line.startswith("error: ")]
    whose_words = "your environment's" if whose == "caller" else "build-env's in [tool.cuda-ext-farm]"
    assert errors == [f"error: NVCC_APPEND_FLAGS ({whose_words}) has an unbalanced double quote (-DA=\"x): close the "
                      'quote, or write a flag with spaces in one pair of quotes (-Xcompiler="-O2 -g"): nvcc splits '
                      "NVCC_APPEND_FLAGS at spaces outside double quotes"]
    assert not (tmp_path / "b").exists() or not list((tmp_path / "b").glob("*/src/build"))  # nothing compiled
