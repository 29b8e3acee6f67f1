"""``coverage`` and ``build-all --missing`` end to end: ``python -m ci`` over a wheelhouse, as a user runs them
(the in-process tests: tests/unit/release/test_coverage.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.release.test_coverage import CLASSIC, ROOT, _linux_targets, _wheel_name


def _farm(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def test_coverage_command_prints_json_and_refuses_bad_folders(tmp_path: Path) -> None:
    chosen = _linux_targets(CLASSIC)
    (tmp_path / chosen[0].id).mkdir()
    (tmp_path / chosen[0].id / _wheel_name(chosen[0])).write_bytes(b"")
    done = _farm("coverage", str(tmp_path), "--os", "linux", "--json", cwd=CLASSIC)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert list(data["present"]) == [chosen[0].id] and len(data["missing"]) == len(chosen) - 1
    (tmp_path / "stray.txt").write_text("x")
    bad = tmp_path / "plain"
    bad.mkdir()
    (bad / "readme.txt").write_text("x")
    (bad / "sub").mkdir()
    refused = _farm("coverage", str(bad), cwd=CLASSIC)
    assert refused.returncode != 0 and "PEP 503" in _last_line(refused)
    unknown = _farm("coverage", str(tmp_path), "--target", "no-such-target", cwd=CLASSIC)
    assert unknown.returncode != 0 and "no-such-target" in _last_line(unknown)


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stdout + done.stderr).strip().splitlines()[-1]


def test_build_all_missing_with_nothing_missing_builds_nothing(tmp_path: Path) -> None:
    chosen = _linux_targets(CLASSIC)
    for target in chosen:
        (tmp_path / target.id).mkdir()
        (tmp_path / target.id / _wheel_name(target)).write_bytes(b"")
    done = _farm("build-all", "--missing", "--wheelhouse", str(tmp_path), cwd=CLASSIC)
    assert done.returncode == 0, done.stderr
    assert "nothing to build" in done.stdout
