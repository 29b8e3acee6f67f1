"""The compile front's admission, records and deadline on the container route, as on the host (ci/linux/host.py):
the nvcc wrapper in the container records each compile into a folder of the target's work folder mounted at
:data:`MOUNT`, expects the needs of earlier builds from the farm's cache (written there before the build), holds
each compile to the build's deadline, and runs with the ``MAX_JOBS`` and ``--threads`` chosen from the cores and
the memory the container can get (its ``--memory``, else the host's)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ci import settings
from ci.builds import arch_flags, report, tail
from ci.builds.progress import deadline as compile_deadline
from ci.builds.progress import plan as compile_plan
from ci.builds.progress import records as compile_records
from ci.builds.progress import watch as compile_watch
from ci.errors import FarmError, UsageError
from ci.log import log
from ci.nvcc import admission, host_front
from ci.nvcc.admission import memory, need
from ci.universe.targets import Target


class ContainerBuild(Protocol):
    """What of ci/linux/container.py's ``ContainerBuild`` this module reads (importing it would be a cycle)."""

    @property
    def target(self) -> Target: ...
    @property
    def outputs(self) -> tail.Outputs: ...
    @property
    def max_jobs(self) -> int | None: ...

#: Where the build container sees the record folder (read-write), and where cibuildwheel copies the project.
MOUNT = "/opt/farm-compiles"
PROJECT = "/project"


def folder(job: ContainerBuild) -> Path:
    return job.outputs.work_dir(job.target) / "compiles"


def memory_limit(create_args: Sequence[str]) -> int | None:
    """The bytes of a ``--memory``/``-m`` among docker's create arguments (docker's units: b, k, m, g), or None."""
    args = list(create_args)
    for i, arg in enumerate(args):
        value = (arg.split("=", 1)[1] if arg.startswith(("--memory=", "-m=")) else
                 args[i + 1] if arg in ("--memory", "-m") and i + 1 < len(args) else None)
        amount = settings.memory_amount(value) if value is not None else None
        if amount is not None:
            return amount
    return None


def jobs_env(job: ContainerBuild, create_args: Sequence[str]) -> dict[str, str]:
    """``MAX_JOBS`` and nvcc's ``--threads`` (ci/builds/progress/plan.py) against the container's memory limit
    where the farm sets one, else what the host has; stated in one line; the user's ``--max-jobs`` wins."""
    cores = os.cpu_count() or 2
    target = job.target
    if target.cpu:
        return {"MAX_JOBS": str(job.max_jobs or cores)}
    limit = memory_limit(create_args)
    free = memory.available() if limit is None else limit
    archs = len(arch_flags.torch_arch_flags(arch_flags.arch_list_of(target)))
    chosen = compile_plan.for_project(target.project.name, archs, cores, free, job.max_jobs)
    log.info(f"{chosen.line}{' (the container memory limit)' if limit is not None else ''}")
    if chosen.warning:
        log.warn(chosen.warning)
    return compile_plan.env(chosen)


def memory_args() -> list[str]:
    """docker's ``--memory`` for the build container (``FARM_CONTAINER_MEMORY``), none by default."""
    given = (settings.value("FARM_CONTAINER_MEMORY") or "").strip()
    if given and memory_limit([f"--memory={given}"]) is None:
        raise UsageError("FARM_CONTAINER_MEMORY is not an amount of memory", repr(given),
                         "give docker's form: 6g, 6144m")
    return [f"--memory={given}", f"--memory-swap={given}"] if given else []


def configured_limit() -> int | None:
    """The build container's memory limit in bytes (``FARM_CONTAINER_MEMORY``), None without one."""
    return memory_limit(memory_args())


def deadline_env() -> dict[str, str]:
    """As on the host (``host.deadline_env``, whose module sits above this one's in the imports)."""
    given = settings.current().get("FARM_DEADLINE")
    return {admission.DEADLINE: f"{compile_deadline.parse(given):.0f}"} if given else {}


def compile_env(job: ContainerBuild) -> tuple[dict[str, str], list[str]]:
    """The variables of the compile front in the container (paths inside it: record, expected needs, the project,
    the deadline, MAX_JOBS and --threads) and docker's arguments: the record folder's mount, the memory limit."""
    limit = memory_args()
    if job.target.cpu:
        return {"MAX_JOBS": str(job.max_jobs or os.cpu_count() or 2)}, limit
    env = {admission.RECORD: f"{MOUNT}/{compile_records.RECORD}",
           admission.EXPECTED: f"{MOUNT}/{compile_records.EXPECTED}", admission.ROOT: PROJECT}
    return env | deadline_env() | jobs_env(job, limit), [f"--volume={folder(job)}:{MOUNT}", *limit]


#: The fronts of the host compilers (ci/nvcc/host_front.py), in the record folder.
HOST_FRONT = "host-front"


def host_fronts(job: ContainerBuild, build_env: Mapping[str, str], script: str) -> dict[str, str]:
    """``CC`` and ``CXX`` through the compile front (``script``: ci/nvcc/host_front.py as the container sees it),
    written on the host into the record folder, which the container sees at :data:`MOUNT`; none in a CPU build
    (no record folder: nothing is admitted)."""
    if job.target.cpu:
        return {}
    return host_front.write_fronts(build_env, folder(job) / HOST_FRONT, ["python", "-I"], script,
                                   seen_as=f"{MOUNT}/{HOST_FRONT}")


def reached(record: Path, known: Mapping[str, Any]) -> compile_deadline.DeadlineReached:
    """The deadline's line from the record (the container's build folder is gone with it): the sources compiled,
    of those this build and earlier ones recorded."""
    done = {str(line["source"]) for line in need.read_record(record) if line.get("rc") == 0}
    total = len(done | set(known)) or "?"
    return compile_deadline.DeadlineReached(f"stopped at the deadline: {len(done)} of {total} compiles done and "
                                            "cached", f"{len(done)}/{total}", "the same command resumes")


@contextmanager
def measured(job: ContainerBuild, source: Path, cibw: Mapping[str, str]) -> Iterator[None]:
    """Around the container build: the record folder prepared (the last record folded into the farm's cache, the
    expected needs written), a line per finished compile, the record folded in after; a build whose wrapper
    refused a compile at the deadline stops with its own status and line."""
    if job.target.cpu:
        yield
        return
    work = folder(job)
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o777)  # the image's build user (not the caller's uid) writes the record through the mount
    project = job.target.project.name
    compile_records.prepare(project, work)
    record = work / compile_records.RECORD
    known = compile_records.load(project)
    jobs = re.search(r'(?:^| )MAX_JOBS="?(\d+)', cibw.get("CIBW_ENVIRONMENT", ""))
    try:
        with compile_watch.watching(record, source, known, int(jobs.group(1)) if jobs else 1):
            yield
    except FarmError:
        if compile_deadline.stopped(record):
            raise reached(record, known) from None
        raise
    finally:
        compile_records.merge(project, record)


def reported(job: ContainerBuild, rep: report.BuildReport) -> report.BuildReport:
    """The build's report with every compile of the record (report.json written again)."""
    return report.with_compiles(rep, folder(job) / compile_records.RECORD, job.outputs.target_dir(job.target))
