"""Configured commands run where the project's source cannot shadow the wheel, and prove where the package
came from (issue 19, defect 3: a flat-layout project's tests imported its source folder, not the wheel)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.testing import gpu_lanes
from ci.universe import project_commands


def _flat_project(tmp_path: Path) -> tuple[Path, Path]:
    """A flat layout (package folder at the project root) and a separate install folder holding the 'wheel'."""
    project = tmp_path / "proj"
    (project / "flatpkg").mkdir(parents=True)
    (project / "flatpkg" / "__init__.py").write_text("WHERE = 'source'\n")
    installed = tmp_path / "site"
    (installed / "flatpkg").mkdir(parents=True)
    (installed / "flatpkg" / "__init__.py").write_text("WHERE = 'wheel'\n")
    return project, installed


def test_the_origin_check_fails_when_the_source_folder_shadows_the_wheel(tmp_path: Path) -> None:
    project, installed = _flat_project(tmp_path)
    env = {"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"}
    shadowed = subprocess.run(project_commands.origin_check(sys.executable, "flatpkg", installed), cwd=project, env=env,
                              capture_output=True, text=True)
    assert shadowed.returncode == 1
    assert f"flatpkg would be imported from {project / 'flatpkg' / '__init__.py'}, not from the installed wheel" \
        in shadowed.stderr
    with project_commands.scratch_folder() as scratch:
        clean = subprocess.run(project_commands.origin_check(sys.executable, "flatpkg", installed), cwd=scratch,
                env=env,
                               capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.strip() == f"flatpkg comes from the installed wheel: {installed / 'flatpkg' / '__init__.py'}"


def test_the_gpu_lanes_run_commands_outside_the_project(tmp_path: Path) -> None:
    """run_lane ran in the project's folder: a flat layout's `import pkg` found the source (defect 3)."""
    project, installed = _flat_project(tmp_path)
    subject = gpu_lanes.Subject(Path(sys.executable), (str(installed),), "test", wheel=tmp_path / "x.whl")
    out = tmp_path / "out"
    out.mkdir()
    command = ("python", "-c", "import flatpkg, sys; sys.exit(0 if flatpkg.WHERE == 'wheel' else 3)")
    lane = gpu_lanes.run_lane("smoke", command, subject, out, project)
    assert lane.status == "passed", lane
    assert gpu_lanes.run_origin(subject, "flatpkg").status == "passed"
    missing = gpu_lanes.run_origin(subject, "no_such_module_anywhere")
    assert missing.status == "failed" and "no_such_module_anywhere is not importable" in missing.detail


def test_project_placeholder_and_the_interpreter_under_test(tmp_path: Path) -> None:
    py = Path("/envs/t/bin/python")
    assert project_commands.expand(("python", "{project}/tests/smoke.py"), python=py, project_root=tmp_path) == [
        str(py), f"{tmp_path}/tests/smoke.py"]
    assert project_commands.expand(("pytest", "{project}/tests", "-q", "--out={out}"), python=py, project_root=tmp_path,
                           out="/r") == [str(py), "-m", "pytest", f"{tmp_path}/tests", "-q", "--out=/r"]


@pytest.mark.parametrize(("command", "hint"), [
    (("pytest", "tests", "-q"), "write {project}/tests instead of tests"),
    (("python", "tests/run.py"), "write {project}/tests/run.py instead of tests/run.py"),
    (("pytest", "{project}/tests"), ""),
    (("python", "-c", "import x"), ""),
])
def test_a_relative_path_in_a_failed_command_gets_the_placeholder_hint(tmp_path: Path, command: tuple[str, ...],
                                                                      hint: str) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "run.py").write_text("")
    got = project_commands.relative_path_hint(command, tmp_path)
    assert (hint in got) if hint else got == ""


def test_a_logged_command_keeps_its_brackets() -> None:
    """The replayable line of the origin check (and any [tool.cuda-ext-farm] text) is not rich markup."""
    from ci import proc
    from ci.log import log

    with log.progress.capture() as captured:
        proc.log_command(["python", "-c", "d[k] [tool.cuda-ext-farm.commands]"])
    assert "'d[k] [tool.cuda-ext-farm.commands]'" in captured.get()


def test_a_lane_writes_nothing_into_the_project(tmp_path: Path) -> None:
    """pytest's cache and bytecode would land beside the project's tests (the farm writes only wheelhouse/)."""
    project = tmp_path / "proj"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_one.py").write_text("import helper\n\ndef test_one():\n    assert helper.X == 1\n")
    (project / "tests" / "helper.py").write_text("X = 1\n")
    out = tmp_path / "out"
    out.mkdir()
    subject = gpu_lanes.Subject(Path(sys.executable), (), "test", wheel=tmp_path / "x.whl")
    lane = gpu_lanes.run_lane("default", ("pytest", "{project}/tests", "-q"), subject, out, project)
    assert lane.status == "passed" and lane.passed == 1, lane
    written = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    assert written == ["tests", "tests/helper.py", "tests/test_one.py"], written
