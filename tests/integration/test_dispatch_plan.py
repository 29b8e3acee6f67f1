"""dispatch.yml's commands end to end: the plan step's command run as the runner runs it (bash, then
``python -m ci``), its bad input stopping the first job with one line, and a dispatched release merged into a
published one that must never have a file replaced (the in-process tests: tests/unit/release/test_dispatch.py).
Nothing here reaches the network."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ci.errors import UsageError
from ci.gha import jobs as gha
from ci.gha import steps as gha_steps
from ci.release import dispatch
from ci.release import manifest as release_manifest
from ci.release.install_lines import pip_check
from ci.universe import project
from ci.universe.project import reading
from tests.unit.release.test_dispatch import (
    ARM,
    CLASSIC,
    FARM_REF,
    ROOT,
    VERSION,
    WIN,
    X86,
    fake_built,
    published_release,
)


@pytest.fixture(scope="module")
def classic_documents() -> dict[str, dict[str, Any]]:
    return gha.render(gha_steps.context(reading.load(CLASSIC), gha_steps.FarmSource("owner/farm", FARM_REF)))


def run_plan(documents: dict[str, dict[str, Any]], tmp_path: Path, inputs: dict[str, str], *,
             cwd: Path = ROOT, ref: tuple[str, str] = ("branch", "main")) -> tuple[subprocess.CompletedProcess[str],
                                                                                      list[str] | None]:
    """The plan step's script, with the environment GitHub gives it: its ``env:`` with the inputs filled in (an
    input left out is the empty string, as GitHub passes it), the workflow's ``env:``, GITHUB_OUTPUT."""
    doc = documents["dispatch.yml"]
    step = next(s for s in doc["jobs"]["plan"]["steps"] if s.get("id") == "plan")
    values = {"os": "all", "publish": "false", **inputs}
    env = {k: re.sub(r"\$\{\{ inputs\.(\w+) \}\}", lambda m: values.get(m.group(1), ""), v)
           for k, v in step["env"].items()}
    workflow_env = {k: v.replace("${{ github.workspace }}", str(cwd)) for k, v in doc.get("env", {}).items()}
    if "PYTHONPATH" in workflow_env:
        workflow_env["PYTHONPATH"] = str(ROOT)  # the farm's checkout (.farm on the runner)
    output = tmp_path / "github_output"
    output.unlink(missing_ok=True)
    script = step["run"].replace("python -m", f"{sys.executable} -m")
    result = subprocess.run(["bash", "-c", script], cwd=cwd, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200", **workflow_env, **env,
                                                           "GITHUB_OUTPUT": str(output), "GITHUB_REF_TYPE": ref[0],
                                                           "GITHUB_REF_NAME": ref[1]})
    if not output.is_file():
        return result, None
    (line,) = output.read_text().splitlines()
    assert line.startswith("targets=")
    return result, json.loads(line.removeprefix("targets="))


