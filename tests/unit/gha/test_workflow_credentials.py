"""The generated workflows' compile-cache settings: credentials come from secrets (GitHub masks a secret's value in the
logs, never a variable's), and the runner's cache service reaches only the builds that run on the runner."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ci.gha import jobs as gha
from ci.gha import steps as gha_steps
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
FARM_REF = "0123456789abcdef0123456789abcdef01234567"
#: Settings whose value is or may hold a credential: the shared storage's URL (``redis://:pw@host``) and every
#: token, password, key or secret.
CREDENTIAL = re.compile(r"^FARM_CCACHE_REMOTE$|TOKEN|PASSWORD|SECRET|_KEY$")
VARIABLE = re.compile(r"\bvars\.([A-Za-z0-9_]+)")
#: The runner's cache service, which sccache's ``gha`` backend reads.
CACHE_SERVICE = ("ACTIONS_RUNTIME_TOKEN", "ACTIONS_RESULTS_URL")


@pytest.fixture(scope="module")
def both(documents: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The farm's own workflows and another project's (which check the farm out at a pinned commit)."""
    ctx = gha_steps.context(reading.load(CLASSIC), gha_steps.FarmSource("owner/farm", FARM_REF))
    return {"farm": documents, "project": gha.render(ctx)}


def step_envs(doc: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    """(job, step, variable, value) of every environment a step sees, the workflow's and the job's included."""
    top = doc.get("env") or {}
    for key, job in doc["jobs"].items():
        for step in job.get("steps", []):
            env = {**top, **(job.get("env") or {}), **(step.get("env") or {})}
            for variable, value in env.items():
                yield key, str(step.get("name")), variable, str(value)


def test_no_workflow_reads_a_credential_from_a_repository_variable(
        both: dict[str, dict[str, dict[str, Any]]]) -> None:
    texts = {path.name: path.read_text(encoding="utf-8")
             for path in sorted((ROOT / ".github" / "workflows").glob("*.yml"))} | {
        "action.yml": (ROOT / "action.yml").read_text(encoding="utf-8")}
    for name, text in texts.items():
        read = set(VARIABLE.findall(text))
        assert not {v for v in read if CREDENTIAL.search(v)}, f"{name} reads a credential from vars: {read}"
    for which, documents in both.items():
        seen = set()
        for name, doc in documents.items():
            for job, step, variable, value in step_envs(doc):
                if CREDENTIAL.search(variable) and "${{" in value:
                    seen.add(variable)
                    assert "vars." not in value and ("secrets." in value or value == "${{ github.token }}"), \
                        f"{which} {name}: job {job}, step {step!r}: {variable}={value}"
        assert {"FARM_CCACHE_REMOTE", "FARM_SCCACHE_TOKEN"} <= seen, which


def build_steps(doc: dict[str, Any]) -> Iterator[tuple[str, list[dict[str, Any]], int]]:
    """(job, its steps, index) of every step that builds wheels through the farm."""
    for key, job in doc["jobs"].items():
        for index, step in enumerate(job.get("steps", [])):
            if re.search(r"\bpython -m ci build(?:-cuda)?(?![\w-])|\bnox -s build(?![\w-])", step.get("run", "")):
                yield key, job["steps"], index


def exports_cache_service(step: dict[str, Any]) -> bool:
    return any(name in str(step.get("with", {}).get("script", "")) for name in CACHE_SERVICE)


def test_every_build_reads_the_shared_storage_from_its_secret(both: dict[str, dict[str, dict[str, Any]]]) -> None:
    for which, documents in both.items():
        builds = [(name, key, steps[i]) for name, doc in documents.items() for key, steps, i in build_steps(doc)]
        assert any("build-cuda" in s["run"] for _, _, s in builds), which
        for name, key, step in builds:
            assert step["env"]["FARM_CCACHE_REMOTE"] == "${{ secrets.FARM_CCACHE_REMOTE }}", (which, name, key)
            assert step["env"]["FARM_COMPILE_CACHE"] == "${{ vars.FARM_COMPILE_CACHE }}", (which, name, key)


def test_the_cache_service_reaches_only_builds_on_the_runner(both: dict[str, dict[str, dict[str, Any]]]) -> None:
    """A container build (``build-cuda``) gets neither the export step nor the runner's cache token: with ``gha`` the
    container route warns and keeps its own cache. A build on the runner gets the step right before it."""
    for which, documents in both.items():
        host = container = 0
        for name, doc in documents.items():
            for key, steps, index in build_steps(doc):
                before = steps[:index]
                if "build-cuda" in steps[index]["run"]:
                    container += 1
                    assert not any(exports_cache_service(s) for s in before), (which, name, key)
                    assert not any(n in str(steps[index].get("env")) for n in CACHE_SERVICE), (which, name, key)
                else:
                    host += 1
                    assert exports_cache_service(before[-1]), (which, name, key)
        assert host and container, which


def export_step(documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return next(s for doc in documents.values() for job in doc["jobs"].values() for s in job.get("steps", [])
                if exports_cache_service(s))


def test_the_export_step_reads_the_secret_not_a_variable(documents: dict[str, dict[str, Any]]) -> None:
    step = export_step(documents)
    # A step's `if` cannot read a secret: the script decides, from the secret handed to its environment.
    assert "vars." not in str(step.get("if", "")) and "secrets." not in str(step.get("if", ""))
    assert step["env"] == {"FARM_CCACHE_REMOTE": "${{ secrets.FARM_CCACHE_REMOTE }}"}


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the github-script step's script")
@pytest.mark.parametrize(("remote", "exported"), [("gha", True), (" GHA ", True), ("redis://:pw@cache:6379", False),
                                                  ("", False)])
def test_the_export_script_exports_the_cache_service_only_for_gha(documents: dict[str, dict[str, Any]],
                                                                  remote: str, exported: bool) -> None:
    """The script as github-script runs it (``core`` and ``process`` in scope), with a stand-in ``core``."""
    script = export_step(documents)["with"]["script"]
    program = "const core = {exportVariable: (k, v) => console.log(`${k}=${v}`)};\n" + script
    env = {**os.environ, "FARM_CCACHE_REMOTE": remote, "ACTIONS_RESULTS_URL": "https://results.example/",
           "ACTIONS_RUNTIME_TOKEN": "runtime-token"}
    out = subprocess.run([str(shutil.which("node")), "-e", program], env=env, text=True, capture_output=True,
                         check=True, timeout=60).stdout.split()
    assert out == (["ACTIONS_RESULTS_URL=https://results.example/", "ACTIONS_RUNTIME_TOKEN=runtime-token"]
                   if exported else [])
