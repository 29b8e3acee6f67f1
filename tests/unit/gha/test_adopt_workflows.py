"""adopt-torch.yml and torch-canary.yml: scheduled, least privilege, the adoption's commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ci.gha import adopt_jobs
from ci.gha import jobs as gha
from ci.gha import steps as gha_steps
from ci.universe import matrix
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
FARM_REF = "0123456789abcdef0123456789abcdef01234567"


def _render(root: Path, farm: gha_steps.FarmSource) -> dict[str, dict[str, Any]]:
    return gha.render(gha_steps.context(reading.load(root), farm))


@pytest.fixture(scope="module")
def farm() -> dict[str, dict[str, Any]]:
    return _render(ROOT, gha_steps.FarmSource())


@pytest.fixture(scope="module")
def classic() -> dict[str, dict[str, Any]]:
    return _render(CLASSIC, gha_steps.FarmSource("owner/farm", FARM_REF))


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(str(step.get("run", "")) for step in job["steps"])


def _grants(job: dict[str, Any]) -> dict[str, str]:
    return {name: getattr(level, "value", level) for name, level in job["permissions"].items()}


def test_both_are_scheduled_files_of_the_set() -> None:
    assert set(adopt_jobs.FILES) <= set(gha.FILES)
    for name in adopt_jobs.FILES:
        assert (ROOT / ".github" / "workflows" / name).is_file()


def test_the_farm_checks_read_only_and_only_the_pull_request_job_writes(farm: dict[str, dict[str, Any]]) -> None:
    doc = farm["adopt-torch.yml"]
    assert doc["on"]["schedule"] == [{"cron": adopt_jobs.ADOPT_CRON}] and doc["permissions"] == {}
    check, pull_request = doc["jobs"]["check"], doc["jobs"]["pull-request"]
    assert _grants(check) == {"contents": "read"}
    assert "python -m ci adopt-torch --check" in _runs(check)
    assert _grants(pull_request) == {"contents": "write", "pull-requests": "write"}
    assert pull_request["if"] == "needs.check.outputs.new == 'true'"
    assert "python -m ci adopt-torch | tee adopt.txt" in _runs(pull_request)
    assert "gh pr create" in _runs(pull_request)
    assert all(step.get("with", {}).get("persist-credentials") is False
               for step in pull_request["steps"] if "checkout" in str(step.get("uses", "")))


def test_a_project_completes_its_release_through_dispatch(classic: dict[str, dict[str, Any]]) -> None:
    jobs = classic["adopt-torch.yml"]["jobs"]
    assert set(jobs) == {"missing", "dispatch"}
    assert _grants(jobs["missing"]) == {"contents": "read"}
    assert "python -m ci coverage site --json" in _runs(jobs["missing"])
    assert _grants(jobs["dispatch"]) == {"actions": "write"}
    assert "gh workflow run dispatch.yml" in _runs(jobs["dispatch"]) and "publish=true" in _runs(jobs["dispatch"])
    assert "checkout" not in str(jobs["dispatch"]["steps"])  # it starts a workflow; it reads no code


def test_the_canary_builds_and_tests_against_the_test_channel_without_publishing(
        classic: dict[str, dict[str, Any]]) -> None:
    (job,) = classic["torch-canary.yml"]["jobs"].values()
    assert _grants(job) == {"contents": "read"}
    runs = _runs(job)
    assert f"--pre torch --index-url {adopt_jobs.TEST_CHANNEL}" in runs
    assert adopt_jobs.TEST_CHANNEL == "https://download.pytorch.org/whl/test/cpu"
    assert "python -c 'import classic_ext; print(classic_ext.__file__, classic_ext.built_against())'" in runs
    assert "python -m pytest \"$GITHUB_WORKSPACE\"/tests -m 'not cuda' -q" in runs
    actions = {str(getattr(step["uses"], "value", step["uses"])).split("@")[0]
               for step in job["steps"] if "uses" in step}
    assert actions == {"actions/checkout", "actions/setup-python"}  # nothing uploaded, attested or published
    assert "gh release" not in runs and "twine" not in runs


def test_a_stable_abi_project_tests_its_released_wheel_beside_the_new_torch(
        classic: dict[str, dict[str, Any]]) -> None:
    assert "compat" not in classic["adopt-torch.yml"]["jobs"]  # classic projects get new targets instead
    stable = _render(ROOT / "tests" / "fixtures" / "stable_shim", gha_steps.FarmSource("owner/farm", FARM_REF))
    job = stable["adopt-torch.yml"]["jobs"]["compat"]
    newest = matrix.TORCH_RELEASES[-1].version
    assert _grants(job) == {"contents": "read"}
    runs = _runs(job)
    assert '--pattern "stable_shim-*-cp310-abi3-manylinux_2_28_x86_64.whl"' in runs
    assert (f"python -m ci test --target stable_shim-stable-cu130-cp310abi3-linux_x86_64 --torch {newest} "
            '--wheel "$wheel"') in runs
    assert "GITHUB_STEP_SUMMARY" in runs
