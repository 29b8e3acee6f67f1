"""``proc.run(tee=...)``: a build's output kept in a file and echoed as it comes (hidden lines left out), and a
watcher that stops the whole tree at the first line it objects to. Real child processes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ci import proc
from ci.errors import CommandFailed, FarmError, UsageError

SCRIPT = """
import subprocess, sys, time
# A grandchild in the same group, as ninja's compilers are: it must be stopped too.
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print("compiling a.cpp", flush=True)
print("TIP pass --env-dir and --sdist-extract-dir to keep the build environment", flush=True)
print("nvcc -c k.cu -gencode=arch=compute_80,code=sm_80", flush=True)
time.sleep(120)
print("never", flush=True)
"""


def test_the_output_is_kept_echoed_and_a_tip_hidden(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "out.log"
    code = "import sys; print('one'); print('TIP two', file=sys.stderr); print('three', end='')"
    with pytest.raises(CommandFailed) as err:
        proc.run([sys.executable, "-c", code + "; sys.exit(3)"], tee=log, hide=lambda line: line.startswith("TIP"),
                 what="the build failed", log=False)
    assert err.value.value == "exit status 3"
    assert log.read_text().splitlines() == ["one", "TIP two", "three"]
    assert capsys.readouterr().out.splitlines() == ["one", "three"]


def test_the_watcher_stops_the_tree_at_once_and_its_error_is_raised(tmp_path: Path) -> None:
    def watch(line: str) -> FarmError | None:
        return UsageError("own flags", line.split()[-1], "drop them") if "-gencode" in line else None

    marker = f"# farm-tee-test-{os.getpid()}-{tmp_path.name}"
    with pytest.raises(UsageError) as err:
        proc.run([sys.executable, "-c", SCRIPT.replace("time.sleep(120)", f"time.sleep(120)  {marker}")],
                 tee=tmp_path / "out.log", stop_when=watch, log=False)
    assert err.value.line() == "error: own flags (-gencode=arch=compute_80,code=sm_80): drop them"
    assert "never" not in (tmp_path / "out.log").read_text()  # stopped, not left to run its two minutes
    assert not alive_with(marker)


def test_what_the_stopped_build_prints_after_is_kept_but_not_echoed(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A compile refused at once ends its tool with a traceback before the tree is stopped: the user reads the
    farm's line, not torch's traceback (build-output.log keeps it)."""
    code = ("import sys; print('compiling'); print('REFUSED k.cu', flush=True); "
            "print('Traceback (most recent call last):', flush=True); sys.exit(1)")

    def watch(line: str) -> FarmError | None:
        return UsageError("refused", "k.cu", "fix it") if line.startswith("REFUSED") else None

    with pytest.raises(UsageError):
        proc.run([sys.executable, "-c", code], tee=tmp_path / "out.log", stop_when=watch, log=False)
    assert "Traceback" in (tmp_path / "out.log").read_text()
    assert capsys.readouterr().out.splitlines() == ["compiling", "REFUSED k.cu"]  # the line that stopped it too


def alive_with(marker: str) -> list[str]:
    """Processes whose command line holds ``marker``, once those already sent SIGKILL had a moment to go."""
    found: list[str] = []
    for _ in range(50):
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and entry.name != str(os.getpid()):
                try:
                    if marker.encode() in (entry / "cmdline").read_bytes():
                        found.append(entry.name)
                except OSError:
                    continue
        if not found:
            return found
        time.sleep(0.1)
    return found


def test_unset_variables_do_not_reach_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """``unset``: the child does not inherit them; this process keeps them (workflows lint hides GH_TOKEN)."""
    monkeypatch.setenv("CEF_TEST_SECRET", "s")
    code = "import os; print(os.environ.get('CEF_TEST_SECRET', '-'), os.environ.get('CEF_TEST_ADDED'))"
    out = proc.run([sys.executable, "-c", code], env={"CEF_TEST_ADDED": "a"}, unset=("CEF_TEST_SECRET",),
                   capture=True, log=False).stdout.split()
    assert out == ["-", "a"]
    assert os.environ["CEF_TEST_SECRET"] == "s"
    assert proc.child_environ(None) is None
