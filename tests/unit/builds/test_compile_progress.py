"""What a build says of its compiles: every compile's record in report.json, the slowest five once at the end,
the deadline's line once; the live progress as a line per finished compile in CI and logs, a rich bar with
done/total, elapsed and ETA on a terminal."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from ci import __main__ as entry
from ci.builds import report
from ci.builds.progress import deadline, watch
from ci.linux import host
from ci.log import log
from ci.nvcc import admission

ROOT = Path(__file__).resolve().parents[3]
GIB = 2**30


def line(source: str, seconds: float, peak: int, rc: int = 0) -> dict[str, object]:
    return {"source": source, "archs": 2, "threads": 0, "seconds": seconds, "peak": peak, "compiled": True,
            "rc": rc, "need": None, "how": "unknown", "waited": 0.0, "end": 0.0}


def bare_report() -> report.BuildReport:
    return report.BuildReport(target="t", project="p", mode="host", wheel="p-1.whl", sha256="0" * 64, size_bytes=1,
                              tags=(), sass=(), ptx=(), nvcc=None, torch="2.9", python="3.11", build_seconds=1.0,
                              checks=())


def test_the_report_holds_every_compile(tmp_path: Path) -> None:
    """Each finished compile's source, architectures, seconds and peak; a failed one and a line cut by a kill are
    not; a source compiled again (a resumed build) counts once, its last compile."""
    record = tmp_path / "compiles.jsonl"
    for fields in (line("csrc/b.cu", 9.0, 3 * GIB), line("csrc/a.cu", 4.0, GIB), line("csrc/c.cu", 1.0, 1, rc=1),
                   line("csrc/b.cu", 8.0, 2 * GIB)):
        admission.record_line(record, fields)
    with record.open("a") as f:
        f.write('{"source": "csrc/cut')
    rep = report.with_compiles(bare_report(), record, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert written["compiles"] == [
        {"source": "csrc/a.cu", "kind": "device", "archs": 2, "threads": 0, "seconds": 4.0, "peak": GIB,
         "compiled": True},
        {"source": "csrc/b.cu", "kind": "device", "archs": 2, "threads": 0, "seconds": 8.0, "peak": 2 * GIB,
         "compiled": True}]
    assert list(rep.compiles) == written["compiles"]
    # A build with nothing recorded (a CPU build) keeps its report as it is.
    assert report.with_compiles(bare_report(), tmp_path / "none.jsonl", tmp_path / "cpu") == bare_report()
    assert not (tmp_path / "cpu").exists()


def follow(record: Path, console: Console, lines: list[dict[str, object]], monkeypatch: pytest.MonkeyPatch,
           known: dict[str, object] | None = None) -> None:
    """Run :func:`watch.watching` while ``lines`` are appended to ``record`` (as the wrapper does)."""
    def write() -> None:
        for fields in lines:
            admission.record_line(record, fields)
            time.sleep(0.05)

    with watch.watching(record, record.parent, known or {}, 2, every=0.02, console=console):
        writer = threading.Thread(target=write)
        writer.start()
        writer.join()


def test_in_ci_and_logs_a_line_per_finished_compile_and_the_slowest_five_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    buffer = io.StringIO()
    console = Console(file=buffer, width=200)  # not a terminal: a log
    known = {f"csrc/k{i}.cu": {"seconds": 10.0 + i, "peak": GIB, "archs": 2, "threads": 0} for i in range(7)}
    compiles = [line(f"csrc/k{i}.cu", 10.0 + i, (i + 1) * GIB) for i in range(7)]
    follow(tmp_path / "compiles.jsonl", console, compiles, monkeypatch, known)
    said = buffer.getvalue().splitlines()
    per_compile = [x for x in said if x.startswith("compiled ")]
    assert [x.split(":")[0] for x in per_compile] == [f"compiled {i}/7" for i in range(1, 8)]
    assert "csrc/k0.cu 10.0 s, 1.0 GiB" in per_compile[0] and "ETA" in per_compile[0]
    assert per_compile[-1].endswith("ETA 0m00s")
    assert sum(x.startswith("slowest compiles") for x in said) == 1
    slow = said[said.index(next(x for x in said if x.startswith("slowest compiles"))) + 1:][:5]
    assert [x.split(":")[0].strip() for x in slow] == [f"csrc/k{i}.cu" for i in (6, 5, 4, 3, 2)]
    assert "\x1b[" not in buffer.getvalue()  # no bar, no cursor movement in a log
    # On GitHub Actions a terminal-looking console still gets lines.
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert type(watch.display(Console(file=io.StringIO(), force_terminal=True))) is watch.Lines


def test_host_compiles_are_said_as_such_and_a_total_the_build_outgrew_is_unknown() -> None:
    """In a container the total is the records' count (build.ninja is in the container): a source new since the
    records makes it short, and 3/2 would be false. A C/C++ compile has no architectures nor --threads."""
    host = {**line("csrc/module.cpp", 0.2, GIB // 10), "kind": "host", "archs": 1, "threads": 1}
    done = [line("csrc/h0.cu", 300.0, 3 * GIB), line("csrc/h1.cu", 200.0, 3 * GIB), host]
    assert watch.line_for(done[1], done[:2], 2, 500.0, 0.0).startswith("compiled 2/2: csrc/h1.cu")
    assert watch.line_for(host, done, 2, 500.0, 0.0).startswith("compiled 3/?: csrc/module.cpp 0.2 s, 0.1 GiB")
    assert watch.slowest(done) == ["csrc/h0.cu: 300.0 s, peak 3.0 GiB (2 architectures, --threads 0)",
                                   "csrc/h1.cu: 200.0 s, peak 3.0 GiB (2 architectures, --threads 0)",
                                   "csrc/module.cpp: 0.2 s, peak 0.1 GiB (a C/C++ compile)"]


def test_on_a_terminal_a_progress_bar_with_done_total_elapsed_and_eta(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=160)
    known = {f"csrc/k{i}.cu": {"seconds": 60.0, "peak": GIB, "archs": 2, "threads": 0} for i in range(4)}
    follow(tmp_path / "compiles.jsonl", console, [line("csrc/k0.cu", 60.0, GIB), line("csrc/k1.cu", 60.0, GIB)],
           monkeypatch, known)
    said = buffer.getvalue()
    assert "\x1b[" in said  # drawn and redrawn in place
    assert "━" in said  # rich's bar
    assert "2/4" in said and "ETA 1m00s" in said and "elapsed 0m0" in said  # two of 4 left at 60 s over 2 jobs
    assert not any(x.startswith("compiled ") for x in said.splitlines())
    assert said.count("slowest compiles") == 1


def test_the_line_at_the_deadline_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    """The landed build said it twice: in the target's closing row and as the last line."""
    def stopped(target: object, outputs: object, **_: object) -> report.BuildReport:
        with log.target("many_kernels-cu130", "build"):
            raise deadline.DeadlineReached("stopped at the deadline: 3 of 9 compiles done and cached", "3/9",
                                           "the same command resumes")

    monkeypatch.setattr(host, "build", stopped)
    code = entry._main(["build", "--project", str(ROOT / "tests" / "fixtures" / "many_kernels"), "--build-dir",
                        str(tmp_path / "b"), "--wheelhouse", str(tmp_path / "w")])
    out, err = capfd.readouterr()
    assert code == deadline.EXIT_DEADLINE
    assert (out + err).count("stopped at the deadline: 3 of 9 compiles done and cached") == 1, out + err
    assert "FAILED many_kernels-cu130" in err and "stopped at the deadline (3/9 compiles done)" in err
