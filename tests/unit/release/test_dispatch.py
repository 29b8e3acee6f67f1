"""dispatch.yml: a run by hand builds, tests and (on a tag, when asked) publishes only the targets it names or
its filters select, with the release's own jobs; bad input stops its first job with one line; publishing adds
to the tag's release and never replaces a file. The plan step's command, run as the runner runs it, and the other
runs of ``python -m ci``: tests/integration/test_dispatch_plan.py. Nothing here reaches the network."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ci.errors import UsageError
from ci.gha import jobs as gha
from ci.gha import steps as gha_steps
from ci.release import assembly, dispatch
from ci.release import manifest as release_manifest
from ci.release import plan as release_plan
from ci.release.install_lines import pip_check
from ci.universe import project, targets
from ci.universe.project import reading
from ci.universe.selection import PLAN_ENV

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
FARM_REF = "0123456789abcdef0123456789abcdef01234567"
VERSION = "0.1.0"
X86 = "fusedops-stable-cu130-cp310abi3-linux_x86_64"
ARM = "fusedops-stable-cu130-cp310abi3-linux_aarch64"
WIN = "fusedops-stable-cu132-cp310abi3-win_amd64"


@pytest.fixture(scope="module")
def classic_documents() -> dict[str, dict[str, Any]]:
    return gha.render(gha_steps.context(reading.load(CLASSIC), gha_steps.FarmSource("owner/farm", FARM_REF)))


# --- the workflow ------------------------------------------------------------------------------------------


def test_the_dispatch_workflow_takes_ids_and_filters_and_runs_the_release_jobs(
        documents: dict[str, dict[str, Any]], config: project.ProjectConfig) -> None:
    doc = documents["dispatch.yml"]
    assert set(doc["on"]) == {"workflow_dispatch"}
    inputs = doc["on"]["workflow_dispatch"]["inputs"]
    assert list(inputs) == ["targets", "torch", "cuda", "python", "os", "publish"]
    assert inputs["os"]["type"] == "choice" and inputs["os"]["options"] == ["all", "linux", "windows"]
    assert inputs["publish"] == {**inputs["publish"], "type": "boolean", "default": False}
    jobs = doc["jobs"]
    assert list(jobs) == ["plan", "wheels", "gpu-tests", "assemble", "publish-github", "publish-index"]
    plan = next(s for s in jobs["plan"]["steps"] if s.get("id") == "plan")
    # Every input reaches the farm through the environment; no script expands an expression.
    assert plan["env"] == {v: f"${{{{ inputs.{k} }}}}" for k, v in PLAN_ENV.items()}
    for key, job in jobs.items():
        for step in job.get("steps", []):
            assert "${{" not in step.get("run", ""), f"{key}: {step['name']}"
    assert jobs["plan"]["outputs"] == {"targets": "${{ steps.plan.outputs.targets }}"}
    # The release's own build, audit and import-test jobs (wheels.yml), narrowed to the plan's ids.
    selection = "${{ needs.plan.outputs.targets }}"
    assert jobs["wheels"]["uses"].value == "./.github/workflows/wheels.yml" and jobs["wheels"]["needs"] == "plan"
    assert jobs["wheels"]["with"] == {"cache": False, "targets": selection}
    assert jobs["gpu-tests"]["uses"].value == "./.github/workflows/gpu-tests.yml"
    assert jobs["gpu-tests"]["with"] == {"targets": selection}
    assert documents["release.yml"]["jobs"]["wheels"]["with"] == {"cache": False}  # the release builds them all
    ctx = gha_steps.context(config, gha_steps.FarmSource())
    wheels = documents["wheels.yml"]["jobs"]
    assert documents["wheels.yml"]["on"]["workflow_call"]["inputs"]["targets"]["default"] == ""
    for target in (*ctx.linux, *ctx.windows):
        selected = f"!inputs.targets || contains(fromJSON(inputs.targets), '{target.id}')"
        for prefix in ("build", "import"):
            condition = wheels[gha_steps.job_key(prefix, target.id)]["if"]
            # a Linux import test also waits for the link of the build chain that finished (ci/gha/chained_jobs.py)
            chained = target.os == "linux" and prefix == "import"
            assert condition.endswith(f" && ({selected})") if chained else condition == f"${{{{ {selected} }}}}"
    assemble = jobs["assemble"]
    assert assemble["needs"] == ["plan", "wheels", "gpu-tests"]
    assert any(s.get("with", {}).get("pattern") == "wheel-*" for s in assemble["steps"])
    step = next(s for s in assemble["steps"] if "dispatch-assemble" in s.get("run", ""))
    assert step["env"] == {"FARM_DISPATCH_SELECTED": selection}
    publish = jobs["publish-github"]
    assert publish["needs"] == "assemble" and publish["concurrency"]["group"] == "release-${{ github.ref }}"
    runs = "\n".join(s.get("run", "") for s in publish["steps"])
    assert "release dispatch-merge release --published published --out merged" in runs
    assert "gh release create" not in runs and "gh release delete" not in runs
    assert runs.index("merged/new/*") < runs.index("merged/release-manifest.json")  # wheels before the manifest
    attest = next(s for s in publish["steps"] if "attest-build-provenance" in str(s.get("uses", "")))
    assert attest["with"] == {"subject-checksums": f"merged/{dispatch.ATTESTED}"}
    # The index site is the release's own job: every release's manifest, so adding one removes nothing.
    site = {**jobs["publish-index"], "if": None}
    assert site == {**documents["release.yml"]["jobs"]["publish-index"], "if": None}
    # The file names no target: a cell added to the matrix changes wheels.yml, not this.
    text = json.dumps(doc, default=str)
    assert not any(t.id in text for t in (*ctx.linux, *ctx.windows))


def test_another_project_gets_the_same_dispatch(classic_documents: dict[str, dict[str, Any]]) -> None:
    doc = classic_documents["dispatch.yml"]
    assert doc["env"] == {"PYTHONPATH": "${{ github.workspace }}/.farm", "FARM_PROJECT": "${{ github.workspace }}"}
    names = [s["name"] for s in doc["jobs"]["plan"]["steps"]]
    assert "Check out the farm" in names
    assert classic_documents["wheels.yml"]["on"]["workflow_call"]["inputs"]["targets"]["type"] == "string"
    target_id = "classic_ext-torch2.11-cu130-cp311-linux_x86_64"
    job = classic_documents["wheels.yml"]["jobs"][gha_steps.job_key("build", target_id)]
    assert f"contains(fromJSON(inputs.targets), '{target_id}')" in job["if"]


# --- the plan step, run as the runner runs it ------------------------------------------------------------------


# --- assemble and merge: only the selected wheels, added to the published release ---------------------------------


def fake_built(folder: Path, target: targets.Target, version: str, *, body: str = "") -> Path:
    """A wheel-<id>/ artifact: a small valid wheel and the report.json its build wrote."""
    dist = target.project.name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    platform = f"manylinux_2_28_{target.arch}" if target.os == "linux" else "win_amd64"
    tag = f"{target.wheel_tag_prefix}-{platform}"
    files = {f"{dist}/__init__.py": f"VERSION = {version!r}\n{body}".encode(),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                                 "Requires-Python: >=3.10\n\n".encode(),
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
                     f"{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    out = folder / f"wheel-{target.id}"
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    (out / "report.json").write_text(json.dumps({
        "target": target.id, "wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "mode": "container", "checks": [{"name": "wheel-tag", "ok": True, "detail": ""}]}))
    return wheel


def version_of(target: targets.Target, config: project.ProjectConfig) -> str:
    return VERSION if target.variant == release_plan.pypi_variant(config) else f"{VERSION}+{target.variant}"


def published_release(tmp_path: Path, config: project.ProjectConfig, ids: list[str]) -> Path:
    """A release the release workflow published, holding ``ids``: its manifest and SHA256SUMS, downloaded."""
    by_id = {t.id: t for t in dispatch.workflow_targets(config)}
    for target_id in ids:
        fake_built(tmp_path / "release-artifacts", by_id[target_id], version_of(by_id[target_id], config))
    built = release_plan.find_built(tmp_path / "release-artifacts", {i: by_id[i] for i in ids})
    manifest = release_plan.plan(config, built, None, tag="v0.1.0", commit="abc")
    assembly.write_release(tmp_path / "published-release", manifest, {b.wheel.name: b.wheel for b in built})
    downloaded = tmp_path / "published"
    downloaded.mkdir()
    for name in (release_manifest.MANIFEST, release_manifest.SUMS):
        (downloaded / name).write_bytes((tmp_path / "published-release" / "assets" / name).read_bytes())
    return downloaded


def test_only_the_selected_wheels_are_added_to_the_release_and_none_replaced(
        config: project.ProjectConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The install lines resolve against PyPI (release --assemble's tests run them); here: offline.
    monkeypatch.setattr(pip_check, "check_install_lines", lambda out, manifest: {})
    by_id = {t.id: t for t in dispatch.workflow_targets(config)}
    for target_id in (X86, WIN, ARM):  # ARM was built too, but the plan did not select it
        fake_built(tmp_path / "artifacts", by_id[target_id], version_of(by_id[target_id], config))
    manifest = dispatch.assemble(config, tmp_path / "artifacts", [X86, WIN], tmp_path / "release", "v0.1.0",
                                 reaudit=False)
    assert sorted(str(f.target) for f in manifest.files) == sorted([X86, WIN])
    assert all(dict(f.checks)["index-install"].startswith("ok") for f in manifest.files)
    # The release already has the other targets (and the sdist's place is the release workflow's).
    others = [i for i in by_id if i not in (X86, WIN)]
    published = published_release(tmp_path, config, others)
    old = release_manifest.Manifest.from_json((published / release_manifest.MANIFEST).read_text())
    added = dispatch.merge(tmp_path / "release", published, tmp_path / "merged")
    merged_dir = tmp_path / "merged"
    assert sorted(added) == sorted(f.name for f in manifest.files)
    served = {f"{f.name}.metadata" for f in manifest.wheels}  # PEP 658: each wheel's METADATA beside it
    assert sorted(p.name for p in (merged_dir / dispatch.NEW).iterdir()) == sorted({*added, *served})
    merged = release_manifest.Manifest.from_json((merged_dir / release_manifest.MANIFEST).read_text())
    assert {f.name for f in merged.files} == {f.name for f in old.files} | set(added)
    assert (merged.tag, merged.commit, merged.version) == (old.tag, old.commit, old.version)
    assert all(f in merged.files for f in old.files)  # nothing removed, nothing rewritten
    # PyPI gets the release workflow's files only: the PyPI variant's wheel added here is marked so.
    x86 = next(f for f in merged.files if f.target == X86)
    assert x86.pypi is False and x86.pypi_reason == dispatch.NOT_ON_PYPI
    sums = release_manifest.parse_sums((merged_dir / release_manifest.SUMS).read_text())
    assert set(sums) == ({f.name for f in merged.files} | {f"{f.name}.metadata" for f in merged.wheels}
                         | {release_manifest.MANIFEST})
    assert sums[release_manifest.MANIFEST] == hashlib.sha256((merged_dir / release_manifest.MANIFEST)
                                                             .read_bytes()).hexdigest()
    attested = release_manifest.parse_sums((merged_dir / dispatch.ATTESTED).read_text())
    assert set(attested) == {*added, *served, release_manifest.MANIFEST}
    # The site of the merged release links every wheel, the old ones as before.
    site = release_manifest.site_index([merged], "https://github.com/o/r/releases/download")
    linked = {f.name for pages in site.values() for files in pages.values() for f in files}
    assert linked == {f.name for f in merged.wheels}
    # A second run of the same files adds nothing; the manifest comes out the same.
    again = tmp_path / "again"
    again.mkdir()
    for name in (release_manifest.MANIFEST, release_manifest.SUMS):
        (again / name).write_bytes((merged_dir / name).read_bytes())
    assert dispatch.merge(tmp_path / "release", again, tmp_path / "merged-again") == []
    assert (tmp_path / "merged-again" / release_manifest.MANIFEST).read_text() == \
        (merged_dir / release_manifest.MANIFEST).read_text()


def test_assemble_takes_the_plans_ids_only(config: project.ProjectConfig, tmp_path: Path) -> None:
    for text in ("", "x", "[]", '{"a": 1}', "[1]"):
        with pytest.raises(UsageError, match="FARM_DISPATCH_SELECTED is not the plan's list"):
            dispatch.selected_ids(text)
    assert dispatch.selected_ids(json.dumps([X86])) == [X86]
    with pytest.raises(UsageError, match="no such target"):
        dispatch.assemble(config, tmp_path, ["nope"], tmp_path / "out", None, reaudit=False)
    with pytest.raises(UsageError, match="1 of 1 targets have no built wheel"):
        dispatch.assemble(config, tmp_path, [X86], tmp_path / "out", None, reaudit=False)


def test_a_release_folder_without_pypi_files_merges_as_downloaded(
        config: project.ProjectConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """upload-artifact keeps no empty folder: the downloaded release folder of non-PyPI variants has no pypi/."""
    monkeypatch.setattr(pip_check, "check_install_lines", lambda out, manifest: {})
    cu132 = next(t for t in dispatch.workflow_targets(config) if t.id == "fusedops-stable-cu132-cp310abi3-linux_x86_64")
    fake_built(tmp_path / "artifacts", cu132, version_of(cu132, config))
    dispatch.assemble(config, tmp_path / "artifacts", [cu132.id], tmp_path / "release", "v0.1.0", reaudit=False)
    (tmp_path / "release" / "pypi").rmdir()
    published = published_release(tmp_path, config, [X86])
    assert dispatch.merge(tmp_path / "release", published, tmp_path / "merged") == [
        f"fusedops-{VERSION}+cu132-cp310-abi3-manylinux_2_28_x86_64.whl"]
