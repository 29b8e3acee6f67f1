"""Compile records kept in the farm's cache (``FARM_CACHE_DIR/compile-records/<project>.json``): per source, the
last measured compile (one that ran the compiler, not a compile-cache hit), so that the next build can expect its
need and duration; and the files a build's wrapper reads and writes in its work folder."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ci import fsutil, toolenv
from ci.nvcc import admission
from ci.nvcc.admission import need
from ci.nvcc.admission.claims import CLAIMS

#: The wrapper's record of this build (JSON lines) and what it expects from earlier builds, in the work folder.
RECORD, EXPECTED = "compiles.jsonl", "compiles-expected.json"


def cache_file(project: str, cache: Path | None = None) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", project) or "project"
    return (cache or toolenv.cache_root()) / "compile-records" / f"{name}.json"


def load(project: str, cache: Path | None = None) -> dict[str, dict[str, Any]]:
    """The project's recorded sources (empty when never built)."""
    try:
        data = json.loads(cache_file(project, cache).read_text())
    except (OSError, ValueError):
        return {}
    sources = data.get("sources") if isinstance(data, dict) else None
    return sources if isinstance(sources, dict) else {}


def measured(lines: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last measured compile of each source among a record's ``lines``."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line.get("compiled") and line.get("rc") == 0 and line.get("peak"):
            kept = ("kind", "peak", "seconds", "archs", "threads", "cpus")
            out[str(line["source"])] = {k: line[k] for k in kept if k in line}
    return out


def unit_peak(sources: Mapping[str, Mapping[str, Any]], machine: int, kind: str = need.DEVICE) -> float | None:
    """The largest peak per architecture run at once among ``sources``' compiles of ``kind`` (records of a machine
    of ``machine`` CPUs where they do not say; a host compile is one process: its peak)."""
    peaks = need.unit_peaks([{**v, "compiled": True} for v in sources.values() if need.kind_of(v) == kind], machine)
    return max(peaks) if peaks else None


def raised(sources: Mapping[str, dict[str, Any]], lines: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``sources`` with the peaks of compiles that failed after running their compiler (``lines``) where they
    exceed what is recorded: what a compile held when the out-of-memory killer ended it (nvcc reports a killed cicc
    with a status of its own, not the signal's) is no measure of its need but a floor of it. Without it the next
    build would expect the lighter compile the record still describes (its sources changed since), admit it beside
    others and be killed again. A compile that failed early (an error in the source) is below its record: no
    change; nor is one never recorded added unless it passed the largest peak of its kind (an early failure would
    otherwise stand for a heavy file, or become the whole project's estimate)."""
    out = dict(sources)
    for line in lines:
        if line.get("rc") == 0 or not line.get("compiled") or not line.get("peak"):
            continue
        source, peak, kind = str(line["source"]), int(line["peak"]), need.kind_of(line)
        old = out.get(source)
        top = max((int(v.get("peak") or 0) for v in sources.values() if need.kind_of(v) == kind), default=None)
        if (old is not None and peak > int(old.get("peak") or 0)) or (old is None and top and peak > top):
            kept = ("kind", "archs", "threads", "cpus", "seconds")
            out[source] = {**{k: line[k] for k in kept if k in line}, **(old or {}), "peak": peak}
    return out


def merge(project: str, record: Path, cache: Path | None = None) -> dict[str, dict[str, Any]]:
    """Fold a build's record into the project's cache entry (a failed compile's peak as a floor: :func:`raised`);
    returns the updated sources."""
    lines = need.read_record(record)
    sources = raised(load(project, cache) | measured(lines), lines)
    path = cache_file(project, cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write_json(path, {"sources": dict(sorted(sources.items()))})
    return sources


def prepare(project: str, work: Path, cache: Path | None = None) -> dict[str, str]:
    """Start a build's record in ``work``: the last build's record folded into the cache first (a build stopped at
    its deadline or killed keeps what it measured), the expected file written; returns the wrapper's variables."""
    record = work / RECORD
    if record.exists():
        merge(project, record, cache)
        record.unlink()
    sources = load(project, cache)
    fsutil.atomic_write_json(work / EXPECTED, {"sources": sources})
    (work / (RECORD + ".stopped")).unlink(missing_ok=True)
    # A wrapper killed outright (SIGKILL, docker rm -f) leaves its claim; in the next container its process id may
    # be a live process's, and the claim would hold that memory for ever. No compile of this target runs now (the
    # target's lock is held), so every claim here is stale.
    shutil.rmtree(work / (RECORD + CLAIMS), ignore_errors=True)
    return {admission.RECORD: str(record), admission.EXPECTED: str(work / EXPECTED)}
