"""``workflows`` and ``matrix`` end to end: ``python -m ci`` run as a subprocess writes, checks and lints the
workflows and lists the targets they have jobs for (the in-process tests: tests/unit/gha/test_workflows.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.errors import UsageError
from ci.gha import jobs as gha
from ci.gha import workflows
from ci.universe import matrix, project
from tests.unit.gha.test_workflows import CLASSIC, FARM_REF, FOLDER, ROOT


def run_ci(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_every_target_of_the_matrix_is_a_job_named_by_its_id(committed: dict[str, str]) -> None:
    # The one source of truth, as any tool sees it: `python -m ci matrix --json --os all`.
    result = run_ci("matrix", "--json", "--os", "all")
    assert result.returncode == 0, result.stdout
    data = json.loads(result.stdout[result.stdout.index("{"):])
    # A local stand-in (cu124, the Debian toolkit standing in for cu128 here) is never built on GitHub.
    stand_ins = {c.name for c in matrix.CELLS if c.stand_in_for}
    released = [t for t in data["targets"] if t["cell"] not in stand_ins]
    ids = {t["id"] for t in released}
    linux = {t["id"] for t in released if t["os"] == "linux"}
    x86 = {t["id"] for t in released if t["os"] == "linux" and t["arch"] == "x86_64"}
    arm = {t["id"] for t in released if t["os"] == "linux" and t["arch"] == "aarch64"}
    assert {t.split("-")[2] for t in x86} == {c.name for c in matrix.CELLS if not c.stand_in_for}
    assert {t.split("-")[2] for t in arm} == {c.name for c in matrix.CELLS if c.aarch64 and not c.stand_in_for}
    assert linux == x86 | arm
    built = set(re.findall(r"^    name: build (\S+)$", committed["wheels.yml"], re.MULTILINE))
    tested = set(re.findall(r"^    name: import-test (\S+) ", committed["wheels.yml"], re.MULTILINE))
    gpu = set(re.findall(r"^    name: test-gpu (\S+)$", committed["gpu-tests.yml"], re.MULTILINE))
    # The self-hosted GPU runner is x86_64: the aarch64 wheels are import-tested on GitHub's arm64 runners.
    assert built == ids and tested == ids and gpu == x86
    cells = {t["cell"] for t in released if t["os"] == "linux" and t["arch"] == "x86_64"}
    arm_cells = {t["cell"] for t in released if t["os"] == "linux" and t["arch"] == "aarch64"}
    assert set(re.findall(r"^  container-(\w+):$", committed["ci.yml"], re.MULTILINE)) == cells
    assert set(re.findall(r"^  image-(\w+):$", committed["images.yml"], re.MULTILINE)) == cells
    assert set(re.findall(r"^  image-(\w+)-aarch64:$", committed["images.yml"], re.MULTILINE)) == arm_cells


def test_check_fails_on_a_hand_edit_with_one_line(tmp_path: Path) -> None:
    shutil.copytree(FOLDER, tmp_path / "wf")
    wheels = tmp_path / "wf" / "wheels.yml"
    wheels.write_text(wheels.read_text().replace("timeout-minutes: 180", "timeout-minutes: 999", 1))
    result = run_ci("workflows", "--check", "--out", str(tmp_path / "wf"))
    assert result.returncode == 2
    assert result.stdout.strip().splitlines()[-1] == (
        "error: the workflows and the matrix disagree (wheels.yml): run `python -m ci workflows render` and commit "
        "the result")
    assert "-    timeout-minutes: 999" in result.stdout
    assert run_ci("workflows", "--check").returncode == 0


def test_check_leaves_hand_written_workflows_alone_but_not_stale_generated_ones(
        config: project.ProjectConfig, tmp_path: Path) -> None:
    folder = tmp_path / "wf"
    shutil.copytree(FOLDER, folder)
    (folder / "mine.yml").write_text("name: mine\n")
    assert workflows.drift(folder, workflows.render(config)) == {}
    result = run_ci("workflows", "--check", "--out", str(folder))
    assert result.returncode == 0, result.stdout
    assert "hand-written, not compared: farm-build.yml, mine.yml" in result.stdout
    # A generated file the matrix stopped rendering (a renamed workflow) would go on running: drift.
    shutil.copy(folder / "images.yml", folder / "old-images.yml")
    differences = workflows.drift(folder, workflows.render(config))
    assert set(differences) == {"old-images.yml"} and "no longer generated: delete it" in differences["old-images.yml"]
    with pytest.raises(UsageError, match=r"disagree \(old-images.yml\)"):
        workflows.check(folder, workflows.render(config))


def test_writing_then_checking_round_trips(tmp_path: Path) -> None:
    assert run_ci("workflows", "--out", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(gha.FILES)
    assert all((tmp_path / n).read_text() == (FOLDER / n).read_text() for n in gha.FILES)


def test_another_project_gets_its_own_workflows_with_the_farm_pinned(tmp_path: Path) -> None:
    result = run_ci("workflows", "--project", str(CLASSIC), "--out", str(tmp_path))
    assert result.returncode == 2 and "--farm-ref" in result.stdout.strip().splitlines()[-1]
    result = run_ci("workflows", "--project", str(CLASSIC), "--out", str(tmp_path),
                    "--farm-repository", "owner/farm", "--farm-ref", FARM_REF)
    assert result.returncode == 0, result.stdout
    wheels = (tmp_path / "wheels.yml").read_text()
    # A target id with a dot becomes a valid job id; the job's name keeps the id.
    assert "  build-classic_ext-torch2_11-cu130-cp311-linux_x86_64:\n" in wheels
    assert "    name: build classic_ext-torch2.11-cu130-cp311-linux_x86_64\n" in wheels
    ci = (tmp_path / "ci.yml").read_text()
    assert f"ref: {FARM_REF}" in ci and "repository: owner/farm" in ci
    assert "FARM_PROJECT: ${{ github.workspace }}" in ci and "-r .farm/ci/requirements/farm.txt" in ci
    assert "pypi.org/project/classic-ext/" in (tmp_path / "release.yml").read_text()
    assert run_ci("workflows", "--project", str(CLASSIC), "--out", str(tmp_path), "--check").returncode == 0
    bad = run_ci("workflows", "--project", str(CLASSIC), "--out", str(tmp_path), "--farm-repository", "o/f",
                 "--farm-ref", "main")
    assert bad.returncode == 2 and "full 40-hex SHA" in bad.stdout


def test_the_workflows_pass_zizmor_and_the_workflow_schema() -> None:
    if workflows.tool("zizmor") is None or workflows.tool("check-jsonschema") is None:
        pytest.skip("zizmor and check-jsonschema are in ci/requirements/lint.txt (nox -s lint runs this too)")
    result = run_ci("workflows", "--lint")
    assert result.returncode == 0, result.stdout
    assert "No findings to report" in result.stdout and "ok -- validation done" in result.stdout
    # The hand-written reusable workflow and the farm's action are linted too, the action with its own schema.
    assert "farm-build.yml" in result.stdout
    assert re.search(r"--builtin-schema vendor\.github-actions \S*action\.yml", result.stdout), result.stdout
    assert re.search(r"\d+ workflows and action\.yml pass", result.stdout), result.stdout
