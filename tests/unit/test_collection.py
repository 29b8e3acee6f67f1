"""Every pytest run of the farm's test sessions collects (ci/toolenv.py PYTEST_RUNS, which noxfile.py runs).

``nox -s tests`` runs its parts apart, so a collection error that only a run over every folder meets (two test files
of one basename: pytest's default import mode imports each as a top-level module of that name and refuses the
second) would stop ``nox -s tests-extended`` and never show in CI. ``pytest --collect-only`` imports every test
module of a run without running a test: a few seconds each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci import toolenv

ROOT = Path(__file__).resolve().parents[2]
RUNS = [(session, run) for session, runs in toolenv.PYTEST_RUNS.items() for run in runs]


def collect(paths: tuple[str, ...], markers: str) -> subprocess.CompletedProcess[str]:
    """``pytest --collect-only`` of one run, from the checkout's root as nox runs it."""
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", markers, *paths], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"}, timeout=300)


@pytest.mark.parametrize(("session", "run"), RUNS, ids=[f"{s}-{i}" for s, r in toolenv.PYTEST_RUNS.items()
                                                         for i in range(len(r))])
def test_every_session_run_collects(session: str, run: toolenv.PytestRun) -> None:
    result = collect(run.paths, run.markers)
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    # 0: collected, no error; 5 would be a run that selects nothing, 2 an error during collection.
    assert result.returncode == 0, f"nox -s {session}: pytest {' '.join(run.paths)} -m {run.markers!r}:\n" \
                                   f"{result.stdout[-6000:]}"
    assert " collected" in last and "error" not in last, last


def test_test_files_have_unique_basenames() -> None:
    """What the default import mode needs (rootdir-relative packages are not used: tests/ has no __init__.py): the
    run over every folder collects each file under its basename, so a second file of a name would be refused."""
    seen: dict[str, Path] = {}
    clashes = []
    for folder in ("tests", "package/tests"):
        for path in sorted((ROOT / folder).rglob("test_*.py")):
            if "fixtures" in path.relative_to(ROOT).parts:
                continue
            if path.name in seen:
                clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
            seen.setdefault(path.name, path)
    assert not clashes, "rename one of each pair (pytest's default import mode needs unique basenames): " + \
        "; ".join(clashes)
