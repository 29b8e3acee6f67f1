"""How many compiles run at once (``MAX_JOBS``) and with how many nvcc ``--threads`` each, chosen from the cores,
the memory a compile can get (``ci/nvcc/admission.py``: the cgroup's limit less its use, or ``MemAvailable``) and
the project's records, stated in one line at the start of the build."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ci.builds.progress import records
from ci.nvcc.admission import gib, parallel


class Plan(NamedTuple):
    jobs: int
    threads: int | None  # None: the farm's flags' own (--threads 0: every architecture of a file at once)
    line: str
    warning: str = ""


def choose(cores: int, free: int | None, per_unit: float | None, archs: int, user_jobs: int | None) -> Plan:
    """The plan for ``cores`` and ``free`` bytes, given the largest recorded peak per parallel architecture
    (``per_unit``; None: never built) of compiles of ``archs`` architectures; ``user_jobs`` (MAX_JOBS) wins."""
    room = gib(free) if free is not None else "memory unknown"
    if per_unit is None or free is None:
        jobs = user_jobs or cores
        return Plan(jobs, None, f"{jobs} jobs x --threads 0: {room} available, nothing recorded yet (the first "
                                "compile runs alone and is measured; the others are expected from it)")
    full = per_unit * parallel(archs, 0)
    if user_jobs:
        warning = (f"MAX_JOBS={user_jobs} asks for {user_jobs} compiles at once, {gib(full)} each expected "
                   f"(recorded), {room} available: compiles wait for memory (or lower MAX_JOBS)"
                   if user_jobs * full > free else "")
        return Plan(user_jobs, None, f"{user_jobs} jobs (MAX_JOBS) x --threads 0: {room} available, "
                                     f"{gib(full)} per compile expected (recorded)", warning)
    if cores * full <= free:
        return Plan(cores, None, f"{cores} jobs x --threads 0: {room} available, {gib(full)} per compile "
                                 "expected (recorded)")
    units = max(1, int(free // per_unit))
    jobs = max(1, min(cores, units))
    threads = max(1, min(max(archs, 1), units // jobs))
    each = per_unit * parallel(archs, threads)
    return Plan(jobs, threads, f"{jobs} jobs x --threads {threads}: {room} available, {gib(each)} per compile "
                               "expected (recorded)")


def for_project(project: str, archs: int, cores: int, free: int | None, user_jobs: int | None,
                cache: Any = None) -> Plan:
    sources: Mapping[str, Any] = records.load(project, cache)
    return choose(cores, free, records.unit_peak(sources), archs, user_jobs)
