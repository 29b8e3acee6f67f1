"""One cell of the hermeticity suite: one input changed once, through one engine (tests/integration/
hermeticity_builds.py says what each engine keeps between builds).

Four builds, all in one work folder path (nvcc and the compile flags write it into the objects):

1. the **reference**: the changed value from empty caches and an empty folder (the same engine, so that the bytes
   compare: ccache's ``base_dir`` and sccache's own intermediate names make each engine's objects its own);
2. the **first** build: the first value, caches empty, folder empty (it fills them);
3. the **changed** build: the second value, with what the first left (the kept folder; the warm cache; for the
   shared server a new machine: an empty local cache, only the server warm). Its library must differ from the
   first's (unless the input is one that must not shape the object) and equal the reference's;
4. the **unchanged** build: nothing changed, so nothing may compile. The folder: the second value again in the
   kept folder (ninja has no work). A cache: the first value in an emptied folder (a hit, the first build's bytes:
   the changed build neither missed the entry nor overwrote it).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from pathlib import Path

from tests.integration.hermeticity_builds import Outcome, Place, Value, empty, farm


@dataclasses.dataclass(frozen=True)
class Input:
    """An input that shapes an object: its first and second value, the verb that builds (``build`` or
    ``develop``), and whether the second value must change the object (``keep`` builds the project's own list
    whatever the farm's)."""

    name: str
    a: Value
    b: Value
    verb: str = "build"
    shapes: bool = True
    #: Where the second value must change the library: ``device`` (its cubins and PTX) where the host code
    #: differs anyway (develop --debug builds in a folder of its own, whose path the host code's debug info holds).
    differs_in: str = "library"


@dataclasses.dataclass
class Row:
    """The cell's result, as the report writes it (tests/integration/hermeticity_report.py)."""

    input: str
    engine: str
    verb: str
    compiled: bool | None = None
    cache: str = "-"
    recompiled: bool | None = None
    differs: bool | None = None
    equals_empty: bool | None = None
    unchanged_reused: bool | None = None
    unchanged_equal: bool | None = None
    problems: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    commit: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return f"{self.input} x {self.engine}: " + "; ".join(self.problems)


def reference_engine(engine: str) -> str:
    """The engine of the empty-cache build whose bytes a cell's changed build must have."""
    return {"redis": "ccache", "redis-sccache": "sccache"}.get(engine, engine)


def run_cell(inp: Input, engine: str, tmp: Path, remote: str | None = None) -> Row:
    started = time.monotonic()
    build = tmp / "build"
    first = Place(tmp / "project", build, tmp / "scratch")
    # A second machine (the shared server's column): another checkout (develop builds in place: the same path).
    second = Place(tmp / "project-2", build, tmp / "scratch") if engine.startswith("redis") and \
        inp.verb == "build" else first
    first.scratch.mkdir(parents=True, exist_ok=True)
    shared = engine.startswith("redis")
    empty(build, first.project)
    ref = farm(inp.verb, second, inp.b, reference_engine(engine), tmp / "cache-reference")
    empty(build, second.project)
    base = farm(inp.verb, first, inp.a, engine, tmp / "cache", remote)
    if engine != "folder":
        empty(build, second.project)
    changed = farm(inp.verb, second, inp.b, engine, tmp / ("cache-2" if shared else "cache"), remote)
    if engine == "folder":
        again = farm(inp.verb, second, inp.b, engine, tmp / "cache")
    else:
        empty(build, second.project)
        again = farm(inp.verb, second, inp.a, engine, tmp / ("cache-3" if shared else "cache"), remote)
    row = judge(inp, engine, {"reference": ref, "first": base, "changed": changed, "unchanged": again})
    row.seconds = round(time.monotonic() - started, 1)
    row.commit = commit()
    return row


def judge(inp: Input, engine: str, builds: dict[str, Outcome]) -> Row:
    ref, base, changed, again = (builds[k] for k in ("reference", "first", "changed", "unchanged"))
    row = Row(inp.name, engine, inp.verb, compiled=changed.compiled, cache=changed.cache,
              recompiled=changed.recompiled)
    row.problems += [f"the {name} build failed: {o.last_line()}" for name, o in builds.items() if not o.ok]
    if changed.ok and ref.ok:
        row.equals_empty = changed.library == ref.library
        if not row.equals_empty:
            row.problems.append("the changed build's library is not the empty-cache build's")
    if changed.library is not None and base.library is not None:
        if inp.differs_in == "device":
            row.differs = changed.library.device != base.library.device
        else:
            row.differs = changed.library != base.library
        if row.differs != inp.shapes:
            row.problems.append("the changed input did not change the library" if inp.shapes else
                                "the library changed, though this input must not shape it")
    if inp.shapes and changed.ok and not changed.recompiled:
        row.problems.append("nvcc did not compile foo.cu again: " + reuse(changed))
    if again.ok:
        _judge_unchanged(row, engine, again, ref if engine == "folder" else base)
    return row


def _judge_unchanged(row: Row, engine: str, again: Outcome, expected: Outcome) -> None:
    if engine == "folder":
        row.unchanged_reused = not again.compiled
    else:
        # The shared server's column builds with a new, empty local cache: any hit came from the server.
        row.unchanged_reused = again.cache in ("hit", "remote hit")
    row.unchanged_equal = expected.ok and again.library == expected.library
    if not row.unchanged_reused:
        row.problems.append(f"the unchanged build compiled foo.cu again ({reuse(again)})")
    if not row.unchanged_equal:
        row.problems.append("the unchanged build's library is not the one its value gave before")


def reuse(outcome: Outcome) -> str:
    """How a build's foo.cu was (not) compiled, in words."""
    if not outcome.compiled:
        return "ninja ran no compile of it"
    return {"hit": "a cache hit", "remote hit": "a hit from the shared server", "miss": "a cache miss",
            "uncached": "compiled, the cache declined it", "-": "compiled"}[outcome.cache]


def commit() -> str:
    from tests.integration.hermeticity_builds import ROOT

    git = shutil.which("git")
    if git is None:
        return ""
    # The farm's code under test: the last commit that changed ci/ (the suite's own files change apart from it).
    out = subprocess.run([git, "-C", str(ROOT), "log", "-1", "--format=%h", "--", "ci"], capture_output=True,
                         text=True, check=False)
    return out.stdout.strip()
