"""The hermeticity suite's table: each cell's row merged into ``hermeticity.json`` (keyed by input and engine, so
the CI part and the extended part of a run fill one table) and rendered as ``hermeticity.md``, in
``FARM_HERMETICITY_RESULTS`` or else ``test-results/hermeticity/`` of the checkout. Written after every cell, under
a lock: an interrupted run keeps the cells it finished, and pytest's workers never write at once."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.integration.hermeticity_builds import ENGINES, ROOT
from tests.integration.hermeticity_cell import Row

RESULTS_ENV = "FARM_HERMETICITY_RESULTS"


def results_dir() -> Path:
    return Path(os.environ.get(RESULTS_ENV) or ROOT / "test-results" / "hermeticity")


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def record(row: Row, order: list[str]) -> Path:
    """Merge ``row`` into the results and render the table (``order``: the inputs' order, the table's rows)."""
    folder = results_dir()
    with _locked(folder):
        data_file = folder / "hermeticity.json"
        rows: dict[str, dict[str, Any]] = json.loads(data_file.read_text()) if data_file.is_file() else {}
        rows[f"{row.input} | {row.engine}"] = {**dataclasses.asdict(row), "ok": row.ok,
                                               "when": time.strftime("%Y-%m-%d %H:%M:%S")}
        data_file.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
        (folder / "hermeticity.md").write_text(render(rows, order))
    return folder / "hermeticity.md"


def cell_text(row: Mapping[str, Any]) -> str:
    """``pass``/``FAIL``, whether the changed build recompiled foo.cu, whether its bytes equal the empty-cache
    build's, whether the unchanged build reused, and the cell's time."""
    failed = [p for p in row["problems"] if " build failed: " in p]
    if failed:
        return f"FAIL: {failed[0][:160]}".replace("|", "/")
    recompiled = "recompiled" if row["recompiled"] else (
        "reused: cache hit" if row["compiled"] else "reused: ninja no work")
    equal = {True: "= empty", False: "≠ empty", None: "?"}[row["equals_empty"]]
    unchanged = {True: "unchanged reused", False: "unchanged NOT reused", None: "unchanged ?"}[
        row["unchanged_reused"]]
    return f"{'pass' if row['ok'] else 'FAIL'}: {recompiled}, {equal}, {unchanged} ({row['seconds']:.0f} s)"


def render(rows: Mapping[str, Mapping[str, Any]], order: list[str]) -> str:
    engines = [e for e in ENGINES if any(r["engine"] == e for r in rows.values())]
    inputs = [i for i in order if any(r["input"] == i for r in rows.values())]
    inputs += sorted({r["input"] for r in rows.values()} - set(inputs))
    lines = ["# Hermeticity: each input changed once, through each engine", "",
             "Cell: whether the changed build recompiled foo.cu (nvcc ran: ninja ran the compile and no cache "
             "answered), whether its library equals the empty-cache build's (`= empty`), and whether the build "
             "with nothing changed reused (no compile). Columns: `folder` the kept work folder, no cache; `ccache`, "
             "`sccache` a warm cache, the work folder emptied; `redis` (ccache) and `redis-sccache` a second "
             "machine: empty local cache, warm server.", "",
             "| input | " + " | ".join(engines) + " |", "|---" * (len(engines) + 1) + "|"]
    for name in inputs:
        cells = [cell_text(rows[f"{name} | {e}"]) if f"{name} | {e}" in rows else "" for e in engines]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    problems = [f"- {r['input']} x {r['engine']} ({r['commit']}): {'; '.join(r['problems'])}"
                for r in rows.values() if r["problems"]]
    commits = sorted({r["commit"] for r in rows.values()})
    return "\n".join([*lines, "", f"Commits: {', '.join(commits)}", "", "## Failures", "", *(problems or ["none"]),
                      ""])
