"""What a compile is expected to take: its own record scaled to the architectures it runs at once, else the
project's largest per-architecture peak; and nvcc's ``--threads``, read and set."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

#: A compile's kind in the records: nvcc's (the default of records made before host compiles were measured), or the
#: host compiler's. Each kind is expected from its own records: a host compile's peak is no architecture's.
DEVICE, HOST = "device", "host"


def kind_of(line: Mapping[str, Any]) -> str:
    return str(line.get("kind") or DEVICE)


def threads_of(args: Sequence[str]) -> tuple[int, int | None]:
    """nvcc's ``--threads``/``-t`` value (the last one wins; 1 without one) and the index of its value word."""
    value, where = 1, None
    for i, word in enumerate(args):
        option, equals, rest = word.partition("=")
        if option in ("--threads", "-t"):
            text, index = (rest, i) if equals else ((args[i + 1], i + 1) if i + 1 < len(args) else ("1", None))
            if re.fullmatch(r"\d+", text):
                value, where = int(text), index
    return value, where


def parallel(archs: int, threads: int, cpus: int) -> int:
    """How many architectures of one compile run at the same time on a machine of ``cpus`` CPUs: nvcc's
    ``--threads 0`` is "the number of CPUs on the machine" (nvcc --help), not every architecture: 6 architectures
    on 2 CPUs run 2 at a time (measured: classic_ext's compile, one cicc of 1.24 GiB, peaks at 2.47 GiB with 6). The
    CPUs are the machine's, not this process's affinity (nvcc under ``taskset -c 0`` still ran 2)."""
    return max(1, min(max(archs, 1), cpus if threads == 0 else threads))


def cpus() -> int:
    """The CPU count nvcc's ``--threads 0`` uses."""
    return os.cpu_count() or 1


def with_threads(args: Sequence[str], threads: int) -> list[str]:
    """``args`` with nvcc's ``--threads`` set to ``threads`` (its value replaced, or the option added)."""
    _, where = threads_of(args)
    out = list(args)
    if where is None:
        return [*out, "--threads", str(threads)]
    word = out[where]
    out[where] = word.partition("=")[0] + f"={threads}" if "=" in word and word.startswith("-") else str(threads)
    return out


class Need(NamedTuple):
    bytes: int | None  # None: nothing known, the compile runs alone
    seconds: float | None
    how: str  # "recorded", "estimated", "unmeasured" or "unknown"


def load_expected(path: str | None) -> dict[str, Any]:
    """Earlier builds' records (the farm's ``FARM_COMPILE_EXPECTED`` file; empty without one)."""
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def per_unit(line: Mapping[str, Any], machine: int) -> float:
    """A measured compile's peak per architecture it ran at once: the record's own CPU count (``cpus``, what its
    ``--threads 0`` meant), else ``machine``'s (records made before the farm kept it)."""
    return float(line["peak"]) / parallel(line["archs"], line["threads"], int(line.get("cpus") or machine))


def unit_peaks(lines: list[dict[str, Any]], machine: int) -> list[float]:
    """Per-parallel-architecture peaks of the measured compiles among ``lines`` (records' shape)."""
    return [per_unit(line, machine) for line in lines if line.get("compiled") and line.get("peak")]


def read_record(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


def expected(source: str, archs: int, threads: int, known: Mapping[str, Any], this_build: list[dict[str, Any]],
             machine: int, kind: str = DEVICE) -> Need:
    """What a compile of ``source`` is expected to take on a machine of ``machine`` CPUs: its record scaled to the
    architectures ``archs`` x ``threads`` runs at once, else the largest per-architecture peak (and duration) the
    project recorded for compiles of its ``kind``, else unknown: the compile then runs alone to be measured, unless
    a compile of its kind in this build has already finished without a measure (a compile-cache hit, or sccache's
    server compiling outside the wrapper's process tree), where waiting alone would only serialise the build:
    ``unmeasured``, admitted as it comes."""
    units = parallel(archs, threads, machine)
    this_build = [line for line in this_build if kind_of(line) == kind]
    recorded = {k: v for k, v in known.get("sources", {}).items() if kind_of(v) == kind}
    mine = [line for line in this_build if line.get("source") == source and line.get("compiled")]
    entry = mine[-1] if mine else recorded.get(source)
    if entry and entry.get("peak"):
        seconds = entry.get("seconds", 0.0) * max(archs, 1) / max(entry["archs"], 1)
        return Need(int(per_unit(entry, machine) * units), seconds, "recorded")
    measured = [line for line in this_build if line.get("compiled") and line.get("peak")]
    measured += [{**v, "compiled": True} for v in recorded.values() if v.get("peak")]
    if measured:
        slowest = max(float(line.get("seconds") or 0.0) / max(int(line.get("archs") or 1), 1) for line in measured)
        return Need(int(max(unit_peaks(measured, machine)) * units), slowest * max(archs, 1), "estimated")
    if this_build:
        return Need(0, None, "unmeasured")
    return Need(None, None, "unknown")
