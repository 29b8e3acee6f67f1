"""Proof that every hash-pinned lock installs, from wheels only, on every CPython and platform it serves.

``uv pip compile --universal`` resolves versions for every platform, but does not ask whether a pinned release
*has a file* for each of them: a lock can pin a version that has no win_amd64 wheel (pip then builds the sdist,
and fails without a compiler) or none that installs on an older CPython (``Requires-Python``). This module asks
the index: for each lock and each (CPython, platform) of ``pins.served``, every pin whose environment marker
applies there must have a wheel on the index whose tags that interpreter accepts, whose ``Requires-Python``
admits it, and whose SHA-256 is one of the lock's hashes (what ``pip install --require-hashes`` checks).

Wheels only (``--only-binary :all:`` semantics): an sdist would be built on the machine, with whatever compiler it
has or lacks. ``SDIST_ALLOWED`` lists the exceptions (none today).

The index is the one pip installs from: ``PIP_INDEX_URL``, else pip's configured ``index-url``, else PyPI. pip's
``extra-index-url`` and ``find-links`` are not asked: they are this machine's, not the runners' (which install from
the index alone). Pages are read once per project (PEP 691 JSON, or a PEP 503 HTML page), in parallel.

The package: the judgement (:func:`why_not`, :func:`check`, :func:`require`) here; ``platforms`` the
(CPython, platform) pairs a lock serves, with the tags and marker values pip uses there; ``locks`` a lock's pins;
``pages`` the index's project pages and pip's own index settings.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from ci.errors import CommandFailed
from ci.universe import pins
from ci.universe.lockcheck.locks import Pin, read_lock
from ci.universe.lockcheck.pages import Index, IndexFile
from ci.universe.lockcheck.platforms import Environment, environments

#: Pins allowed to install from an sdist (name -> why): none; a tool that needs one must say why here.
SDIST_ALLOWED: Mapping[str, str] = {}


@dataclasses.dataclass(frozen=True)
class Problem:
    """A pin that does not install from a wheel in an environment its lock serves."""

    lock: str
    env: Environment
    pin: Pin
    why: str

    def __str__(self) -> str:
        return f"{self.lock}.txt: {self.pin} on {self.env}: {self.why}"


def why_not(pin: Pin, env: Environment, files: Sequence[IndexFile]) -> str | None:
    """None when one of ``files`` is a wheel of ``pin`` that installs in ``env`` with a hash the lock holds;
    otherwise why not."""
    accepted = env.tags()
    unhashed: list[str] = []
    sdists: list[IndexFile] = []
    for f in files:
        if not f.filename.endswith(".whl"):
            try:
                name, version = parse_sdist_filename(f.filename)
            except InvalidSdistFilename:
                continue
            if name == pin.name and version == pin.version and f.admits(env) and f.sha256 in pin.hashes:
                sdists.append(f)
            continue
        try:
            name, version, _, wheel_tags = parse_wheel_filename(f.filename)
        except InvalidWheelFilename:
            continue
        if name != pin.name or version != pin.version or not f.admits(env) or accepted.isdisjoint(wheel_tags):
            continue
        if f.sha256 in pin.hashes:
            return None
        unhashed.append(f.filename)
    if unhashed:
        return f"its wheel {unhashed[0]} installs here, but the lock lacks its hash: run `nox -s lock`"
    if sdists and pin.name in SDIST_ALLOWED:
        return None
    if sdists:
        return "no wheel installs here, only the sdist (pip would build it): pin another version, or add a marker"
    return "no file of it installs here: pin another version, or add a marker"


def check(names: Sequence[str] | None = None, index: Index | None = None,
          folder: Path = pins.REQUIREMENTS) -> list[Problem]:
    """Every pin of the locks ``names`` (all by default) that does not install from a wheel in an environment its
    lock serves; an empty list when every lock is good."""
    index = index or Index()
    locks = {name: read_lock(folder / f"{name}.txt") for name in (names or pins.all_locks())}
    index.prefetch(pin.name for found in locks.values() for pin in found)
    problems = []
    for name, found in locks.items():
        # The pinned release's files, found once: a page can list thousands (every numpy ever).
        releases = {pin: [f for f in index.files(pin.name) if _release_of(f.filename) == (pin.name, pin.version)]
                    for pin in found}
        for env in environments(name):
            for pin in found:
                if pin.applies(env):
                    why = why_not(pin, env, releases[pin])
                    if why:
                        problems.append(Problem(name, env, pin, why))
    return problems


@functools.cache
def _release_of(filename: str) -> tuple[NormalizedName, Version] | None:
    """(project, version) of a wheel or sdist file name; None for anything else."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[:2]
        return parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def require(names: Sequence[str] | None = None, index: Index | None = None) -> None:
    """``check``, raising with the problems listed when there are any."""
    problems = check(names, index)
    if problems:
        raise CommandFailed(f"{len(problems)} pins do not install from a wheel where their lock is used",
                            problems[0], "pin versions with wheels there, or mark Linux-only tools "
                            '(`; sys_platform == "linux"`) in the .in file, then run `nox -s lock`',
                            details="\n".join(map(str, problems)))
