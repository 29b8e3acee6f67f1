"""ci/linux/admissionbench.py: the medians and the ratio it reports, and ``bench-builds --admission-pairs`` refused
before anything is cloned or built (the builds themselves are the benchmark, run by hand: docs/heavy-builds.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ci.linux import admissionbench

ROOT = Path(__file__).resolve().parents[3]


def test_the_medians_of_each_mode_and_on_over_off() -> None:
    rows = [admissionbench.Row(1, "on", 100.0, compile_seconds=80.0), admissionbench.Row(1, "off", 98.0),
            admissionbench.Row(2, "off", 104.0), admissionbench.Row(2, "on", 101.0, compile_seconds=82.0),
            admissionbench.Row(3, "on", 130.0, compile_seconds=90.0), admissionbench.Row(3, "off", 99.0)]
    summary = admissionbench.medians(rows)
    assert (summary["on_seconds"], summary["off_seconds"], summary["on_compile_seconds"]) == (101.0, 99.0, 82.0)
    assert summary["on_over_off"] == round(101 / 99, 4)
    assert "on_over_off" not in admissionbench.medians(rows[:1])


def test_pairs_below_one_are_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run([sys.executable, "-m", "ci", "bench-builds", "--project", "tests/fixtures/classic_ext",
                           "--admission-pairs", "0", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--admission-pairs takes a whole number from 1" in lines[0], done.stderr
    assert not out.exists()
