"""The farm's extended suite runs on GitHub: on a schedule and by hand, after the system packages its tests use (the
list ``.ci/run extended`` installs), as root like ``.ci/run``. Another project's workflows have no such run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ci import toolenv
from ci.gha import jobs as gha
from ci.gha import steps as gha_steps
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
FARM_REF = "0123456789abcdef0123456789abcdef01234567"


def runs_of(doc: dict[str, Any]) -> list[str]:
    return [s.get("run", "") for job in doc["jobs"].values() for s in job.get("steps", [])]


def runners(documents: dict[str, dict[str, Any]], session: str) -> list[str]:
    """The workflows with a step that runs the nox session."""
    return [name for name, doc in documents.items() if any(f"nox -s {session}" in r for r in runs_of(doc))]


def test_the_extended_suite_runs_on_a_schedule_and_by_hand(documents: dict[str, dict[str, Any]],
                                                         committed: dict[str, str]) -> None:
    (name,) = runners(documents, "tests-extended")
    assert name in gha.FILES and name in committed
    doc = documents[name]
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"} and doc["on"]["schedule"][0]["cron"]
    runs = runs_of(doc)
    suite = next(i for i, r in enumerate(runs) if "nox -s tests-extended" in r)
    # Its system packages first, from the one list (.ci/run extended installs the same), then the suite as root:
    # sccache-dist's bubblewrap sandbox and debootstrap need root.
    packages = next(i for i, r in enumerate(runs) if ".ci/system-packages extended" in r)
    assert packages < suite and runs[packages].startswith("sudo ") and runs[suite].startswith("sudo ")
    assert (ROOT / ".ci" / "system-packages").is_file()
    assert "tests-extended" in toolenv.PYTEST_RUNS  # the session it runs, whose collection the unit suite checks


def test_another_projects_workflows_have_no_extended_suite() -> None:
    ctx = gha_steps.context(reading.load(CLASSIC), gha_steps.FarmSource("owner/farm", FARM_REF))
    documents = gha.render(ctx)
    assert not runners(documents, "tests-extended") and not runners(documents, "tests")
    assert set(documents) < set(gha.FILES)
