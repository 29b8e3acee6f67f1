"""How many compiles run at once (``MAX_JOBS``) and with how many nvcc ``--threads`` each, chosen from the cores,
the memory a compile can get (``ci/nvcc/admission/``: the cgroup's limit less its use, or ``MemAvailable``) and
the project's records, stated in one line at the start of the build; with the admission off
(``FARM_COMPILE_ADMISSION=off``) the naive settings: a job per core (or ``MAX_JOBS``), nvcc's own ``--threads``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ci import settings
from ci.builds.progress import records
from ci.errors import UsageError
from ci.nvcc.admission import SWITCH, THREADS, need
from ci.nvcc.admission.memory import gib
from ci.nvcc.admission.need import parallel


class Plan(NamedTuple):
    jobs: int
    threads: int | None  # None: the farm's flags' own (--threads 0: every architecture of a file at once)
    line: str
    warning: str = ""


def choose(cores: int, free: int | None, per_unit: float | None, archs: int, user_jobs: int | None,
           host: float | None = None) -> Plan:
    """The plan for ``cores`` and ``free`` bytes, given the largest recorded peak per parallel architecture
    (``per_unit``; None: never built) of compiles of ``archs`` architectures and of a host compile (``host``: the
    C++ sources, which run beside the CUDA ones); ``user_jobs`` (MAX_JOBS) wins."""
    room = gib(free) if free is not None else "memory unknown"
    if per_unit is None or free is None:
        jobs = user_jobs or cores
        return Plan(jobs, None, f"{jobs} jobs x --threads 0: {room} available, nothing recorded yet (the first "
                                "compile runs alone and is measured; the others are expected from it)")
    full = max(per_unit * parallel(archs, 0, cores), host or 0.0)
    if user_jobs:
        warning = (f"MAX_JOBS={user_jobs} asks for {user_jobs} compiles at once, {gib(full)} each expected "
                   f"(recorded), {room} available: compiles wait for memory (or lower MAX_JOBS)"
                   if user_jobs * full > free else "")
        return Plan(user_jobs, None, f"{user_jobs} jobs (MAX_JOBS) x --threads 0: {room} available, "
                                     f"{gib(full)} per compile expected (recorded)", warning)
    if cores * full <= free:
        return Plan(cores, None, f"{cores} jobs x --threads 0: {room} available, {gib(full)} per compile "
                                 "expected (recorded)")
    whole = int(free // full)
    if whole and whole * parallel(archs, 0, cores) >= cores:
        # Fewer compiles at --threads 0 keep the cores as busy as more with fewer --threads (each runs as many
        # architectures at once as the machine has CPUs), and each compile's front end (preprocessing, cudafe++, the
        # host compile) is held once instead of once per compile.
        jobs = min(cores, whole)
        return Plan(jobs, None, f"{jobs} jobs x --threads 0: {room} available, {gib(full)} per compile expected "
                                "(recorded)")
    units = max(1, int(free // per_unit))
    jobs = max(1, min(cores, units, int(free // host) if host else cores))
    threads = max(1, min(max(archs, 1), units // jobs))
    each = max(per_unit * parallel(archs, threads, cores), host or 0.0)
    return Plan(jobs, threads, f"{jobs} jobs x --threads {threads}: {room} available, {gib(each)} per compile "
                               "expected (recorded)")


def enabled() -> bool:
    """Whether compiles are admitted by memory (``FARM_COMPILE_ADMISSION``: ``on``, the default, or ``off``)."""
    given = (settings.current().get(SWITCH) or "on").strip().lower()
    if given not in ("on", "off"):
        raise UsageError(f"{SWITCH} is neither on nor off", repr(given), "give on (the default) or off")
    return given == "on"


def env(plan: Plan) -> dict[str, str]:
    """The build's variables for ``plan``: ``MAX_JOBS``, the wrapper's ``--threads`` and its switch."""
    return {"MAX_JOBS": str(plan.jobs), **({THREADS: str(plan.threads)} if plan.threads else {}),
            **({} if enabled() else {SWITCH: "off"})}


def for_project(project: str, archs: int, cores: int, free: int | None, user_jobs: int | None,
                cache: Any = None) -> Plan:
    if not enabled():
        jobs = user_jobs or cores
        return Plan(jobs, None, f"{jobs} jobs x --threads 0: {gib(free) if free is not None else 'memory unknown'} "
                                f"available, not admitted by memory ({SWITCH}=off)")
    sources: Mapping[str, Any] = records.load(project, cache)
    return choose(cores, free, records.unit_peak(sources, cores), archs, user_jobs,
                  records.unit_peak(sources, cores, need.HOST))
