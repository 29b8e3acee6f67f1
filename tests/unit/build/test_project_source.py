"""ci/build/project_source.py: the one git_commit (the build-env placeholder and the release manifest agree)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ci.build import project_source


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_git_commit_clean_dirty_and_outside_git(tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    assert project_source.git_commit(outside) is None
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "setup.py").write_text("pass\n")
    _git(repo, "add", "setup.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    sha = _git(repo, "rev-parse", "HEAD")
    assert project_source.git_commit(repo) == sha
    (repo / "untracked.txt").write_text("not part of the commit's files\n")
    assert project_source.git_commit(repo) == sha
    (repo / "setup.py").write_text("pass  # changed\n")
    assert project_source.git_commit(repo) == f"{sha}-dirty"
