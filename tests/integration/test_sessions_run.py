"""Every nox session that CI does not run itself works on a fresh copy of the checkout (a subprocess per session)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_sessions import FULL, INSTALL_ONLY, ROOT, RUN_BY_CI, run_nox, table_sessions


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's tracked and unignored files, nothing built: what a fresh clone of this tree holds."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout to know which files a clone has")
    dest = tmp_path_factory.mktemp("fresh") / "farm clone"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           stdout=subprocess.PIPE, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.parametrize("session", sorted(table_sessions() - RUN_BY_CI))
def test_every_session_works_on_a_fresh_copy(session: str, fresh_copy: Path, tmp_path: Path) -> None:
    if session in FULL:
        args, code, expected = FULL[session]
        result = run_nox(fresh_copy, ["-s", session, *args], tmp_path)
    elif session in INSTALL_ONLY:
        code, expected = 0, f"Session {session} was successful"
        result = run_nox(fresh_copy, ["-s", session, "--install-only"], tmp_path)
    else:
        code = 0
        result = run_nox(fresh_copy, ["-s", session, "--", "--help"], tmp_path)
        expected = "usage: python -m ci "
    assert "Traceback" not in result.stdout, result.stdout[-3000:]
    assert result.returncode == code, result.stdout[-3000:]
    assert expected in result.stdout, result.stdout[-3000:]
    assert not (fresh_copy / "wheelhouse").exists() and not (fresh_copy / "build").exists()
