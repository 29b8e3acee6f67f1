"""How a free-threaded target (``3.13t``) is built and import-tested on each Linux route (issue 48): its
interpreter found (a GIL build never stands for it; none at all: built once), cibuildwheel 3.x for cp313t in the
container with the free-threading group enabled, the project's commands under ``PYTHON_GIL=0`` and the GIL probe
after them, and the probe's line."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from ci import toolenv
from ci.builds import tail
from ci.linux import container, images
from ci.testing import gil_probe
from ci.toolchain import envs, free_threaded
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def fake_python(folder: Path, name: str, label: str) -> Path:
    """An executable ``name`` that answers the farm's probe as CPython ``label`` (``3.13`` or ``3.13t``) would."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {label}\necho {path}\n")
    path.chmod(0o755)
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="the free-threaded CPython is built on Linux")
def test_a_gil_build_never_stands_for_a_free_threaded_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = tmp_path / "built" / "python3.13t"
    monkeypatch.setattr(free_threaded, "ensure", lambda minor: built)
    # python3.13t on PATH that is a GIL build (a mislabelled link): not taken; nothing else: built once.
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    fake_python(tmp_path / "bin", "python3.13t", "3.13")
    assert envs.find_interpreter("3.13t", env={"PYENV_ROOT": str(tmp_path / "none")}) == built
    real = fake_python(tmp_path / "bin", "python3.13t", "3.13t")
    assert envs.find_interpreter("3.13t", env={"PYENV_ROOT": str(tmp_path / "none")}) == real
    explicit = fake_python(tmp_path / "other", "python", "3.13t")
    assert envs.find_interpreter("3.13t", env={"FARM_PYTHON_3_13t": str(explicit)}) == explicit


def test_a_free_threaded_target_builds_with_its_own_python() -> None:
    assert envs.build_python("3.13t", abi3=False) == "3.13t"
    assert images.python_tag("3.13t") == "cp313-cp313t" and images.python_tag("3.12") == "cp312-cp312"
    assert container.build_identifier("3.13t") == "cp313t-manylinux_x86_64"


@pytest.fixture
def threaded_job(tmp_path: Path) -> container.ContainerBuild:
    config = dataclasses.replace(reading.load(CLASSIC), python=("3.12", "3.13t"))
    (target,) = select(config, Selection(torch="2.11", python="3.13t"))
    spec = images.spec_for(target.cell, f"{images.BASE_REPO}:bookworm")
    return container.ContainerBuild(target=target, spec=spec, image=spec.tag, job="job1",
                                    outputs=tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "b"))


