"""The farm's own tool environments: one venv per hash-pinned lock in ``ci/requirements/`` and interpreter.

The nox sessions and the installable ``cuda-ext-farm`` command both run ``python -m ci`` in the environment
made from ``ci/requirements/farm.txt``, so the farm's pins never mix with the user's environment (nor the
project's): the command's own distribution needs only ``packaging``; everything else comes from the lock,
installed with ``--require-hashes --no-deps`` into a venv under the cache folder, made once under a lock and
marked complete last.

Standard library only: this runs before any environment exists.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

REQUIREMENTS = Path(__file__).resolve().parent / "requirements"
COMPLETE_MARKER = ".farm-complete"
#: What ``nox -s lint`` and the CI workflow's lint job run with the lint lock's interpreter, by name: one list, so
#: CI lints what nox lints (ruff over every Python folder, mypy --strict over the farm, the floor plan).
LINT_COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ruff", ("-m", "ruff", "check", "ci", "windows", "noxfile.py", "tests", "setup.py", "package", "farm")),
    ("mypy (strict)", ("-m", "mypy", "ci", "windows")),
    ("the floor plan (floors, cycles, re-exports, sizes)", ("tests/structure.py", "--check")),
)


class PytestRun(NamedTuple):
    """One pytest run of a test session: its folders (none: pyproject's ``testpaths``, every test) and markers."""

    paths: tuple[str, ...]
    markers: str


#: The pytest runs of the farm's test sessions (noxfile.py), by session: one table, so that a test can check that
#: every run collects (tests/unit/test_collection.py); a collection error, such as two test files of one basename in
#: one run, stops a whole run before its first test.
PYTEST_RUNS: Mapping[str, tuple[PytestRun, ...]] = {
    # The fast tests first: a broken unit test shows in minutes, not after the integration tests' builds.
    "tests": (PytestRun(("tests/unit", "package/tests"), "not docker and not extended"),
              PytestRun(("tests/integration",), "not docker and not extended")),
    "tests-extended": (PytestRun((), "docker or extended"),),
    "compat": (PytestRun(("package/tests/ops",), "not cuda and not extended"),),
}


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """Where toolkits, environments and tools are kept: ``$FARM_CACHE_DIR`` or the user cache folder."""
    env = os.environ if env is None else env
    if env.get("FARM_CACHE_DIR", "").strip():
        return Path(env["FARM_CACHE_DIR"].strip()).expanduser()
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "cuda-ext-farm"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created), held for the ``with`` block; released when the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        if sys.platform == "win32":  # pragma: no cover
            import msvcrt

            msvcrt.locking(fh.fileno(), msvcrt.LK_LOCK, 1)
        else:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def env_root(lock: str = "farm") -> Path:
    """The folder of ``lock``'s environment for this interpreter (keyed by the lock's bytes and the version)."""
    requirements = REQUIREMENTS / f"{lock}.txt"
    key = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()[:12]
    return cache_root() / "envs" / f"farm-{lock}-py{sys.version_info[0]}.{sys.version_info[1]}-{key}"


def _log(argv: list[str]) -> None:
    print("$ " + shlex.join(argv), file=sys.stderr, flush=True)


def farm_python(lock: str = "farm") -> Path:
    """The interpreter of ``lock``'s tool environment, installed on first use (hash-pinned, no dependencies
    resolved: the lock is complete)."""
    root = env_root(lock)
    python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    with file_lock(root.with_name(root.name + ".lock")):
        if not (root / COMPLETE_MARKER).is_file():
            print(f"installing the farm's tools ({lock}.txt) into {root}", file=sys.stderr, flush=True)
            create = [sys.executable, "-m", "venv", "--clear", str(root)]
            _log(create)
            subprocess.run(create, check=True)
            install = [str(python), "-m", "pip", "install", "--quiet", "--require-hashes", "--no-deps",
                       "-r", str(REQUIREMENTS / f"{lock}.txt")]
            _log(install)
            # A machine-wide pip constraint (a torch cap, say) is the user's, not the farm's lock's.
            subprocess.run(install, check=True,
                           env={**os.environ, "PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
            (root / COMPLETE_MARKER).write_text(f"{lock}.txt\n")
    return python
