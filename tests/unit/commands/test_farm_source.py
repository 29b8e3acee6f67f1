"""Where the farm came from (ci/commands/farm_source.py): git's own files read without running git (a clone, a
worktree, packed refs, a detached HEAD), the origin's URL without credentials, and the record a distribution keeps.
The distribution built from a clone: tests/integration/test_installable.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ci.commands import farm_source

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="needs git")


def _git(*args: str, cwd: Path) -> str:
    assert GIT is not None
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run([GIT, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "farm"
    root.mkdir()
    _git("init", "--quiet", "--initial-branch", "main", cwd=root)
    (root / "f").write_text("x")
    _git("add", "f", cwd=root)
    _git("commit", "--quiet", "-m", "one", cwd=root)
    _git("remote", "add", "origin", "https://someone:ghp_secret@github.com/owner/the-farm.git", cwd=root)
    return root


def test_the_commit_and_a_public_origin_are_read_from_gits_files(repo: Path, tmp_path: Path) -> None:
    head = _git("rev-parse", "HEAD", cwd=repo)
    assert farm_source.git_metadata(repo) == ("https://github.com/owner/the-farm", head)
    _git("pack-refs", "--all", "--prune", cwd=repo)  # the branch only in packed-refs now
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert farm_source.git_metadata(repo)[1] == head
    worktree = tmp_path / "wt"
    _git("worktree", "add", "--quiet", "--detach", str(worktree), cwd=repo)  # a .git file, a detached HEAD
    assert (worktree / ".git").is_file()
    assert farm_source.git_metadata(worktree) == ("https://github.com/owner/the-farm", head)
    source = farm_source.current(worktree)
    assert (source.github, source.commit) == ("owner/the-farm", head)
    assert "ghp_secret" not in json.dumps(farm_source.record(worktree, "9.9"))


@pytest.mark.parametrize(("url", "public"), [
    ("git@github.com:owner/farm.git", "https://github.com/owner/farm"),
    ("ssh://git@github.com/owner/farm", "https://github.com/owner/farm"),
    ("https://x-access-token:abc@github.com/owner/farm.git/", "https://github.com/owner/farm"),
    ("https://user:pw@git.example.org/group/farm.git", "https://git.example.org/group/farm.git"),
    ("/srv/git/farm", None),
    ("../farm", None),
])
def test_an_origin_is_recorded_without_credentials_and_never_as_a_local_path(url: str, public: str | None) -> None:
    assert farm_source.public_url(url) == public


def test_outside_git_the_sdists_record_is_kept_and_else_the_commit_is_unknown(tmp_path: Path) -> None:
    assert farm_source.record(tmp_path, "1.2") == {"version": "1.2", "repository": None, "commit": None}
    assert farm_source.Source("1.2").describe() == "cuda-ext-farm 1.2 (commit unknown: built outside a git checkout)"
    kept = tmp_path / "ci" / "commands" / "farm_source.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"version": "1.1", "repository": "https://github.com/o/f", "commit": "a" * 40}))
    assert farm_source.record(tmp_path, "1.2") == {"version": "1.2", "repository": "https://github.com/o/f",
                                                   "commit": "a" * 40}
