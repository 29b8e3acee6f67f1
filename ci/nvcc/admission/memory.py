"""What a new compile can get, from the kernel: the tightest memory cgroup above this process (v2
``memory.max - memory.current`` or v1 ``memory.limit_in_bytes - memory.usage_in_bytes``, each less the reclaimable
page cache) and the machine's ``MemAvailable``."""

from __future__ import annotations

from pathlib import Path


def gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("max", "") else int(text)


def _inactive_file(folder: Path, key: str) -> int:
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_folders(cgroup_file: Path, mount: Path) -> list[tuple[Path, str]]:
    """The memory cgroup folders of this process and their ancestors (a limit anywhere above applies), each with
    its version: ``v2`` or ``v1``."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[Path, str]] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        version, base = (("v2", mount) if controllers == "" and not (mount / "memory").is_dir() else
                         ("v1", mount / "memory") if "memory" in controllers.split(",") else ("", mount))
        if not version:
            continue
        parts = [p for p in path.split("/") if p]
        candidates = [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
        found += [(c, version) for c in candidates if c.is_dir()]
    return found


def cgroup_free(cgroup_file: Path = Path("/proc/self/cgroup"), mount: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What the tightest memory cgroup above this process can still give (None: no limit)."""
    free: int | None = None
    for folder, version in _cgroup_folders(cgroup_file, mount):
        names = ("memory.max", "memory.current", "inactive_file") if version == "v2" else (
            "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        limit, usage = _read_int(folder / names[0]), _read_int(folder / names[1])
        if limit is None or usage is None or limit >= 2**60:
            continue
        left = limit - max(0, usage - _inactive_file(folder, names[2]))
        free = left if free is None else min(free, left)
    return free


def cgroup_limit(cgroup_file: Path = Path("/proc/self/cgroup"), mount: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The tightest memory limit of the cgroups above this process (None: none)."""
    known = [v for folder, version in _cgroup_folders(cgroup_file, mount)
             if (v := _read_int(folder / ("memory.max" if version == "v2" else "memory.limit_in_bytes"))) is not None
             and v < 2**60]
    return min(known) if known else None


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available() -> int | None:
    """Bytes a new compile can get now: the tightest of the cgroup's and the machine's (None: unknown)."""
    known = [v for v in (cgroup_free(), mem_available()) if v is not None]
    return max(0, min(known)) if known else None
