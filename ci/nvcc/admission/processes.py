"""A compile's process tree: run as the wrapper's child and measured from ``/proc`` (the sum of its processes'
``VmRSS``) and ``getrusage`` (its largest single process)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

POLL = 0.05
#: The compilers whose presence in the tree means the compile ran (not a compile-cache hit).
COMPILERS = ("cicc", "ptxas", "cc1plus", "cudafe++")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def _status(pid: int) -> tuple[str, int]:
    """A process's name and resident bytes (0 when it is gone)."""
    name, rss = "", 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Name:"):
                    name = line.split(None, 1)[1].strip()
                elif line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return name, rss


def tree(pid: int) -> tuple[int, set[str]]:
    """The resident bytes of ``pid`` and all its descendants together, and their names."""
    total, names, todo = 0, set(), [pid]
    while todo:
        current = todo.pop()
        name, rss = _status(current)
        total += rss
        names.add(name)
        todo += _children(current)
    return total, names


class Measured(NamedTuple):
    returncode: int
    seconds: float
    peak: int
    compiled: bool


def measure(command: Sequence[str], env: Mapping[str, str]) -> Measured:
    """Run ``command`` as a child (ninja's interrupt reaches it in this process group; a SIGTERM to this process is
    passed on) and measure its tree."""
    import resource

    prefer_killed()
    started = time.monotonic()
    child = subprocess.Popen(list(command), env=dict(env))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child gets ninja's SIGINT itself
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    peak, names = 0, set[str]()
    try:
        while True:
            try:
                code = child.wait(timeout=POLL)
                break
            except subprocess.TimeoutExpired:
                rss, seen = tree(child.pid)
                peak, names = max(peak, rss), names | seen
    finally:
        signal.signal(signal.SIGINT, previous)
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return Measured(code, time.monotonic() - started, max(peak, largest), bool(names & set(COMPILERS)))


def prefer_killed() -> None:
    """Out of memory, the kernel should end a compile (nvcc names it) rather than the build's Python holding torch
    (often the largest process; ending it says nothing): raise this wrapper's ``oom_score_adj``, and its child's."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("500")


def measure_plain(command: Sequence[str], env: Mapping[str, str]) -> Measured:
    started = time.monotonic()
    return Measured(subprocess.call(list(command), env=dict(env)), time.monotonic() - started, 0, True)
