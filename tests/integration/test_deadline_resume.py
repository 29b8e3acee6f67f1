"""--deadline on a real build (many_kernels: eight CUDA files, four architectures): stopped at a deadline shorter
than the build by the compiles' records, the farm exits 75 with its one line; the same command resumes and
compiles only what is missing (the two runs' compiles add up to one build's, none twice: by the farm's record
and by the compile cache's statistics, ccache's misses of the two runs adding up to the whole build's with no
hit), and the wheel is byte-identical to an uninterrupted build's in the same folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_fixture_projects import copy_fixture

pytestmark = [pytest.mark.slow, pytest.mark.extended]

ROOT = Path(__file__).resolve().parents[2]
STOPPED = re.compile(r"stopped at the deadline: (\d+) of (\d+) compiles done and cached; the same command resumes")
CACHE = re.compile(r"compile cache \(ccache\): (\d+) hits, (\d+) misses")


def build(project: Path, build_dir: Path, wheelhouse: Path, cache: Path, *extra: str
          ) -> subprocess.CompletedProcess[str]:
    """A build through ccache, its cache in ``cache`` (the uninterrupted build's apart from the resumed ones')."""
    return subprocess.run([sys.executable, "-m", "ci", "build", "--wheelhouse", str(wheelhouse), "--build-dir",
                           str(build_dir), *extra], cwd=project, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250",
                                                         "FARM_COMPILE_CACHE": "ccache", "CCACHE_DIR": str(cache),
                                                         "MAX_JOBS": "2"})


def cache_figures(result: subprocess.CompletedProcess[str]) -> tuple[int, int]:
    """This build's compile-cache hits and misses (the line the farm prints after the build, also on a stop)."""
    found = CACHE.findall(result.stdout)
    assert found, result.stdout[-4000:]
    return int(found[-1][0]), int(found[-1][1])


def lines(build_dir: Path) -> list[dict[str, object]]:
    (record,) = build_dir.glob("*/compiles.jsonl")
    return [line for line in map(json.loads, record.read_text().splitlines()) if line["rc"] == 0]


def compiled(build_dir: Path) -> list[str]:
    return [str(line["source"]) for line in lines(build_dir)]


def test_stopped_at_the_deadline_and_resumed_gives_the_same_wheel(tmp_path: Path) -> None:
    project, kept = copy_fixture("many_kernels", tmp_path), tmp_path / "build"
    started = time.time()
    whole = build(project, kept, tmp_path / "w1", tmp_path / "ccache-whole")  # also the records of the deadline
    assert whole.returncode == 0, whole.stdout[-4000:]
    (wheel,) = (tmp_path / "w1").glob("*/*.whl")
    assert len(compiled(kept)) == 9  # 8 CUDA files and module.cpp (the host compiles are admitted and recorded too)
    # a deadline the first compiles fit in and the last ones not: the time to the first compile and 1.5 compiles
    first_start = min(float(line["end"]) - float(line["seconds"]) for line in lines(kept))  # type: ignore[arg-type]
    longest = max(float(line["seconds"]) for line in lines(kept))  # type: ignore[arg-type]
    seconds = int(first_start - started + 1.5 * longest)
    shutil.rmtree(kept)  # the same path (a build's bytes depend on its folder's)
    stopped = build(project, kept, tmp_path / "w2", tmp_path / "ccache", "--deadline", f"{seconds}s")
    assert stopped.returncode == 75, stopped.stdout[-4000:]
    (line,) = set(STOPPED.findall(stopped.stdout))  # the error line (and the build's summary repeating it)
    first = compiled(kept)
    assert line[1] == "9" and int(line[0]) >= len(first) and 0 < len(first) < 9  # 8 CUDA files, module.cpp
    assert not list((tmp_path / "w2").glob("*/*.whl"))
    resumed = build(project, kept, tmp_path / "w3", tmp_path / "ccache")
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    second = compiled(kept)
    everything = ["csrc/module.cpp", *(f"csrc/k{i}.cu" for i in range(8))]
    assert sorted(first + second) == sorted(everything)  # none twice, none left out
    (hits_whole, misses_whole), (hits_1, misses_1), (hits_2, misses_2) = map(cache_figures, (whole, stopped, resumed))
    assert hits_whole == hits_1 == hits_2 == 0 and misses_1 > 0 and misses_2 > 0
    assert misses_1 + misses_2 == misses_whole, (misses_1, misses_2, misses_whole)
    (again,) = (tmp_path / "w3").glob("*/*.whl")
    assert again.read_bytes() == wheel.read_bytes()
