"""The queue of compiles waiting for memory: each claims what it expects under a lock file, in a folder of claims
named by process id, and starts when its need fits what is free less what the running ones claimed but do not
hold yet."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .memory import available, gib
from .need import Need
from .processes import tree

LOCK = ".admission.lock"
CLAIMS = ".claims"
LOWERED = "cuda-ext-farm nvcc: {source}: runs alone with --threads {threads} ({need} expected, {free} free)"


def _alive(pid: int) -> bool:
    """POSIX's half of ci/fsutil.py's check (the wrapper loads this package by path where ``ci`` is not importable,
    and on Windows nothing is admitted)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def outstanding(claims: Path) -> tuple[int, int]:
    """How many compiles run (by their claims) and the bytes they claimed but do not hold yet."""
    running, owed = 0, 0
    for claim in claims.glob("*"):
        try:
            pid, need = int(claim.name), int(claim.read_text() or 0)
        except (ValueError, OSError):
            continue
        if not _alive(pid):
            claim.unlink(missing_ok=True)
            continue
        running += 1
        owed += max(0, need - tree(pid)[0])
    return running, owed


class Admitted(NamedTuple):
    threads: int | None  # lowered --threads (None: as asked)
    waited: float
    line: str = ""
    need: Need | None = None  # the need it was admitted with


def admit(claims: Path, need: Need, units: int, source: str, me: int, again: Callable[[], Need] | None = None
          ) -> Admitted:
    """Wait (holding the lock, so that the compiles behind queue) until ``need`` fits, then claim it for ``me``;
    an unknown need is asked ``again`` while it waits (the first compile measured gives the others' estimate)."""
    import fcntl

    claims.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(claims.parent / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        threads: int | None = None
        line = ""
        while True:
            running, owed = outstanding(claims)
            free = available()
            need = again() if need.bytes is None and again is not None else need
            if running == 0 or (need.bytes is not None and free is not None and need.bytes + owed <= free):
                break
            time.sleep(0.2)
        claim = need.bytes or 0
        if need.bytes is not None and free is not None and need.bytes > free and units > 1:
            threads = max(1, units * free // need.bytes)
            claim = need.bytes * threads // units
            line = LOWERED.format(source=source, threads=threads, need=gib(need.bytes), free=gib(free))
        # never built and nothing measured yet: claim all that is free, so the others wait for its measurement
        (claims / str(me)).write_text(str(claim if need.bytes is not None else (free or 0)))
    return Admitted(threads, time.monotonic() - started, line, need)
