"""How a heavy project builds under memory limits: the naive settings against the farm's admission.

``python -m ci bench-builds --project tests/fixtures/heavy_templates --memory 2.5g --memory 4g --memory 8g
--memory 16g`` builds the project's default target on this machine (the host route, no compile cache) in a clone,
once per limit and mode, each build in a memory cgroup of its own limited to that much (ci/linux/memlimit.py: the
kernel enforces it as it does a container's ``--memory``) and in the same fresh build folder (so that the wheels'
bytes compare):

* **naive**: ``FARM_COMPILE_ADMISSION=off``: a job per CPU, nvcc's ``--threads 0``, nothing held back;
* **farm**: the farm's defaults: ``MAX_JOBS`` and ``--threads`` from the plan, each compile admitted by memory.

For each build: the outcome (built, killed for memory as the farm's own line names it, or failed), the wall time,
the cgroup's peak (``memory.max_usage_in_bytes``/``memory.peak``) and the kernel's out-of-memory kills, the jobs
and threads chosen (the plan's line), whether the wheel's bytes equal the other builds', and the ETA's error at
25, 50 and 75 % of the compiles' span: the ETA the progress showed last before that moment (recomputed from the
build's record with the same function and the records the build started with) against the moment the last
compile ended. A table is printed and ``memory-limits.json`` written into ``--out``. It is a benchmark, not a
test: builds of a heavy project take minutes each.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from ci import fsutil, proc, wheelmeta
from ci.builds.progress import records, watch
from ci.errors import UsageError
from ci.linux import container_compiles, memlimit, reproduce
from ci.log import log
from ci.nvcc import admission
from ci.nvcc.admission import memory, need
from ci.universe.project import FARM_ROOT, ProjectConfig

PLAN = re.compile(r"(\d+) jobs(?: \(MAX_JOBS\))? x --threads (\d+)")
OUT_OF_MEMORY = re.compile(r"^error: .*ran out of memory.*$", re.MULTILINE)
#: Each mode says its switch: a caller's FARM_COMPILE_ADMISSION=off would otherwise make "farm" naive too.
MODES = {"naive": {admission.SWITCH: "off"}, "farm": {admission.SWITCH: "on"}}
#: The caller's settings that would choose for either mode (the plan's MAX_JOBS, the wrapper's --threads).
UNSET = ("MAX_JOBS", admission.THREADS)
POINTS = (0.25, 0.5, 0.75)


@dataclasses.dataclass
class Row:
    limit: int
    mode: str
    outcome: str = ""
    seconds: float = 0.0
    peak: int | None = None
    oom_kills: int = 0
    jobs: int | None = None
    threads: int | None = None
    plan: str = ""
    wheel_sha256: str = ""
    #: the ETA's error at 25, 50, 75 % (seconds, predicted end less actual end; None: no ETA shown yet)
    eta_error: dict[str, float | None] = dataclasses.field(default_factory=dict)
    #: the same, relative to the time that was actually left then
    eta_error_share: dict[str, float | None] = dataclasses.field(default_factory=dict)
    #: each compile's expected need (recorded, estimated or unknown) against its measured peak
    needs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    line: str = ""


def parse_limit(value: str) -> int:
    limit = container_compiles.memory_limit([f"--memory={value}"])
    if limit is None:
        raise UsageError("--memory is not an amount of memory", repr(value), "give docker's form: 2.5g, 6g, 6144m")
    return limit


def eta_errors(lines: Sequence[Mapping[str, Any]], total: int | None, known: Mapping[str, Any], jobs: int
               ) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """The ETA's error at :data:`POINTS` of the compiles' span (see the module's doc)."""
    done = sorted((line for line in lines if line.get("rc") == 0), key=lambda line: float(line["end"]))
    if not done:
        return {}, {}
    start = min(float(line["end"]) - float(line["seconds"]) for line in done)
    end = float(done[-1]["end"])
    errors: dict[str, float | None] = {}
    shares: dict[str, float | None] = {}
    for point in POINTS:
        moment, key = start + point * (end - start), f"{point:.0%}"
        shown = [i for i, line in enumerate(done) if float(line["end"]) <= moment]
        left = watch.eta(done[: shown[-1] + 1], total, known, jobs) if shown else None
        if not shown or left is None:
            errors[key] = shares[key] = None
            continue
        at = float(done[shown[-1]]["end"])
        errors[key] = round(at + left - end, 1)
        shares[key] = round((at + left - end) / (end - at), 3) if end > at else None
    return errors, shares


def one_build(project: Path, build_dir: Path, wheelhouse: Path, limit: int, mode: str, name: str) -> Row:
    row = Row(limit, mode)
    known = records.load(name)
    shutil.rmtree(build_dir, ignore_errors=True)
    shutil.rmtree(wheelhouse, ignore_errors=True)
    output = build_dir.parent / f"build-{mode}-{limit >> 20}m.log"
    env = {"PYTHONPATH": str(FARM_ROOT), "FARM_COMPILE_CACHE": "off", "COLUMNS": "200", **MODES[mode]}
    cmd = [sys.executable, "-m", "ci", "build", "--project", str(project), "--wheelhouse", str(wheelhouse),
           "--build-dir", str(build_dir)]
    with memlimit.limited(limit, f"farm-bench-{mode}") as group:
        started = time.monotonic()
        done = proc.run(group.enter(cmd), env=env, unset=UNSET, check=False, tee=output,
                        hide=lambda text: not (PLAN.search(text) or text.startswith(("compiled ", "error:"))))
        row.seconds = round(time.monotonic() - started, 1)
        row.peak, row.oom_kills = group.peak(), group.oom_kills()
    text = output.read_text(errors="replace")
    plan = PLAN.search(text)
    if plan:
        row.jobs, row.threads = int(plan.group(1)), int(plan.group(2))
        row.plan = text[text.rfind("\n", 0, plan.start()) + 1: text.find("\n", plan.start())].strip()
    wheels = sorted(wheelhouse.glob("*/*.whl"))
    killed = OUT_OF_MEMORY.search(text)
    row.outcome = ("built" if done.returncode == 0 and wheels else "killed for memory" if killed else
                   f"failed ({done.returncode})")
    row.line = killed.group(0)[:300] if killed else ""
    if wheels:
        row.wheel_sha256 = wheelmeta.sha256_file(wheels[0])
    record = sorted(build_dir.glob(f"*/{records.RECORD}"))
    lines = need.read_record(record[0]) if record else []
    row.needs = [{k: line.get(k) for k in ("source", "how", "need", "peak", "threads", "seconds", "rc")}
                 for line in lines]
    if lines and row.jobs:
        row.eta_error, row.eta_error_share = eta_errors(lines, watch.total_compiles(record[0].parent / "src", known),
                                                        known, row.jobs)
    return row


def bench(config: ProjectConfig, limits: Sequence[int], out: Path) -> list[Row]:
    """Build under each limit, naive then the farm's, and report (see the module's doc)."""
    why = memlimit.usable()
    if why:
        raise UsageError("bench-builds --memory needs a memory cgroup of its own", why, "run it as root here")
    top, inside, commit = reproduce.repository_of(config.root)
    folder = Path(tempfile.mkdtemp(prefix="farm-memory-bench-"))
    rows: list[Row] = []
    recorded = records.load(config.name)
    try:
        clone = reproduce.clone_at(top, commit, folder / "clone")
        for limit in limits:
            for mode in MODES:
                rows.append(one_build(clone / inside, folder / "build", folder / "wheelhouse", limit, mode,
                                      config.name))
                log.info(f"{memory.gib(limit)} {mode}: {rows[-1].outcome} in {rows[-1].seconds:.0f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    log.result(table(config.name, rows))
    fsutil.atomic_write_json(out / "memory-limits.json", {
        "project": config.name, "commit": commit, "records_before": recorded,
        "rows": [dataclasses.asdict(r) for r in rows]})
    log.info(f"written to {out / 'memory-limits.json'}")
    return rows


def table(project: str, rows: Sequence[Row]) -> Table:
    built = {r.wheel_sha256 for r in rows if r.wheel_sha256}
    out = Table(title=f"{project} under memory limits: naive (a job per CPU, --threads 0, no admission) against "
                      "the farm's admission")
    for col in ("limit", "settings", "outcome", "wall", "peak (cgroup)", "OOM kills", "jobs x threads",
                "ETA error at 25/50/75 %", "wheel"):
        out.add_column(col)
    for r in rows:
        errors = " / ".join("-" if r.eta_error.get(k) is None else f"{r.eta_error[k]:+.0f} s"
                            for k in ("25%", "50%", "75%"))
        out.add_row(memory.gib(r.limit), r.mode, r.outcome, f"{r.seconds:.0f} s",
                    memory.gib(r.peak) if r.peak is not None else "?", str(r.oom_kills),
                    f"{r.jobs} x {r.threads}" if r.jobs else "?", errors,
                    ("same bytes" if len(built) == 1 else r.wheel_sha256[:12]) if r.wheel_sha256 else "-")
    return out
