"""A build that ran out of the machine: disk space, a disk quota, or memory (a compiler killed by signal 9 by the
kernel's out-of-memory killer, or out of memory under a limit). These come first whatever else the output says: a
full disk makes every later step fail in its own words (a wheel's zipfile write, a compiler's object), and an
out-of-memory kill reads like a compiler error. The advice carries the numbers: the folder and its free bytes, or
the parallel jobs and the machine's memory.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ci import settings
from ci.builds.failure.causes import Cause, Found
from ci.nvcc import admission
from ci.nvcc.admission import memory as available_memory

#: ENOSPC and EDQUOT in the words of the C library (Python's OSError, gcc, ld, ninja, zip).
NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded")
#: A compiler killed by signal 9 (the kernel's out-of-memory killer) or out of memory under a limit
#: (``ulimit -v``, a cgroup): nvcc (``'cicc' died due to signal 9``), gcc's driver (``Killed signal terminated
#: program cc1plus``), collect2 (``ld terminated with signal 9 [Killed]``), cc1plus itself (``out of memory
#: allocating``, ``virtual memory exhausted``), a C++ tool's ``std::bad_alloc``, and the shell's bare ``Killed`` for
#: a child killed by signal 9 (nvcc 13 runs cicc through one, and says only that).
NO_MEMORY = re.compile(r"died due to signal 9|Killed signal terminated program|terminated with signal 9|"
                       r"out of memory allocating \d+ bytes|virtual memory exhausted|"
                       r"terminate called after throwing an instance of 'std::bad_alloc'|"
                       r"\[Errno 12\] Cannot allocate memory|^Killed$", re.MULTILINE)
#: The parallel jobs a compile ran with: ninja's ``-j N`` (torch's CalledProcessError shows its command), cmake's
#: ``--parallel N``/``-j N``, make's ``-jN``.
JOBS = re.compile(r"""['"]?(?:-j|--parallel)['"]?,?\s*['"]?(\d+)\b""")
#: An absolute path in the line that says the disk is full (``error writing to /tmp/ccX.s``, ``: '/x/y'``).
PATH = re.compile(r"""(?:^|[\s'"(])((?:/|[A-Za-z]:\\)[^\s'":,)]+)""")


def _line_at(output: str, at: int) -> str:
    return output[output.rfind("\n", 0, at) + 1:].split("\n", 1)[0].strip()


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk(output: str, source: str, host_folder: Path | None) -> Found | None:
    """The disk filled up (or the quota): the folder written to (or the build's own) and its free bytes now."""
    match = NO_SPACE.search(output)
    if match is None:
        return None
    start = output.rfind("\n", 0, match.start()) + 1
    raw = output[start:].split("\n", 1)[0]
    line, cut = raw.strip(), match.start() - start  # cut: where the message starts on its line
    after, before = PATH.findall(raw[cut:]), PATH.findall(raw[:cut])
    if before and raw.lstrip().startswith(before[0] + ":"):
        before = before[1:]  # the tool that speaks (``/usr/bin/ld: final link failed``), not a file it wrote
    # Python names the file after the message (``No space left on device: '/x'``), gas and gcc before it.
    written = after[0] if after else before[-1] if before else None
    prefix = source.rstrip("/") + "/" if source else None
    in_container = host_folder is not None and bool(source) and Path(source) != host_folder
    folder = host_folder
    if written is not None and prefix and written.startswith(prefix) and host_folder is not None:
        folder = host_folder / written[len(prefix):]  # the build's copy (a container's /project/...) here
    elif written is not None and not in_container:
        folder = Path(written)  # a host build's paths are this machine's
    measured = _existing(folder) if folder is not None else None
    try:
        free = shutil.disk_usage(measured).free if measured is not None else None
    except OSError:
        free = None
    where = f"; {measured} has {free} bytes free ({_gib(free)}) now" if measured is not None and free is not None \
        else ""
    quota = "Disk quota" in match.group(0)
    return Found(match.start(), Cause(
        "the build ran out of disk space" + (" (its disk quota)" if quota else ""), f"{line[:200]}{where}",
        "free space there and build again, or build elsewhere: --build-dir (the build's folders) and FARM_CACHE_DIR "
        "(the farm's toolkits and environments) move what the build writes; a container build also writes to "
        "Docker's storage (docker system df)"))


def memory(output: str, *, jobs: int | None = None, total: int | None = None) -> Found | None:
    """A compiler was killed for memory: the jobs the compile ran in parallel (read from the output, else the
    farm's default, one per CPU) and the machine's memory, with fewer jobs as the fix."""
    match = NO_MEMORY.search(output)
    if match is None:
        return None
    line = _line_at(output, match.start())
    counts = [int(n) for n in JOBS.findall(output) if int(n) > 0]
    jobs = jobs or (counts[-1] if counts else os.cpu_count() or 1)
    total = total if total is not None else _memory()
    fewer = max(1, jobs // 2)
    machine = f" on {_gib(total)} of memory" if total else ""
    return Found(match.start(), Cause(
        "a compiler ran out of memory (killed by signal 9, the kernel's out-of-memory killer, or stopped at a "
        "memory limit)", f"{line[:200]}; {jobs} parallel compile jobs{machine}",
        f"build with fewer parallel jobs: --max-jobs {fewer} (MAX_JOBS={fewer}); one nvcc job can take several "
        "GiB, or give the machine more memory" + (
            f"; or let the farm admit compiles by memory ({admission.SWITCH} is off)"
            if (settings.current().get(admission.SWITCH) or "").strip().lower() == "off" else "")))


def _memory() -> int | None:
    """This machine's memory in bytes (a container build shares it), or the cgroup's limit where it is lower."""
    try:
        total: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - Windows has no sysconf
        total = None
    limit = available_memory.cgroup_limit()
    return limit if limit is not None and (total is None or limit < total) else total
