"""Faults a build must survive: a terminated build leaves no process and no file behind; two builds of one
target are serialised; a project in a path with a space and non-ASCII characters builds; a read-only checkout
builds when the outputs are pointed elsewhere.

They build tests/fixtures/tiny_ext (one C++ file on torch's headers) CPU-only, with the real toolchain.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"

pytestmark = [pytest.mark.slow, pytest.mark.extended]


def farm(*args: str, **kwargs: object) -> list[str]:
    return [sys.executable, "-m", "ci", *args]


def env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "250", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def copy_project(dest: Path) -> Path:
    shutil.copytree(TINY, dest, ignore=shutil.ignore_patterns("build", "wheelhouse", "*.egg-info"))
    return dest


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (the unique folder of one test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and str(os.getpid()) != entry.name:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_compiler(marker: str, child: subprocess.Popen[str], timeout: float = 600) -> None:
    """Wait until a C++ compiler process works on the project under ``marker``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise AssertionError(f"the build ended before the compiler started:\n{child.stdout.read()[-3000:]}")
        if any("cc1plus" in p or " c++ " in p for p in processes_mentioning(marker)):
            return
        time.sleep(0.2)
    raise AssertionError("the compiler never started")


@pytest.mark.parametrize(("via", "signum", "code"), [("farm", signal.SIGTERM, 143), ("farm", signal.SIGINT, 130),
                                                     ("nox", signal.SIGINT, 130), ("nox", signal.SIGTERM, 143)])
def test_signal_to_the_build_stops_the_whole_tree_and_leaves_nothing(tmp_path: Path, via: str, signum: int,
                                                                      code: int) -> None:
    marker = f"farm-fault-{via}-{signum}-{os.getpid()}"
    project = copy_project(tmp_path / marker / "proj")
    out = tmp_path / marker / "out"
    args = ["build", "--project", str(project), "--cpu", "--wheelhouse", str(out / "wh"), "--build-dir",
            str(out / "build")]
    if via == "nox":
        nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
        cmd = [nox, "-f", str(ROOT / "noxfile.py"), "-s", "build", "--", *args[1:]]
    else:
        cmd = farm(*args)
    # Its own session: the signal reaches the farm (or nox) alone, as a CI runner's cancel does, not a
    # terminal's whole foreground group.
    # SIGINT back to its default: a test run started in the background by a non-interactive shell inherits
    # SIGINT ignored, and nox (unlike the farm, which installs its handlers) would keep ignoring it.
    child = subprocess.Popen(cmd, cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=default_sigint)
    try:
        wait_for_compiler(marker, child)
        child.send_signal(signum)
        output, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == code, output[-3000:]
    assert "Traceback" not in output
    if signum == signal.SIGTERM:  # the farm's line (nox's would be "Interrupted by keyboard", exit 130)
        assert "interrupted (signal 15): child processes stopped" in output, output[-3000:]
    time.sleep(0.5)
    assert processes_mentioning(marker) == []
    assert not list((out / "wh").rglob("*.whl")) if (out / "wh").exists() else True
    staging = out / "build" / "staging"
    assert not staging.exists() or not any(staging.iterdir())


def test_two_builds_of_one_target_in_an_odd_path_are_serialised(tmp_path: Path) -> None:
    base = tmp_path / "dossier ü with space"
    project = copy_project(base / "projet é")
    out = base / "sortie ß"
    args = farm("build", "--project", str(project), "--cpu", "--wheelhouse", str(out / "wh"), "--build-dir",
                str(out / "build"))
    first = subprocess.Popen(args, cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for_compiler("sortie ß", first)
    second = subprocess.run(args, cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=900)
    first_out, _ = first.communicate(timeout=900)
    assert first.returncode == 0, first_out[-3000:]
    assert second.returncode == 0, second.stdout[-3000:]
    assert "waiting for the lock on the build of tiny_ext-torch2.13-cpu-cp311-linux_x86_64" in second.stdout
    wheels = list((out / "wh").rglob("*.whl"))
    assert [w.name.split("-")[1] for w in wheels] == ["0.1.0+pt2.13.cpu"]
    report = (wheels[0].parent / "report.json").read_text()
    assert '"ok": false' not in report


def test_read_only_checkout_builds_with_outputs_elsewhere(tmp_path: Path) -> None:
    source = copy_project(tmp_path / "src")
    mounted = tmp_path / "readonly"
    mounted.mkdir()
    bind = subprocess.run(["mount", "--bind", str(source), str(mounted)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {bind.stderr.decode().strip()}")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(mounted)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only")
        refused = subprocess.run(farm("build", "--project", str(mounted), "--cpu"), cwd=ROOT, env=env(), text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert refused.returncode == 3
        assert refused.stdout.strip().splitlines()[-1].startswith(
            f"error: the wheelhouse is not writable ({mounted / 'wheelhouse'}): Read-only file system; "
            "point it at a writable folder with --wheelhouse DIR or FARM_WHEELHOUSE=DIR")
        # The build folder is in the farm's cache already; only the wheels need another place.
        built = subprocess.run(farm("build", "--project", str(mounted), "--cpu"), cwd=ROOT, text=True,
                               env={**env(), "FARM_WHEELHOUSE": str(tmp_path / "w")},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert built.returncode == 0, built.stdout[-3000:]
        assert list((tmp_path / "w").rglob("tiny_ext-0.1.0+pt2.13.cpu-*.whl"))
    finally:
        subprocess.run(["umount", str(mounted)], capture_output=True)
