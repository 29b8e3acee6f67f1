"""ci/linux/memorybench.py's figures (the ETA's error from a build's record) and ci/linux/memlimit.py's readings of
a cgroup's files (the peak and the out-of-memory kills), on records and folders written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.errors import UsageError
from ci.linux import memlimit, memorybench


def test_the_etas_error_is_the_last_shown_eta_against_when_the_last_compile_ended() -> None:
    known = {s: {"seconds": 10.0} for s in "abcd"}  # recorded: 10 s each; d takes 20 s this time
    lines = [{"source": s, "seconds": 10.0 if s != "d" else 20.0, "end": end, "rc": 0}
             for s, end in (("a", 10.0), ("b", 20.0), ("c", 30.0), ("d", 50.0))]
    errors, shares = memorybench.eta_errors(lines, 4, known, 1)
    assert errors == {"25%": -10.0, "50%": -10.0, "75%": -10.0}  # each ETA said 40, it ended at 50
    assert shares == {"25%": -0.25, "50%": round(-10 / 30, 3), "75%": -0.5}
    assert memorybench.eta_errors([], 4, known, 1) == ({}, {})


def test_no_eta_before_the_first_compile_ends() -> None:
    lines = [{"source": "a", "seconds": 40.0, "end": 40.0, "rc": 0}, {"source": "b", "seconds": 5.0, "end": 45.0,
                                                                       "rc": 0}]
    errors, _ = memorybench.eta_errors(lines, 2, {}, 1)
    assert errors["25%"] is None and errors["75%"] is None


@pytest.mark.parametrize(("version", "files", "peak"), [
    ("v1", {"memory.max_usage_in_bytes": "2147483648\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"
            "oom_kill 2\n"}, 2**31),
    ("v2", {"memory.peak": "1073741824\n", "memory.events": "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n"}, 2**30),
])
def test_a_cgroups_peak_and_oom_kills_from_its_files(tmp_path: Path, version: str, files: dict[str, str],
                                                     peak: int) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    group = memlimit.Cgroup(tmp_path, version)
    assert group.peak() == peak and group.oom_kills() == (2 if version == "v1" else 1)
    assert memlimit.Cgroup(tmp_path / "gone", version).oom_kills() == 0
    assert group.enter(["python", "-c", "1"])[-3:] == ["python", "-c", "1"]


def test_a_limit_in_dockers_form() -> None:
    assert memorybench.parse_limit("2.5g") == int(2.5 * 2**30) and memorybench.parse_limit("512m") == 512 << 20
    with pytest.raises(UsageError):
        memorybench.parse_limit("lots")
