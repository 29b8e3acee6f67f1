"""The live progress of a build's compiles: done/total, elapsed time and an ETA from the recorded durations (the
project's records in the farm's cache, else this build's mean so far); on a terminal a rich progress bar, in CI and
logs (not a terminal, or on GitHub Actions) a line per finished compile; at the end the slowest compiles with their
time and peak memory (the record in the work folder, and the build's report.json, hold all)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from ci.log import log, on_github
from ci.nvcc.admission.memory import gib
from ci.nvcc.admission.need import HOST, kind_of, read_record

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
    over ``jobs``, at this build's pace: times the ratio of the durations of its compiles done so far to their
    records (a record made two at once on crowded cores is longer than the same compile alone: the heavy
    fixture's 405-506 s against 112-224 s, an ETA 2.6-3x too long without it)."""
    if total is None:
        return None
    finished = {str(line["source"]) for line in done}
    left = max(0, total - len(finished))
    recorded = [float(v["seconds"]) for k, v in known.items() if k not in finished]
    # A compile-cache hit is done but says nothing of how long a compile takes (after a resume, 80 hits of 1 s
    # against records of 200 s made the ETA 16 times too short): the mean and the pace count compiles that ran.
    ran = [line for line in done if line.get("compiled", True)]
    mean = (sum(float(line["seconds"]) for line in ran) / len(ran) if ran else
            (sum(recorded) / len(recorded) if recorded else None))
    if mean is None:
        return None
    pairs = [(float(line["seconds"]), float(known[str(line["source"])].get("seconds") or 0)) for line in ran
             if str(line["source"]) in known]
    pace = sum(a for a, _ in pairs) / sum(r for _, r in pairs) if sum(r for _, r in pairs) > 0 else 1.0
    remaining = [seconds * pace for seconds in sorted(recorded, reverse=True)[:left]]
    return (sum(remaining) + mean * (left - len(remaining))) / max(1, jobs)


def line_for(new: Mapping[str, Any], done: Sequence[Mapping[str, Any]], total: int | None, elapsed: float,
             left: float | None) -> str:
    count = len({str(line["source"]) for line in done})
    if total is not None and count > total:  # the records' count (no build.ninja to read: a container) fell short
        total = None
    return (f"compiled {count}/{total or '?'}: {new['source']} {new['seconds']:.1f} s, {gib(new['peak'])} · "
            f"elapsed {clock(elapsed)} · ETA {clock(left) if left is not None else '?'}")


def slowest(lines: Sequence[Mapping[str, Any]], n: int = 5) -> list[str]:
    top = sorted(lines, key=lambda line: -float(line["seconds"]))[:n]
    return [f"{line['source']}: {line['seconds']:.1f} s, peak {gib(line['peak'])} ("
            + ("a C/C++ compile" if kind_of(line) == HOST else
               f"{line['archs']} architectures, --threads {line['threads']}") + ")" for line in top]


class Lines:
    """CI and logs: a line per finished compile."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def show(self, new: Mapping[str, Any], done: Sequence[Mapping[str, Any]], total: int | None, elapsed: float,
             left: float | None) -> None:
        self.console.print(line_for(new, done, total, elapsed, left), markup=False, highlight=False)


class Bar(Lines):
    """A terminal: one progress bar (done/total, elapsed, ETA) that the lines of the build scroll above."""

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self.progress = Progress(TextColumn("compiles"), BarColumn(), TextColumn("{task.completed}/{task.fields[of]}"),
                                 TextColumn("· elapsed {task.fields[elapsed]} · ETA {task.fields[eta]}"),
                                 TextColumn("{task.fields[last]}"), console=console, transient=False)
        self.task: TaskID = self.progress.add_task("compiles", total=None, of="?", elapsed=clock(0), eta="?", last="")

    def __enter__(self) -> Bar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def show(self, new: Mapping[str, Any], done: Sequence[Mapping[str, Any]], total: int | None, elapsed: float,
             left: float | None) -> None:
        count = len({str(line["source"]) for line in done})
        self.progress.update(self.task, completed=count, total=total, of=total or "?", elapsed=clock(elapsed),
                             eta=clock(left) if left is not None else "?", last=str(new["source"]))
        self.progress.refresh()


def display(console: Console) -> Lines:
    """The bar on a terminal; lines in CI (GitHub's own marker: its log is no terminal to redraw) and logs."""
    interactive = console.is_terminal and not console.is_dumb_terminal and not on_github()
    return Bar(console) if interactive else Lines(console)


@contextmanager
def watching(record: Path, source: Path, known: Mapping[str, Any], jobs: int, every: float = 0.5,
             console: Console | None = None) -> Iterator[None]:
    """Show each compile that finishes while the block runs (:func:`display`); then the slowest five, once."""
    stop = threading.Event()
    started = time.monotonic()
    shown = display(console or log.progress)

    def follow() -> None:
        seen = 0
        while True:
            finished = stop.wait(every)
            lines = read_record(record)
            if len(lines) > seen:
                total = total_compiles(source, known)
                for i in range(seen, len(lines)):
                    done = lines[: i + 1]
                    shown.show(lines[i], done, total, time.monotonic() - started, eta(done, total, known, jobs))
                seen = len(lines)
            if finished:
                return

    thread = threading.Thread(target=follow, name="compile-progress", daemon=True)
    try:
        with shown:
            thread.start()
            try:
                yield
            finally:
                stop.set()
                thread.join()
    finally:  # after the bar, at the end of the build (or of its stop at the deadline)
        lines = [line for line in read_record(record) if line.get("rc") == 0]
        if lines:
            shown.console.print(f"slowest compiles (all {len(lines)} in {record} and the build's report.json):\n  "
                                + "\n  ".join(slowest(lines)), markup=False, highlight=False)
