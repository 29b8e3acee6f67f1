"""What the source alone refuses comes before any download or environment (ci/builds/preflight.py), run as a user
runs it: ``python -m ci build`` from a clone of a project without ``--recursive``, with an empty FARM_CACHE_DIR (a
cold cache). The refusal names the submodule and where the build uses it, and nothing is created in the cache
folder, so no toolkit, torch environment or build folder was made first. The time is printed, never asserted
(`pytest -s` shows it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "submodule_headers"
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> None:
    done = subprocess.run(["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
                          cwd=cwd, env=GIT_ENV, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """submodule_headers with its header library added as a submodule at third_party/ringmath, cloned without
    --recursive."""
    import shutil

    library = tmp_path / "ringmath"
    (library / "include" / "ringmath").mkdir(parents=True)
    (library / "include" / "ringmath" / "ringmath.hpp").write_text("#pragma once\n")
    git(library, "init", "-q")
    git(library, "add", ".")
    git(library, "commit", "-qm", "ringmath")
    project = tmp_path / "submodule_headers"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "submodule", "add", "-q", str(library), "third_party/ringmath")
    git(project, "commit", "-qm", "the project, ringmath as a submodule")
    cloned = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(cloned))
    return cloned


@pytest.mark.parametrize("args", [(), ("--cpu",)], ids=["cuda", "cpu"])
def test_an_empty_submodule_is_refused_before_anything_is_made_on_a_cold_cache(clone: Path, tmp_path: Path,
                                                                               args: tuple[str, ...]) -> None:
    cache = tmp_path / f"cache{len(args)}"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "NOX_"))}
    env |= {"FARM_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), "COLUMNS": "250"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ci", "build", "--python", "3.11", *args], cwd=clone, env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    print(f"\nthe submodule refusal ({' '.join(args) or 'CUDA'} build, empty FARM_CACHE_DIR) took {seconds:.2f} s")
    assert done.returncode == 2, done.stdout[-3000:]
    assert done.stdout.strip().splitlines()[-1] == (
        "error: a git submodule the build uses is not checked out (its folder is empty) (third_party/ringmath, named "
        "in setup.py line 10): run `git submodule update --init --recursive` in the project's folder, then build "
        "again")
    assert sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) == []  # nothing made, not a folder
    assert not (clone / "wheelhouse").exists()
