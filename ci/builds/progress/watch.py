"""The live line of a build's compiles: one line per finished compile with done/total, elapsed time and an ETA
from the recorded durations (the project's records in the farm's cache, else this build's mean so far), and at the
end the slowest compiles with their time and peak memory (the record in the work folder holds all)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ci.log import log
from ci.nvcc.admission import gib, read_record

#: A compile edge of torch's ``build.ninja`` (``cuda_compile`` and ``compile``).
EDGE = re.compile(r"^build \S+\.o: (?:cuda_)?compile ", re.MULTILINE)


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def total_compiles(source: Path, known: Mapping[str, Any]) -> int | None:
    """The compiles of the build: the edges of torch's build.ninja once it exists, else the recorded sources."""
    for ninja in sorted(source.glob("build/*/build.ninja")):
        try:
            return len(EDGE.findall(ninja.read_text(errors="replace")))
        except OSError:
            continue
    return len(known) or None


def eta(done: Sequence[Mapping[str, Any]], total: int | None, known: Mapping[str, Any], jobs: int) -> float | None:
    """Seconds left: the recorded durations of the sources not done yet (unrecorded ones at this build's mean)
    over ``jobs``."""
    if total is None:
        return None
    finished = {str(line["source"]) for line in done}
    left = max(0, total - len(finished))
    recorded = [float(v["seconds"]) for k, v in known.items() if k not in finished]
    mean = (sum(float(line["seconds"]) for line in done) / len(done) if done else
            (sum(recorded) / len(recorded) if recorded else None))
    if mean is None:
        return None
    remaining = sorted(recorded, reverse=True)[:left]
    return (sum(remaining) + mean * (left - len(remaining))) / max(1, jobs)


def line_for(new: Mapping[str, Any], done: Sequence[Mapping[str, Any]], total: int | None, elapsed: float,
             left: float | None) -> str:
    count = len({str(line["source"]) for line in done})
    return (f"compiled {count}/{total or '?'}: {new['source']} {new['seconds']:.1f} s, {gib(new['peak'])} · "
            f"elapsed {clock(elapsed)} · ETA {clock(left) if left is not None else '?'}")


def slowest(lines: Sequence[Mapping[str, Any]], n: int = 5) -> list[str]:
    top = sorted(lines, key=lambda line: -float(line["seconds"]))[:n]
    return [f"{line['source']}: {line['seconds']:.1f} s, peak {gib(line['peak'])} ({line['archs']} architectures, "
            f"--threads {line['threads']})" for line in top]


@contextmanager
def watching(record: Path, source: Path, known: Mapping[str, Any], jobs: int, every: float = 0.5) -> Iterator[None]:
    """Print a line per compile that finishes while the block runs; then the slowest five."""
    stop = threading.Event()
    started = time.monotonic()

    def follow() -> None:
        seen = 0
        while True:
            finished = stop.wait(every)
            lines = read_record(record)
            if len(lines) > seen:
                total = total_compiles(source, known)
                for i in range(seen, len(lines)):
                    done = lines[: i + 1]
                    log.info(line_for(lines[i], done, total, time.monotonic() - started,
                                      eta(done, total, known, jobs)))
                seen = len(lines)
            if finished:
                return

    thread = threading.Thread(target=follow, name="compile-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        lines = [line for line in read_record(record) if line.get("rc") == 0]
        if lines:
            log.info(f"slowest compiles (all {len(lines)} in {record}):\n  " + "\n  ".join(slowest(lines)))
