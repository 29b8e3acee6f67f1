"""Every hash-pinned lock installs from wheels wherever it is used: asked of the real index (PyPI's metadata)."""

from __future__ import annotations

import pytest

from ci.universe import lockcheck, pins


@pytest.mark.parametrize("name", pins.all_locks())
def test_every_lock_installs_from_wheels_wherever_it_is_used(name: str, index: lockcheck.Index) -> None:
    problems = lockcheck.check([name], index)
    assert not problems, "\n".join(map(str, problems))
