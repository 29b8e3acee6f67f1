"""How a build's compiles would spread over sccache-dist build servers, computed from a real build's own records:
ninja's ``.ninja_log`` (every compile job's start and end) and, for the device code of each nvcc job, sccache's
server log at debug level (``SCCACHE_LOG=debug``: ``[<file>.compute_90.ptx]: Compiled in 5.7 s`` for cicc,
``.cubin`` for ptxas, ``.module_id`` for cudafe++).

The model (docs/scaling.md): an nvcc job is a chain ``front`` (preprocessing, cudafe++) -> one ``cicc -> ptxas``
pair per architecture, independent of each other -> ``back`` (fatbinary and the host compile), where ``back`` is
what the job's ninja duration leaves after the parts sccache timed; a C++ job is one task. sccache-dist can run
every task on any build server, so the wall time on ``S`` servers of ``C`` cores each is list scheduling of that
graph on ``S*C`` slots (longest remaining path first), and no number of servers beats the longest chain (the
critical path). One machine with ``nvcc --threads`` runs the same graph on its own ``C`` cores; without it each
nvcc job is one sequential task. The link and the wheel's repair and audit come after and are left out.

    python -m ci.toolchain.scaling --ninja-log <build>/temp.*/.ninja_log --sccache-log <work>/sccache-server.log

Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

_COMPILED = re.compile(r"\[(?P<name>[^\]]+)\]: Compiled in (?P<secs>[0-9.]+) s")
_DEVICE = re.compile(r"^(?P<stem>.+)\.(?P<arch>compute_\d+[a-z]?)\.(?P<kind>ptx|cubin)$")


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    seconds: float
    after: tuple[str, ...] = ()


def ninja_jobs(text: str) -> dict[str, float]:
    """Output -> seconds of the last run of each job of a ``.ninja_log`` (format v5 and newer)."""
    jobs: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            jobs[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000.0
    return jobs


def cuda_outputs(build_ninja: str) -> set[str]:
    """The outputs torch's ``build.ninja`` makes with its nvcc rule (``cuda_compile``): the jobs sccache split. Needed
    because sccache names its parts after the object's file name only (``csrc/cpu/bias_act.o`` and
    ``csrc/cuda/bias_act.o`` are both ``bias_act``)."""
    found = set()
    for line in build_ninja.splitlines():
        if line.startswith("build ") and ": cuda_compile " in line:
            found.add(line.removeprefix("build ").split(": cuda_compile ", 1)[0].replace("$ ", " ").replace("$:", ":"))
    return found


def device_parts(text: str) -> dict[str, dict[str, float]]:
    """Object stem -> part -> seconds, from sccache's debug log: ``ptx:compute_90``, ``cubin:compute_90``,
    ``front`` (cudafe++). A part compiled twice (a rebuild) keeps its last time."""
    parts: dict[str, dict[str, float]] = defaultdict(dict)
    for match in _COMPILED.finditer(text):
        name, secs = match.group("name"), float(match.group("secs"))
        device = _DEVICE.match(name)
        if device:
            parts[device.group("stem")][f"{device.group('kind')}:{device.group('arch')}"] = secs
        elif name.endswith(".module_id"):
            parts[name.removesuffix(".module_id")]["front"] = secs
    return dict(parts)


def graph(jobs: dict[str, float], devices: dict[str, dict[str, float]], *, split: bool = True,
          nvcc_jobs: set[str] | None = None) -> list[Task]:
    """The task graph of the build (see the module's docstring); ``split=False``: every job one task.
    ``nvcc_jobs``: the outputs of nvcc jobs (None: any job whose file name sccache timed parts of)."""
    tasks: list[Task] = []
    for output, seconds in sorted(jobs.items()):
        stem = Path(output).name.removesuffix(".o")
        is_nvcc = nvcc_jobs is None or output in nvcc_jobs
        parts = devices.get(stem) if split and is_nvcc else None
        if not parts:
            tasks.append(Task(output, seconds))
            continue
        front = parts.get("front", 0.0)
        tasks.append(Task(f"{output}:front", front))
        ends = []
        for key, secs in sorted(parts.items()):
            if key.startswith("ptx:"):
                arch = key.removeprefix("ptx:")
                tasks.append(Task(f"{output}:{key}", secs, (f"{output}:front",)))
                cubin = parts.get(f"cubin:{arch}")
                if cubin is not None:
                    tasks.append(Task(f"{output}:cubin:{arch}", cubin, (f"{output}:{key}",)))
                ends.append(f"{output}:cubin:{arch}" if cubin is not None else f"{output}:{key}")
        back = max(0.0, seconds - sum(parts.values()))
        tasks.append(Task(f"{output}:back", back, tuple(ends) or (f"{output}:front",)))
    return tasks


def critical_path(tasks: Sequence[Task]) -> float:
    return max(_tails(tasks).values(), default=0.0)


def critical_chain(tasks: Sequence[Task]) -> list[Task]:
    """The tasks of the longest chain, first to last: what no number of build servers shortens."""
    tails = _tails(tasks)
    by_name = {t.name: t for t in tasks}
    children: dict[str, list[str]] = defaultdict(list)
    for task in tasks:
        for parent in task.after:
            children[parent].append(task.name)
    starts = [t.name for t in tasks if not t.after]
    chain = [max(starts, key=lambda n: tails[n])] if starts else []
    while chain and children[chain[-1]]:
        chain.append(max(children[chain[-1]], key=lambda n: tails[n]))
    return [by_name[n] for n in chain]


def _tails(tasks: Sequence[Task]) -> dict[str, float]:
    """Each task's longest path to the end of the graph (itself included): the list scheduler's priority."""
    children: dict[str, list[str]] = defaultdict(list)
    for task in tasks:
        for parent in task.after:
            children[parent].append(task.name)
    by_name = {t.name: t for t in tasks}
    tails: dict[str, float] = {}

    def tail(name: str) -> float:
        if name not in tails:
            tails[name] = by_name[name].seconds + max((tail(c) for c in children[name]), default=0.0)
        return tails[name]

    for task in tasks:
        tail(task.name)
    return tails


def list_schedule(tasks: Sequence[Task], slots: int) -> float:
    """The finish time of ``tasks`` on ``slots`` identical slots: whenever a slot is free, the ready task with the
    longest remaining path starts on it."""
    tails = _tails(tasks)
    waiting = {t.name: set(t.after) for t in tasks}
    by_name = {t.name: t for t in tasks}
    children: dict[str, list[str]] = defaultdict(list)
    for task in tasks:
        for parent in task.after:
            children[parent].append(task.name)
    ready = [(-tails[n], n) for n, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    running: list[tuple[float, str]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < slots:
            _, name = heapq.heappop(ready)
            heapq.heappush(running, (now + by_name[name].seconds, name))
        now, done = heapq.heappop(running)
        for child in children[done]:
            waiting[child].discard(done)
            if not waiting[child]:
                heapq.heappush(ready, (-tails[child], child))
    return now


def table(tasks: Sequence[Task], serial: Sequence[Task], cores: int, servers: Iterable[int]) -> list[str]:
    """The markdown table: one machine without and with ``nvcc --threads``, then ``servers`` build servers."""
    floor = critical_path(tasks)
    one = list_schedule(serial, cores)
    rows = ["| where the compiles run | slots | wall time (s) | speed-up | critical path (s) |",
            "| --- | --- | ---: | ---: | ---: |",
            f"| this machine, nvcc one architecture after another | {cores} | {one:.1f} | 1.0x | "
            f"{critical_path(serial):.1f} |"]
    threads = list_schedule(tasks, cores)
    rows.append(f"| this machine, `nvcc --threads` | {cores} | {threads:.1f} | {one / threads:.1f}x | {floor:.1f} |")
    for count in servers:
        wall = list_schedule(tasks, count * cores)
        rows.append(f"| {count} build server{'s' if count > 1 else ''} (sccache-dist) | {count * cores} | {wall:.1f} | "
                    f"{one / wall:.1f}x | {floor:.1f} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.toolchain.scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--ninja-log", type=Path, required=True, action="append",
                        help="a build's .ninja_log (repeatable: a project with several extensions)")
    parser.add_argument("--sccache-log", type=Path, help="the build's sccache server log at SCCACHE_LOG=debug")
    parser.add_argument("--cores", type=int, default=2, help="compile slots per machine (default 2)")
    parser.add_argument("--servers", default="1,2,4,8,16", help="build server counts (default 1,2,4,8,16)")
    args = parser.parse_args(argv)
    jobs: dict[str, float] = {}
    nvcc_jobs: set[str] | None = None
    for log_file in args.ninja_log:
        if not log_file.is_file():
            print(f"error: no such ninja log ({log_file}): pass the .ninja_log of a build's temp folder",
                  file=sys.stderr)
            return 2
        jobs |= ninja_jobs(log_file.read_text())
        rules = log_file.with_name("build.ninja")
        if rules.is_file():
            nvcc_jobs = (nvcc_jobs or set()) | cuda_outputs(rules.read_text())
    devices = device_parts(args.sccache_log.read_text(errors="replace")) if args.sccache_log else {}
    tasks = graph(jobs, devices, nvcc_jobs=nvcc_jobs)
    print(f"{len(jobs)} ninja jobs, {sum(jobs.values()):.1f} s of compiling; {len(tasks)} tasks "
          f"({sum(len(p) for p in devices.values())} device parts timed by sccache)\n")
    print("\n".join(table(tasks, graph(jobs, devices, split=False, nvcc_jobs=nvcc_jobs), args.cores,
                          [int(s) for s in args.servers.split(",")])))
    chain = critical_chain(tasks)
    print("\nthe critical path: " + " -> ".join(f"{Path(t.name).name} {t.seconds:.1f} s" for t in chain))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
