"""What the compile admission costs a light build: the same cold host build with ``FARM_COMPILE_ADMISSION`` on
and off, alternated.

``python -m ci bench-builds --project tests/fixtures/classic_ext --admission-pairs 4`` builds the project's default
target in a clone (the checkout is never modified), from an empty build folder without a compile cache, once
with the admission and once without per pair; the pairs alternate which goes first (on, off; off, on; ...) so that
a machine getting busier or quieter over the runs weighs on both alike. For each build: the wall time, the plan's
line (jobs x threads), the compiles' own seconds and the time they waited for memory (from the wrapper's record),
and the wheel's sha256. It prints a table with the medians and their ratio and writes ``admission-overhead.json``
into ``--out``. A benchmark, not a test: the figures move with the machine's load.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from ci import fsutil, proc, wheelmeta
from ci.builds.progress import records
from ci.linux import reproduce
from ci.log import log
from ci.nvcc import admission
from ci.nvcc.admission import need
from ci.universe.project import FARM_ROOT, ProjectConfig

MODES = {"on": {admission.SWITCH: "on"}, "off": {admission.SWITCH: "off"}}


@dataclasses.dataclass
class Row:
    pair: int
    mode: str
    seconds: float = 0.0
    plan: str = ""
    compile_seconds: float = 0.0
    waited: float = 0.0
    compiles: int = 0
    wheel_sha256: str = ""


def one_build(project: Path, folder: Path, pair: int, mode: str) -> Row:
    row = Row(pair, mode)
    build_dir, wheelhouse = folder / "build", folder / "wheelhouse"
    shutil.rmtree(build_dir, ignore_errors=True)
    shutil.rmtree(wheelhouse, ignore_errors=True)
    output = folder / f"build-{pair}-{mode}.log"
    env = {"PYTHONPATH": str(FARM_ROOT), "FARM_COMPILE_CACHE": "off", "COLUMNS": "200", **MODES[mode]}
    cmd = [sys.executable, "-m", "ci", "build", "--project", str(project), "--wheelhouse", str(wheelhouse),
           "--build-dir", str(build_dir)]
    started = time.monotonic()
    proc.run(cmd, env=env, unset=("MAX_JOBS", admission.THREADS), tee=output,
             hide=lambda text: " jobs x --threads " not in text,
             what=f"the {mode} build of pair {pair} failed", hint=f"its output is in {output}")
    row.seconds = round(time.monotonic() - started, 1)
    text = output.read_text(errors="replace")
    row.plan = next((line.strip() for line in text.splitlines() if " jobs x --threads " in line), "")
    record = sorted(build_dir.glob(f"*/{records.RECORD}"))
    lines = [line for line in (need.read_record(record[0]) if record else []) if line.get("compiled")]
    row.compiles = len(lines)
    row.compile_seconds = round(sum(float(line.get("seconds", 0.0)) for line in lines), 1)
    row.waited = round(sum(float(line.get("waited", 0.0)) for line in lines), 3)
    wheels = sorted(wheelhouse.glob("*/*.whl"))
    row.wheel_sha256 = wheelmeta.sha256_file(wheels[0]) if wheels else ""
    return row


def bench(config: ProjectConfig, pairs: int, out: Path) -> list[Row]:
    """Build ``pairs`` pairs, alternating which mode goes first, and report (see the module's doc)."""
    top, inside, commit = reproduce.repository_of(config.root)
    folder = Path(tempfile.mkdtemp(prefix="farm-admission-bench-"))
    rows: list[Row] = []
    try:
        clone = reproduce.clone_at(top, commit, folder / "clone")
        for pair in range(1, pairs + 1):
            for mode in (("on", "off") if pair % 2 else ("off", "on")):
                rows.append(one_build(clone / inside, folder, pair, mode))
                log.info(f"pair {pair}, admission {mode}: {rows[-1].seconds:.1f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    summary = medians(rows)
    log.result(table(config.name, rows, summary))
    fsutil.atomic_write_json(out / "admission-overhead.json", {
        "project": config.name, "commit": commit, "medians": summary,
        "rows": [dataclasses.asdict(r) for r in rows]})
    log.info(f"written to {out / 'admission-overhead.json'}")
    return rows


def medians(rows: Sequence[Row]) -> dict[str, float]:
    """The median wall time and compile seconds of each mode, and on's wall time over off's."""
    out: dict[str, float] = {}
    for mode in MODES:
        mine = [r for r in rows if r.mode == mode]
        if mine:
            out[f"{mode}_seconds"] = statistics.median(r.seconds for r in mine)
            out[f"{mode}_compile_seconds"] = statistics.median(r.compile_seconds for r in mine)
    if out.get("off_seconds"):
        out["on_over_off"] = round(out["on_seconds"] / out["off_seconds"], 4)
    return out


def table(project: str, rows: Sequence[Row], summary: dict[str, float]) -> Table:
    same = len({r.wheel_sha256 for r in rows}) == 1
    ratio = summary.get("on_over_off")
    out = Table(title=f"{project}: cold host builds with the compile admission on and off (medians: on "
                      f"{summary.get('on_seconds', 0):.1f} s, off {summary.get('off_seconds', 0):.1f} s"
                      f"{f', on/off {ratio:.3f}' if ratio else ''}; wheels {'identical' if same else 'DIFFER'})")
    for col in ("pair", "admission", "wall", "plan", "compiles", "compile seconds", "waited"):
        out.add_column(col)
    for r in rows:
        out.add_row(str(r.pair), r.mode, f"{r.seconds:.1f} s", r.plan, str(r.compiles), f"{r.compile_seconds:.1f} s",
                    f"{r.waited:.3f} s")
    return out