def matrix_ids(*args: str, cwd: Path = ROOT) -> list[str]:
    """``python -m ci matrix --json ARGS``'s target ids: the farm's selection as every tool sees it."""
    env = {**os.environ, "COLUMNS": "200", **({"FARM_PROJECT": str(cwd)} if cwd != ROOT else {})}
    result = subprocess.run([sys.executable, "-m", "ci", "matrix", "--json", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout
    return [t["id"] for t in json.loads(result.stdout)["targets"]]


@pytest.mark.skipif(os.name == "nt", reason="the runners' bash")
def test_the_plan_selects_exactly_what_was_asked(documents: dict[str, dict[str, Any]],
                                                 classic_documents: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    # Ids of both OSes, separated by a comma and spaces, in the workflows' order.
    result, ids = run_plan(documents, tmp_path, {"targets": f" {WIN},  {X86} "})
    assert result.returncode == 0, result.stdout
    assert ids == [X86, WIN] and WIN in result.stdout
    # A filter covers every architecture the workflows build: matrix --json's x86_64 and aarch64 selections.
    result, ids = run_plan(documents, tmp_path, {"cuda": "13", "os": "linux"})
    # Beside each abi3 wheel, the free-threaded CPythons' wheels of the cell's torch (abi3 does not cover them).
    threaded = [X86.replace("cp310abi3", p) for p in ("cp313t", "cp314t")]
    assert ids == [*matrix_ids("--os", "linux", "--cuda", "13"),
                   *matrix_ids("--os", "linux", "--cuda", "13", "--arch", "aarch64")] == [
        X86, *threaded, ARM, *(t.replace("x86_64", "aarch64") for t in threaded)]
    result, ids = run_plan(documents, tmp_path, {"torch": "2.10"})
    assert ids == matrix_ids("--os", "all", "--torch", "2.10") == [
        f"fusedops-stable-cu128-{p}-{platform}" for platform in ("linux_x86_64", "win_amd64")
        for p in ("cp310abi3", "cp313t", "cp314t")]
    result, ids = run_plan(documents, tmp_path, {"os": "windows"})
    assert ids == [t for t in matrix_ids("--os", "windows") if "-cu124-" not in t]
    # Ids and filters together: the filters must keep every named target.
    result, ids = run_plan(documents, tmp_path, {"targets": ARM, "cuda": "13.0", "os": "linux"})
    assert ids == [ARM]
    # Another project, from the farm's checkout (FARM_PROJECT, PYTHONPATH: the workflow's env).
    result, ids = run_plan(classic_documents, tmp_path, {"python": "3.12", "os": "linux"}, cwd=CLASSIC)
    assert result.returncode == 0, result.stdout
    assert ids == [*matrix_ids("--os", "linux", "--python", "3.12", cwd=CLASSIC),
                   *matrix_ids("--os", "linux", "--python", "3.12", "--arch", "aarch64", cwd=CLASSIC)]
    assert ids and all("-cp312-" in i for i in ids)
    # Publishing is planned on a v* tag only.
    result, ids = run_plan(documents, tmp_path, {"targets": X86, "publish": "true"}, ref=("tag", "v0.1.0"))
    assert ids == [X86]


@pytest.mark.skipif(os.name == "nt", reason="the runners' bash")
@pytest.mark.parametrize(("inputs", "line"), [
    ({"targets": "fusedops-stable-cu999-cp310abi3-linux_x86_64"},
     "error: fusedops's workflows build no such target (fusedops-stable-cu999-cp310abi3-linux_x86_64): they build "),
    ({"targets": f"{X86} nope"}, "error: fusedops's workflows build no such target (nope): "),
    ({"targets": "fusedops-stable-cu124-cp310abi3-linux_x86_64"},
     "error: a local stand-in, which no workflow builds (fusedops-stable-cu124-cp310abi3-linux_x86_64): GitHub "
     "builds fusedops-stable-cu128-cp310abi3-linux_x86_64 (CUDA 12.8) in its place"),
    ({"cuda": "12.4"}, "error: a local stand-in, which no workflow builds (fusedops-stable-cu124-"),
    ({"python": "3.9"}, "error: fusedops builds abi3 wheels for CPython 3.10 and newer (3.9)"),
    ({"cuda": "11.8"}, "error: unknown CUDA version (11.8)"),
    ({"torch": "2.9"}, "error: the workflows build fusedops-stable-cu128-cp310abi3-linux_x86_64 with torch 2.10"),
    ({"targets": X86, "cuda": "13.2"}, f"error: the filters leave out a named target ({X86}: CUDA 13.2, OS all)"),
    ({"targets": X86, "os": "windows"}, f"error: the filters leave out a named target ({X86}: OS windows)"),
    ({}, "error: no targets and no filters given"),
    ({"targets": X86, "publish": "true"}, "error: publishing needs a release tag (main)"),
    ({"os": "macos"}, "error: unknown os input (macos)"),
])
def test_bad_input_stops_the_plan_with_one_line(documents: dict[str, dict[str, Any]], tmp_path: Path,
                                               inputs: dict[str, str], line: str) -> None:
    result, ids = run_plan(documents, tmp_path, inputs)
    assert result.returncode == 2, result.stdout
    assert ids is None  # no output: the jobs after the plan never start, nothing is built or published
    last = result.stdout.strip().splitlines()
    assert len([x for x in last if x.startswith("error:")]) == 1 and last[-1].startswith(line), result.stdout


@pytest.mark.skipif(os.name == "nt", reason="the runners' bash")
def test_a_filter_that_selects_nothing_in_another_project_is_one_line(
        classic_documents: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    result, ids = run_plan(classic_documents, tmp_path, {"python": "3.8"}, cwd=CLASSIC)
    assert result.returncode == 2 and ids is None
    assert result.stdout.strip().splitlines()[-1].startswith("error: classic-ext has no target for Python (3.8)")
    result, ids = run_plan(classic_documents, tmp_path, {"targets": X86}, cwd=CLASSIC)
    assert result.returncode == 2 and "classic-ext's workflows build no such target" in result.stdout


def test_a_published_file_is_never_replaced_and_the_release_must_match(
        config: project.ProjectConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pip_check, "check_install_lines", lambda out, manifest: {})
    target = next(t for t in dispatch.workflow_targets(config) if t.id == X86)
    fake_built(tmp_path / "artifacts", target, VERSION, body="rebuilt = True\n")  # other bytes, same name
    dispatch.assemble(config, tmp_path / "artifacts", [X86], tmp_path / "release", "v0.1.0", reaudit=False)
    published = published_release(tmp_path, config, [X86, WIN])
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "ci", "workflows", "--dispatch-merge", str(tmp_path / "release"),
                             "--published", str(published), "--out", str(tmp_path / "merged")], cwd=ROOT, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 2
    assert result.stdout.strip().splitlines()[-1].startswith(
        "error: the release has a file of that name with other bytes (fusedops-0.1.0-cp310-abi3-manylinux_2_28_x86_64"
        ".whl): a published file is never replaced")
    assert not (tmp_path / "merged").exists()
    # Another version's release (the tag's wheels are of 0.1.0) is refused too.
    other = json.loads((published / release_manifest.MANIFEST).read_text())
    other["version"] = "0.2.0"
    (published / release_manifest.MANIFEST).write_text(json.dumps(other))
    with pytest.raises(UsageError, match=r"another version than the release \(0.1.0 vs 0.2.0\)"):
        dispatch.merge(tmp_path / "release", published, tmp_path / "merged")
