"""ci/builds/progress/: the plan's one line (jobs x --threads from cores, memory and records), the deadline's
values, the records kept in the farm's cache and the ETA from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ci.builds.progress import deadline, plan, records, watch
from ci.errors import UsageError

GIB = 2**30


def test_ample_memory_keeps_one_job_per_core_and_threads_0() -> None:
    chosen = plan.choose(4, 64 * GIB, 1.0 * GIB, 4, None)
    assert (chosen.jobs, chosen.threads) == (4, None)
    assert chosen.line == "4 jobs x --threads 0: 64.0 GiB available, 4.0 GiB per compile expected (recorded)"


def test_short_memory_lowers_jobs_and_threads_to_what_fits() -> None:
    chosen = plan.choose(16, int(15.6 * GIB), 1.55 * GIB, 4, None)
    assert (chosen.jobs, chosen.threads) == (10, 1)  # two whole compiles fit, 8 architectures < 16 cores
    assert chosen.line == "10 jobs x --threads 1: 15.6 GiB available, 1.6 GiB per compile expected (recorded)"
    assert plan.choose(16, 6 * GIB, 2 * GIB, 4, None)[:2] == (3, 1)


def test_short_memory_keeps_threads_0_when_fewer_whole_compiles_keep_the_cores_busy() -> None:
    """Two compiles of 4 architectures at once occupy 4 cores as four of 2 would, and hold their front ends twice
    instead of four times."""
    chosen = plan.choose(4, int(15.6 * GIB), 1.55 * GIB, 4, None)
    assert (chosen.jobs, chosen.threads) == (2, None)
    assert chosen.line == "2 jobs x --threads 0: 15.6 GiB available, 6.2 GiB per compile expected (recorded)"
    # the heavy fixture on 2 CPUs: 1.65 GiB with 2 of its 4 architectures at once (--threads 0 is the CPU count)
    assert plan.choose(2, int(2.3 * GIB), 1.65 * GIB / 2, 4, None)[:2] == (1, None)


def test_the_users_max_jobs_wins_with_one_warning_when_the_record_says_it_will_not_fit() -> None:
    chosen = plan.choose(16, 6 * GIB, 1 * GIB, 4, 8)
    assert chosen.jobs == 8 and chosen.threads is None
    assert chosen.warning.startswith("MAX_JOBS=8 asks for 8 compiles at once, 4.0 GiB each expected (recorded), "
                                     "6.0 GiB available")
    assert plan.choose(16, 64 * GIB, 1 * GIB, 4, 8).warning == ""


def test_with_the_admission_off_the_plan_is_a_job_per_core_and_threads_0(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_COMPILE_ADMISSION", "off")
    chosen = plan.for_project("p", 4, 2, 2 * GIB, None, cache=tmp_path)
    assert (chosen.jobs, chosen.threads) == (2, None) and "not admitted by memory (FARM_COMPILE_ADMISSION=off)" in (
        chosen.line)
    assert plan.env(chosen) == {"MAX_JOBS": "2", "FARM_COMPILE_ADMISSION": "off"}
    monkeypatch.setenv("FARM_COMPILE_ADMISSION", "maybe")
    with pytest.raises(UsageError, match="FARM_COMPILE_ADMISSION is neither on nor off"):
        plan.enabled()


@pytest.mark.parametrize(("value", "seconds"), [("5h30m", 19800), ("90m", 5400), ("45s", 45), ("3600", 3600)])
def test_a_deadline_as_a_duration(value: str, seconds: int) -> None:
    assert deadline.parse(value, now=1000.0) == 1000.0 + seconds


def test_a_deadline_as_a_time_and_a_bad_one() -> None:
    assert deadline.parse("2026-01-31T23:30:00+00:00") == 1769902200
    with pytest.raises(UsageError, match=r"--deadline is neither a duration nor a time \('soon'\)"):
        deadline.parse("soon")


def test_the_line_at_the_deadline() -> None:
    stop = deadline.DeadlineReached("stopped at the deadline: 3 of 8 compiles done and cached", "3/8",
                                    "the same command resumes")
    assert stop.line() == "stopped at the deadline: 3 of 8 compiles done and cached; the same command resumes"
    assert stop.exit_code == 75


def test_records_keep_the_last_measured_compile_of_each_source(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    lines = [{"source": "a.cu", "peak": 2 * GIB, "seconds": 30.0, "archs": 4, "threads": 0, "compiled": True, "rc": 0},
             {"source": "a.cu", "peak": 10, "seconds": 0.1, "archs": 4, "threads": 0, "compiled": False, "rc": 0},
             {"source": "b.cu", "peak": GIB, "seconds": 9.0, "archs": 4, "threads": 0, "compiled": True, "rc": 1}]
    (work / records.RECORD).write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = records.prepare("proj", work, tmp_path / "cache")  # the last build's record folded in first
    assert records.load("proj", tmp_path / "cache") == {"a.cu": {"peak": 2 * GIB, "seconds": 30.0, "archs": 4,
                                                                  "threads": 0}}
    assert not (work / records.RECORD).exists()
    assert json.loads(Path(env["FARM_COMPILE_EXPECTED"]).read_text())["sources"] == records.load("proj",
                                                                                               tmp_path / "cache")


def test_a_compile_killed_above_its_record_raises_it_and_an_early_failure_does_not(tmp_path: Path) -> None:
    """The sources grew since the record (1 GiB): the compile was killed holding 5 GiB, which the next build expects
    (the record's duration kept); a failure at 0.2 GiB changes nothing; a source never recorded is added only when
    it held more than the heaviest recorded one (else its early failure would stand for its need)."""
    cache = tmp_path / "cache"
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps({"source": s, "peak": GIB, "seconds": 30.0, "archs": 2, "threads": 0,
                                         "compiled": True, "rc": 0}) + "\n" for s in ("a.cu", "b.cu")))
    records.merge("proj", first, cache)
    second = tmp_path / "second.jsonl"
    failed = [("a.cu", 5 * GIB, 1), ("b.cu", GIB // 5, 1), ("c.cu", GIB // 2, 2), ("d.cu", 3 * GIB, -9),
              ("e.cu", 4 * GIB, 1)]
    second.write_text("".join(json.dumps({"source": s, "peak": p, "seconds": 12.0, "archs": 2, "threads": 0,
                                          "compiled": s != "e.cu", "rc": rc}) + "\n" for s, p, rc in failed))
    kept = records.merge("proj", second, cache)
    assert kept["a.cu"] == {"peak": 5 * GIB, "seconds": 30.0, "archs": 2, "threads": 0}
    assert kept["b.cu"]["peak"] == GIB and "c.cu" not in kept and "e.cu" not in kept  # e: a cache hit's failure
    assert kept["d.cu"]["peak"] == 3 * GIB
    assert records.load("proj", cache) == kept


def test_the_eta_counts_the_recorded_durations_of_what_is_left() -> None:
    known = {f"k{i}.cu": {"seconds": 10.0 * (i + 1)} for i in range(4)}
    done = [{"source": "k3.cu", "seconds": 40.0}]
    assert watch.eta(done, 4, known, 2) == (10 + 20 + 30) / 2
    assert watch.eta([], None, known, 2) is None


def test_the_eta_follows_this_builds_pace_against_the_records() -> None:
    """The records were made on crowded cores: the compiles done so far took half their recorded time, so what is
    left is expected at half its records too."""
    known = {f"k{i}.cu": {"seconds": 100.0} for i in range(4)}
    done = [{"source": "k0.cu", "seconds": 50.0}, {"source": "k1.cu", "seconds": 50.0}]
    assert watch.eta(done, 4, known, 1) == 100.0
    assert watch.eta([{"source": "new.cu", "seconds": 30.0}], 5, known, 1) == 400.0  # nothing to compare: as recorded


def test_cache_hits_count_as_done_but_not_in_the_pace() -> None:
    """After a resume, hits of 1 s against records of 100 s: the compiles left are expected at their records (the
    pace of the one that ran, 1.0), not at the hits' pace (an ETA 100 times too short)."""
    known = {f"k{i}.cu": {"seconds": 100.0} for i in range(6)}
    done = [{"source": f"k{i}.cu", "seconds": 1.0, "compiled": False} for i in range(4)]
    done.append({"source": "k4.cu", "seconds": 100.0, "compiled": True})
    assert watch.eta(done, 6, known, 1) == 100.0


def test_a_deadline_is_resolved_once_at_the_start_and_one_already_past_is_refused() -> None:
    assert deadline.at_entry("90m", now=1769902200.0) == "2026-02-01T01:00:00+00:00"
    assert deadline.parse(deadline.at_entry("90m", now=1769902200.0)) == 1769902200 + 5400
    for past in ("0", "0m", "2020-01-01T00:00:00+00:00"):
        with pytest.raises(UsageError, match=r"--deadline has already passed"):
            deadline.at_entry(past, now=1769902200.0)
