"""Every hash-pinned lock installs from wheels wherever it is used: asked of the real index (PyPI's metadata)."""

from __future__ import annotations

import pytest

from ci.universe import lockcheck, pins
from ci.universe.lockcheck import locks, pages


@pytest.fixture(scope="module")
def index() -> pages.Index:
    """The index pip installs from, each project's page fetched once for the whole module."""
    found = pages.Index()
    found.prefetch(p.name for name in pins.all_locks() for p in locks.read_lock(pins.lock_path(name)))
    return found


@pytest.mark.parametrize("name", pins.all_locks())
def test_every_lock_installs_from_wheels_wherever_it_is_used(name: str, index: pages.Index) -> None:
    problems = lockcheck.check([name], index)
    assert not problems, "\n".join(map(str, problems))
