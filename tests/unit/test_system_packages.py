"""The system packages the tests use, in one list (``.ci/system-packages``): ``.ci/run`` installs the default suite's,
``.ci/run extended`` and the extended-tests workflow the extended suite's, and ``nox -s tests-extended`` names the
missing ones. A test that skips for a missing program names the package (``apt-get install X`` in its reason, or
``cache_servers.require(program, package)``): each of those is in the list, so a fresh machine that ran the script
skips none of them for want of a package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "system-packages"
BASH = shutil.which("bash")
PACKAGE = r"[a-z0-9][a-z0-9.+-]*"
#: How a test says which package it misses.
ASKS = (re.compile(rf"apt-get install ({PACKAGE}(?: {PACKAGE})*)"), re.compile(rf'require\("[^"]+", "({PACKAGE})"\)'))

pytestmark = pytest.mark.skipif(BASH is None or os.name == "nt", reason="the script is bash, for Debian and Ubuntu")


def script(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path} if path is not None else None
    return subprocess.run([str(BASH), str(SCRIPT), *args], text=True, capture_output=True, env=env, timeout=60)


def listed(part: str) -> list[str]:
    result = script(part, "--list")
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def asked_for() -> dict[str, str]:
    """package -> the test file whose skip names it."""
    found: dict[str, str] = {}
    for folder in ("tests", "package/tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "fixtures" in path.relative_to(ROOT).parts:
                continue
            text = path.read_text(encoding="utf-8")
            for pattern in ASKS:
                for match in pattern.finditer(text):
                    for package in match.group(1).split():
                        found.setdefault(package, str(path.relative_to(ROOT)))
    return found


def test_every_package_a_test_skips_without_is_installed_for_the_extended_suite() -> None:
    asked = asked_for()
    assert {"bubblewrap", "qemu-user-static", "redis-server"} <= set(asked)  # the patterns still find the reasons
    extended = set(listed("extended"))
    missing = {package: where for package, where in asked.items() if package not in extended}
    assert not missing, f"add these to .ci/system-packages (the part whose tests need them): {missing}"
    ci = listed("ci")
    assert set(ci) < extended and len(ci) == len(set(ci))


def test_missing_packages_are_found_by_their_programs(tmp_path: Path) -> None:
    """With nothing on PATH the programs the extended part adds are missing; a ``bwrap`` on PATH is bubblewrap."""
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = script("extended", "--missing", path=str(empty))
    assert missing.returncode == 0, missing.stderr
    assert {"bubblewrap", "qemu-user-static", "shellcheck"} <= set(missing.stdout.split())
    ci_only = script("ci", "--missing", path=str(empty))
    assert "shellcheck" in ci_only.stdout.split() and "bubblewrap" not in ci_only.stdout.split()
    found = tmp_path / "bin"
    found.mkdir()
    (found / "bwrap").write_text("#!/bin/sh\n")
    (found / "bwrap").chmod(0o755)
    assert "bubblewrap" not in script("extended", "--missing", path=str(found)).stdout.split()


def test_a_bad_argument_is_one_error_line() -> None:
    result = script("everything")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: .ci/system-packages takes [ci|extended] [--missing|--list] (everything): pass one of those"]