def test_the_container_builds_cp313t_with_cibuildwheel_3(threaded_job: container.ContainerBuild,
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The Debian image's free-threaded stage is the target's Python; cibuildwheel 4 dropped cp313t, so 3.x of its
    own lock builds it, with the free-threading group enabled; the test command runs the smoke command and the
    origin check with PYTHON_GIL=0, then the probe without it."""
    python = container.build_python(threaded_job.target, threaded_job.spec)
    assert python == "3.13t"
    env = container.cibuildwheel_env(threaded_job, python, "volume", None)
    assert (env["CIBW_BUILD"], env["CIBW_ENABLE"]) == ("cp313t-manylinux_x86_64", "cpython-freethreading")
    smoke, origin, probe = env["CIBW_TEST_COMMAND"].split(" && ")[1:4]
    assert smoke.startswith("PYTHON_GIL=0 python -c") and origin.startswith("PYTHON_GIL=0 python -c")
    assert probe.startswith("env -u PYTHON_GIL python -c") and probe.endswith(" classic_ext")
    locks: list[str] = []
    monkeypatch.setattr(toolenv, "farm_python", lambda lock="farm": locks.append(lock) or Path("/cibw3/python"))
    assert container.cibuildwheel_command(tmp_path, tmp_path / "out", python)[0] == "/cibw3/python"
    assert container.cibuildwheel_command(tmp_path, tmp_path / "out", "3.12")[0] == sys.executable
    assert locks == ["cibw313t"]
    # The symbol check in the image runs in the target's interpreter: its exports are the C API the wheel links.
    from ci.builds import free_threaded_cibw

    assert free_threaded_cibw.symbols_python(threaded_job.target) == "/opt/python/cp313-cp313t/bin/python"
    gil = dataclasses.replace(threaded_job, target=select(threaded_job.target.project,
                                                          Selection(torch="2.11", python="3.12"))[0])
    gil_env = container.cibuildwheel_env(gil, "3.12", "volume", None)
    assert "CIBW_ENABLE" not in gil_env and "PYTHON_GIL" not in gil_env["CIBW_TEST_COMMAND"]
    assert free_threaded_cibw.symbols_python(gil.target) == "python"


def test_the_probe_line_says_what_the_import_did() -> None:
    disabled = gil_probe.parse('noise\nfarm-gil-probe: {"module": "m", "free_threaded": true, "before": false, '
                               '"after": false, "enabled_by": []}\n')
    assert disabled is not None and disabled.stayed_disabled
    assert disabled.line().startswith("GIL: stayed disabled after importing m")
    enabled = gil_probe.parse('farm-gil-probe: {"module": "m", "free_threaded": true, "before": false, '
                              '"after": true, "enabled_by": ["m._C"]}')
    assert enabled is not None and not enabled.stayed_disabled
    assert enabled.line().startswith("GIL: re-enabled by m._C when m was imported")
    assert gil_probe.parse("no probe here") is None


def test_the_probe_runs_in_this_interpreter(tmp_path: Path) -> None:
    """The probe's script itself, in the running (GIL) interpreter, on a module of the standard library."""
    import subprocess

    done = subprocess.run(gil_probe.command(sys.executable, "json"), capture_output=True, text=True, check=True)
    report = gil_probe.parse(done.stdout)
    assert report is not None and report.module == "json" and not report.free_threaded and report.after


def test_pip_is_asked_for_torch_of_the_free_threaded_abi(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip takes no 3.13t as --python-version: the version 3.13 and the ABI cp313t (the torch versions offered)."""
    from ci import proc

    seen: list[list[str]] = []

    def run(cmd: list[str], **kwargs: object) -> object:
        seen.append([str(c) for c in cmd])
        return type("Done", (), {"stdout": "Available versions: 2.11.0, 2.10.0", "stderr": "", "returncode": 0})()

    monkeypatch.setattr(proc, "run", run)
    assert envs.offered_torch("3.13t", None) == ("2.11.0", "2.10.0")
    assert seen[-1][seen[-1].index("--python-version"):][:6] == ["--python-version", "3.13", "--implementation", "cp",
                                                                "--abi", "cp313t"]
    envs.offered_torch("3.12", None)
    assert "--abi" not in seen[-1] and seen[-1][seen[-1].index("--python-version") + 1] == "3.12"


def test_windows_builds_cp313t_with_cibuildwheel_3_too() -> None:
    """cibuildwheel 4 refuses cp313t on Windows as well: the same enable (its interpreter: windows/build.py)."""
    from pathlib import PureWindowsPath

    from windows import cibw

    config = dataclasses.replace(reading.load(CLASSIC), python=("3.12", "3.13t"))
    (target,) = select(config, Selection(torch="2.11", python="3.13t"), os="windows")
    env = cibw.cibuildwheel_env(target, cibw.build_python(target), PureWindowsPath("C:/torch"), {})
    assert (env["CIBW_BUILD"], env["CIBW_ENABLE"]) == ("cp313t-win_amd64", "cpython-freethreading")


def test_the_containers_probe_line_joins_the_report(threaded_job: container.ContainerBuild, tmp_path: Path) -> None:
    """cibuildwheel's output holds the probe's line: the build says it and keeps it as the check gil-import."""
    from ci.audit.checks import AuditResult
    from ci.builds import tail as publish

    audited = AuditResult(wheel=tmp_path / "w.whl", tags=(), size_bytes=0, libraries=(), sass=(), ptx=(), checks=())
    output = ('build noise\nfarm-gil-probe: {"module": "classic_ext", "free_threaded": true, "before": false, '
              '"after": true, "enabled_by": ["classic_ext._C"]}\n')
    (check,) = publish.with_gil_import(audited, threaded_job.target, output).checks
    assert (check.name, check.ok, check.warn) == ("gil-import", True, True)
    assert check.detail.startswith("GIL: re-enabled by classic_ext._C")
    gil_target = dataclasses.replace(threaded_job.target, python="3.12")
    assert publish.with_gil_import(audited, gil_target, output).checks == ()
