"""A real memory limit for one command on this machine: a memory cgroup of its own, as ``docker run --memory`` makes
one for a container, without an image.

The cgroup is made below this process's own memory cgroup on cgroup v1 (``memory.limit_in_bytes``, and the same
for memory and swap together where swap accounting exists), at the top of the unified hierarchy on v2
(``memory.max``, ``memory.swap.max`` 0: a limit that swaps instead of killing would only be slow). The command
enters it through a shell that writes its own pid into ``cgroup.procs`` and then replaces itself with the command
(a replayable line, no code between fork and exec). Afterwards the kernel's figures are read: the peak
(``memory.max_usage_in_bytes`` on v1, ``memory.peak`` on v2) and how many processes its out-of-memory killer ended
(``oom_kill`` in ``memory.oom_control``, v1, or ``memory.events``, v2).

Making a cgroup needs write access to the hierarchy (root, or a delegated subtree): :func:`usable` says why not.
The memory tests and ``bench-builds --memory`` use it."""

from __future__ import annotations

import os
import shlex
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from ci.errors import FarmError

MOUNT = Path("/sys/fs/cgroup")


class Cgroup(NamedTuple):
    folder: Path
    version: str  # "v1" or "v2"

    def enter(self, cmd: list[str]) -> list[str]:
        """``cmd`` run inside this cgroup."""
        return ["sh", "-c", f'echo $$ > {shlex.quote(str(self.folder / "cgroup.procs"))} && exec "$@"', "sh", *cmd]

    def peak(self) -> int | None:
        name = "memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak"
        try:
            return int((self.folder / name).read_text().strip())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == "v1" else "memory.events"
        try:
            for line in (self.folder / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0


def _own_v1() -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return MOUNT / "memory" / path.lstrip("/")
    return None


def parent() -> Cgroup | None:
    """Where a memory cgroup of our own can be made (None: no memory controller here)."""
    own = _own_v1()
    if own is not None and (own / "memory.limit_in_bytes").exists():
        return Cgroup(own, "v1")
    try:
        if "memory" in (MOUNT / "cgroup.subtree_control").read_text().split():
            return Cgroup(MOUNT, "v2")
    except OSError:
        pass
    return None


def usable() -> str:
    """Empty when a limited cgroup can be made here, else why not."""
    found = parent()
    if found is None:
        return "no memory cgroup controller on this machine"
    if not os.access(found.folder, os.W_OK):
        return f"{found.folder} is not writable (run as root or delegate a cgroup subtree)"
    return ""


@contextmanager
def limited(limit: int, name: str = "farm") -> Iterator[Cgroup]:
    """A fresh memory cgroup limited to ``limit`` bytes (removed afterwards; what it still holds, page cache,
    goes to its parent)."""
    why = usable()
    found = parent()
    if why or found is None:
        raise FarmError("no memory cgroup can be made here", why, "run where the cgroup hierarchy is writable")
    folder = found.folder / f"{name}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        if found.version == "v1":
            (folder / "memory.limit_in_bytes").write_text(str(limit))
            if (folder / "memory.memsw.limit_in_bytes").exists():
                (folder / "memory.memsw.limit_in_bytes").write_text(str(limit))
        else:
            (folder / "memory.max").write_text(str(limit))
            if (folder / "memory.swap.max").exists():
                (folder / "memory.swap.max").write_text("0")
        yield Cgroup(folder, found.version)
    finally:
        try:
            folder.rmdir()
        except OSError:
            pass  # a process still in it (it ends with its command's tree); the folder goes with the machine
