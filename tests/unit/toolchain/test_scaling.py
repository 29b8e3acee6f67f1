"""The scaling model of docs/scaling.md: parsing ninja's and sccache's records, list scheduling, the floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.toolchain import scaling

NINJA_LOG = """# ninja log v5
0\t10000\t0\t/b/temp/csrc/cuda/a.cuda.o\tx
0\t4000\t0\t/b/temp/csrc/ops.o\ty
100\t6100\t0\t/b/temp/csrc/cuda/b.cuda.o\tz
"""

SCCACHE_LOG = """[2026-01-01T00:00:00Z DEBUG sccache] [a.cuda.module_id]: Compiled in 1.000 s, storing
[...] [a.cuda.compute_80.ptx]: Compiled in 2.000 s, storing in cache
[...] [a.cuda.compute_80.cubin]: Compiled in 1.000 s, storing in cache
[...] [a.cuda.compute_90.ptx]: Compiled in 2.500 s, storing in cache
[...] [a.cuda.compute_90.cubin]: Compiled in 1.500 s, storing in cache
[...] [a.cuda.o]: Compiled in 9.900 s, but not cacheable
"""


def test_ninja_jobs_keep_the_last_run_of_each_output() -> None:
    jobs = scaling.ninja_jobs(NINJA_LOG + "20000\t21000\t0\t/b/temp/csrc/ops.o\ty\n")
    assert jobs == {"/b/temp/csrc/cuda/a.cuda.o": 10.0, "/b/temp/csrc/ops.o": 1.0, "/b/temp/csrc/cuda/b.cuda.o": 6.0}


def test_device_parts_come_from_sccaches_debug_log() -> None:
    assert scaling.device_parts(SCCACHE_LOG) == {"a.cuda": {
        "front": 1.0, "ptx:compute_80": 2.0, "cubin:compute_80": 1.0, "ptx:compute_90": 2.5, "cubin:compute_90": 1.5}}


def test_an_nvcc_job_becomes_a_front_parallel_architectures_and_a_back() -> None:
    tasks = {t.name: t for t in scaling.graph(scaling.ninja_jobs(NINJA_LOG), scaling.device_parts(SCCACHE_LOG))}
    a = "/b/temp/csrc/cuda/a.cuda.o"
    assert tasks[f"{a}:back"].seconds == pytest.approx(10.0 - 8.0)  # what the job took beyond the timed parts
    assert set(tasks[f"{a}:back"].after) == {f"{a}:cubin:compute_80", f"{a}:cubin:compute_90"}
    assert tasks[f"{a}:cubin:compute_90"].after == (f"{a}:ptx:compute_90",)
    assert tasks["/b/temp/csrc/cuda/b.cuda.o"].seconds == 6.0  # no parts timed: one task


def test_list_scheduling_between_the_floor_and_the_serial_sum() -> None:
    tasks = scaling.graph(scaling.ninja_jobs(NINJA_LOG), scaling.device_parts(SCCACHE_LOG))
    total = sum(t.seconds for t in tasks)
    floor = scaling.critical_path(tasks)
    assert floor == pytest.approx(1.0 + 2.5 + 1.5 + 2.0)  # front, the slower architecture, back
    assert scaling.list_schedule(tasks, 1) == pytest.approx(total)
    assert scaling.list_schedule(tasks, 64) == pytest.approx(max(floor, 6.0))
    walls = [scaling.list_schedule(tasks, n) for n in (1, 2, 4, 8)]
    assert walls == sorted(walls, reverse=True) and walls[-1] >= floor


def test_the_table_compares_one_machine_with_build_servers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".ninja_log").write_text(NINJA_LOG)
    (tmp_path / "sccache.log").write_text(SCCACHE_LOG)
    assert scaling.main(["--ninja-log", str(tmp_path / ".ninja_log"), "--sccache-log", str(tmp_path / "sccache.log"),
                         "--cores", "1", "--servers", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "| this machine, nvcc one architecture after another | 1 | 20.0 | 1.0x |" in out
    assert "| 2 build servers (sccache-dist) | 2 |" in out
    assert scaling.main(["--ninja-log", str(tmp_path / "missing")]) == 2


def test_only_the_nvcc_jobs_of_build_ninja_are_split() -> None:
    rules = ("rule cuda_compile\nbuild /b/temp/csrc/cuda/a.cuda.o: cuda_compile /s/csrc/cuda/a.cu\n"
             "build /b/temp/csrc/a.cuda.o: compile /s/csrc/a.cuda.cpp\n")
    assert scaling.cuda_outputs(rules) == {"/b/temp/csrc/cuda/a.cuda.o"}
    jobs = {"/b/temp/csrc/cuda/a.cuda.o": 10.0, "/b/temp/csrc/a.cuda.o": 3.0}  # the same file name, C++
    names = {t.name for t in scaling.graph(jobs, scaling.device_parts(SCCACHE_LOG),
                                           nvcc_jobs=scaling.cuda_outputs(rules))}
    assert "/b/temp/csrc/a.cuda.o" in names and "/b/temp/csrc/cuda/a.cuda.o:back" in names


def test_the_critical_chain_is_the_floor() -> None:
    tasks = scaling.graph(scaling.ninja_jobs(NINJA_LOG), scaling.device_parts(SCCACHE_LOG))
    chain = scaling.critical_chain(tasks)
    assert [t.name.rsplit(":", 1)[-1] for t in chain] == ["front", "compute_90", "compute_90", "back"]
    assert sum(t.seconds for t in chain) == pytest.approx(scaling.critical_path(tasks))
