"""The GitHub Actions workflows: they follow the matrix (drift fails), every action is pinned by commit, every
job says what it may do, and the linters pass. Nothing here reaches the network."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ci.errors import CommandFailed, UsageError
from ci.gha import actions, windows_jobs, workflows, yamlout
from ci.gha import jobs as gha
from ci.gha import steps as gha_steps
from ci.gha.yamlout import Commented
from ci.universe import matrix, pins, project, shapes, targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / ".github" / "workflows"
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
FARM_REF = "0123456789abcdef0123456789abcdef01234567"
ACTION = ROOT / "action.yml"
REUSABLE = FOLDER / "farm-build.yml"


# --- the workflows follow the matrix ------------------------------------------------------------------


def test_the_committed_workflows_are_what_the_matrix_renders(config: project.ProjectConfig) -> None:
    differences = workflows.drift(FOLDER, workflows.render(config))
    assert not differences, "run `nox -s workflows` and commit:\n" + "".join(differences.values())[:4000]


@pytest.fixture
def extra_cell(monkeypatch: pytest.MonkeyPatch) -> Iterator[shapes.Cell]:
    """A CUDA 13.9 cell added to the matrix (what a maintainer does in ci/universe/matrix.py)."""
    cell = dataclasses.replace(matrix.get_cell("13.2"), cuda="13.9")
    monkeypatch.setattr(matrix, "CELLS", (*matrix.CELLS, cell))
    monkeypatch.setattr(matrix, "MAX_GCC", {**matrix.MAX_GCC, "13.9": 15})
    yield cell


def test_a_cell_added_to_the_matrix_is_drift(config: project.ProjectConfig, extra_cell: shapes.Cell) -> None:
    differences = workflows.drift(FOLDER, workflows.render(config))
    assert set(differences) == {"ci.yml", "images.yml", "wheels.yml", "gpu-tests.yml"}
    assert "+  build-fusedops-stable-cu139-cp310abi3-linux_x86_64:" in differences["wheels.yml"]
    assert "+  build-fusedops-stable-cu139-cp310abi3-win_amd64:" in differences["wheels.yml"]
    assert "+  container-cu139:" in differences["ci.yml"]
    with pytest.raises(UsageError) as exc:
        workflows.check(FOLDER, workflows.render(config))
    assert exc.value.line().startswith("error: the workflows and the matrix disagree (ci.yml, gpu-tests.yml, ")
    assert "workflows render" in exc.value.fix and "cu139" in exc.value.details


# --- security ------------------------------------------------------------------------------------------


USES = re.compile(r"^\s*(?:- )?uses: (\S+)(.*)$", re.MULTILINE)


def test_every_action_is_pinned_by_full_commit_with_its_version(committed: dict[str, str]) -> None:
    pins = {a.repo: a for a in actions.ALL}
    seen = set()
    for name, text in committed.items():
        for ref, rest in USES.findall(text):
            if ref.startswith("./.github/workflows/"):
                assert (FOLDER / ref.removeprefix("./.github/workflows/")).is_file(), ref
                continue
            repo, _, sha = ref.partition("@")
            assert re.fullmatch(r"[0-9a-f]{40}", sha), f"{name}: {ref} is not pinned by a full commit SHA"
            assert re.fullmatch(r" # v\d+(\.\d+)*", rest), f"{name}: {ref} has no version comment"
            assert pins[repo].sha == sha and rest == f" # {pins[repo].version}", f"{name}: {ref} is not the pin"
            seen.add(repo)
    assert {"actions/checkout", "pypa/gh-action-pypi-publish", "actions/attest-build-provenance",
            "docker/login-action"} <= seen


def test_no_workflow_grants_permissions_at_the_top_or_runs_untrusted_triggers(
        documents: dict[str, dict[str, Any]], committed: dict[str, str]) -> None:
    for name, doc in documents.items():
        assert doc["permissions"] == {}, name
        assert re.search(r"^permissions: \{\}$", committed[name], re.MULTILINE), name
        assert "pull_request_target" not in doc["on"] and "workflow_run" not in doc["on"], name
        assert "pull_request_target" not in committed[name] and "secrets: inherit" not in committed[name], name


def test_every_job_says_what_it_may_do_and_why(documents: dict[str, dict[str, Any]]) -> None:
    for name, doc in documents.items():
        for key, job in doc["jobs"].items():
            assert "permissions" in job, f"{name}: job {key} has no explicit permissions"
            for scope, value in job["permissions"].items():
                assert isinstance(value, Commented) and value.comment, f"{name}: {key} {scope} has no reason"
                assert value.value in ("read", "write")


def test_only_publish_jobs_get_an_oidc_token(documents: dict[str, dict[str, Any]]) -> None:
    holders = {(name, key) for name, doc in documents.items() for key, job in doc["jobs"].items()
               if "id-token" in job["permissions"]}
    assert holders == {("release.yml", "publish-pypi"), ("release.yml", "publish-github"),
                       ("release.yml", "publish-index"), ("dispatch.yml", "publish-github"),
                       ("dispatch.yml", "publish-index")}
    jobs = documents["release.yml"]["jobs"]
    assert set(jobs["publish-pypi"]["permissions"]) == {"id-token"}
    assert jobs["publish-pypi"]["environment"]["name"] == "pypi"
    for key in ("publish-pypi", "publish-github", "publish-index"):
        # A run started by hand on a tag is a rehearsal: only the tag's push publishes.
        assert jobs[key]["if"] == "github.event_name == 'push' && github.ref_type == 'tag'"
        assert not any("checkout" in str(s.get("uses", "")) for s in jobs[key]["steps"]) or key == "publish-index"
    writers = {(n, k) for n, d in documents.items() for k, j in d["jobs"].items()
               if any(str(v.value) == "write" for s, v in j["permissions"].items() if s != "id-token")}
    assert writers == {("release.yml", "images"), ("release.yml", "publish-github"), ("release.yml", "publish-index"),
                       ("dispatch.yml", "publish-github"), ("dispatch.yml", "publish-index"),
                       ("adopt-torch.yml", "pull-request"),  # its branch and pull request (the farm's own only)
                       *(("images.yml", k) for k in documents["images.yml"]["jobs"])}
    # A dispatch publishes only when asked to, on a tag, and never to PyPI (which cannot take a file back).
    dispatch = documents["dispatch.yml"]["jobs"]
    for key in ("publish-github", "publish-index"):
        assert dispatch[key]["if"] == "inputs.publish && github.ref_type == 'tag'"
    assert not any("pypi-publish" in str(u) for _, _, u in gha.iter_uses(documents["dispatch.yml"]))


def test_ci_is_read_only_and_never_pushes(documents: dict[str, dict[str, Any]]) -> None:
    ci = documents["ci.yml"]
    for key, job in ci["jobs"].items():
        assert all(v.value == "read" for v in job["permissions"].values()), key
        assert not any("images push" in s.get("run", "") for s in job.get("steps", [])), key
    assert set(ci["on"]) == {"push", "pull_request", "workflow_dispatch"}
    assert ci["concurrency"]["cancel-in-progress"] is True


def test_no_cache_reaches_a_release(documents: dict[str, dict[str, Any]]) -> None:
    cached = [(n, k) for n, d in documents.items() for k, j in d["jobs"].items() for s in j.get("steps", [])
              if "actions/cache@" in str(s.get("uses", "")) or ("cache" in s.get("with", {})
              and s.get("with", {}).get("cache") not in (False, None))]
    assert cached and all(n == "wheels.yml" for n, _ in cached)
    for name, key in cached:
        step = next(s for s in documents[name]["jobs"][key]["steps"] if "actions/cache@" in str(s.get("uses", "")))
        assert step["if"] == "inputs.cache"
    assert documents["release.yml"]["jobs"]["wheels"]["with"] == {"cache": False}
    assert documents["wheels.yml"]["on"]["workflow_call"]["inputs"]["cache"]["default"] is False
    for job in documents["release.yml"]["jobs"].values():
        for step in job.get("steps", []):
            assert "actions/cache@" not in str(step.get("uses", "")) and step.get("with", {}).get("cache") is not True


def test_checkouts_keep_no_credentials(documents: dict[str, dict[str, Any]]) -> None:
    for name, doc in documents.items():
        for key, job in doc["jobs"].items():
            for step in job.get("steps", []):
                if "actions/checkout@" in str(step.get("uses", "")):
                    assert step["with"]["persist-credentials"] is False, f"{name}: {key}"


# --- what the jobs do ------------------------------------------------------------------------------------


def test_release_runs_build_test_publish_in_that_order(documents: dict[str, dict[str, Any]]) -> None:
    jobs = documents["release.yml"]["jobs"]
    assert documents["release.yml"]["on"]["push"] == {"tags": ["v*"]}
    assert jobs["wheels"]["needs"] == "images"
    assert jobs["gpu-tests"]["needs"] == "wheels"
    assert jobs["assemble"]["needs"] == ["wheels", "sdist", "sdist-wheel", "gpu-tests"]
    # The sdist is written without the CUDA torch, and proven by a wheel built from it alone.
    sdist_run = next(s["run"] for s in jobs["sdist"]["steps"] if "release sdist" in s.get("run", ""))
    assert "--torch-index https://download.pytorch.org/whl/cpu" in sdist_run
    assert jobs["sdist-wheel"]["needs"] == "sdist"
    assert any("wheel-from-sdist sdist" in s.get("run", "") for s in jobs["sdist-wheel"]["steps"])
    # PyPI cannot take a file back: it comes after the GitHub Release, and both survive a re-run.
    assert jobs["publish-github"]["needs"] == "assemble"
    assert jobs["publish-pypi"]["needs"] == "publish-github"
    assert jobs["publish-index"]["needs"] == "publish-github"
    pypi = next(s for s in jobs["publish-pypi"]["steps"] if "gh-action-pypi-publish" in str(s.get("uses", "")))
    assert pypi["with"]["skip-existing"] is True
    create = next(s["run"] for s in jobs["publish-github"]["steps"] if "gh release" in s.get("run", ""))
    assert "gh release upload" in create and "--clobber" in create and create.index("gh release view") < \
        create.index("gh release create")
    steps = jobs["publish-github"]["steps"]
    attest = next(s for s in steps if "attest-build-provenance" in str(s.get("uses", "")))
    assert attest["with"] == {"subject-checksums": "assets/SHA256SUMS"}
    assert documents["release.yml"]["concurrency"]["cancel-in-progress"] is False


def test_gpu_tests_are_skipped_visibly_without_the_runner_variable(documents: dict[str, dict[str, Any]]) -> None:
    jobs = documents["gpu-tests.yml"]["jobs"]
    notice = jobs["gpu-runner"]
    assert notice["permissions"] == {} and "if" not in notice
    assert "::warning title=GPU tests skipped::" in notice["steps"][0]["run"]
    gpu_jobs = [j for k, j in jobs.items() if k.startswith("test-gpu-")]
    # One x86_64 target per cell: the abi3 wheel, and one per free-threaded CPython of the cell's torch.
    assert len(gpu_jobs) == sum(1 + len(matrix.get_torch(c.torch).free_threaded) for c in matrix.CELLS
                                if not c.stand_in_for)
    for key, job in jobs.items():
        if not key.startswith("test-gpu-"):
            continue
        target_id = job["name"].removeprefix("test-gpu ")
        # ... and, called with targets (dispatch.yml), skipped for a target not named.
        assert job["if"] == ("vars.GPU_RUNNER_LABEL != '' && (!inputs.targets || "
                             f"contains(fromJSON(inputs.targets), '{target_id}'))")
        assert job["runs-on"] == ["self-hosted", "${{ vars.GPU_RUNNER_LABEL }}"]
        assert any("nox -s test-gpu -- --target" in s.get("run", "") for s in job["steps"])
        results = next(s for s in job["steps"] if str(s["name"]).startswith("Upload gpu-results-"))
        assert results["with"]["overwrite"] is True  # a re-run's upload would answer 409 otherwise


def test_windows_jobs_pin_the_msvc_toolset_the_cell_accepts(documents: dict[str, dict[str, Any]],
                                                            config: project.ProjectConfig) -> None:
    jobs = documents["wheels.yml"]["jobs"]
    for target in targets.targets_for(config, "windows"):
        job = jobs[gha_steps.job_key("build", target.id)]
        assert target.cell.windows is not None
        toolset = target.cell.windows.toolset
        step = next(s for s in job["steps"] if s["name"].startswith("MSVC toolset"))
        component, runner = windows_jobs.MSVC_COMPONENTS[toolset]
        assert component in step["run"] and step["timeout-minutes"] == 30 and job["runs-on"] == runner
        install = next(s for s in job["steps"] if s["name"].startswith(f"CUDA {target.cell.cuda} toolkit"))
        assert install["timeout-minutes"] == 30
        cache = next(s for s in job["steps"] if "actions/cache@" in str(s.get("uses", "")))
        assert cache["with"]["key"] == windows_jobs.toolkit_cache_key(target.cell)
        # The cached folder is the one the toolkit step fills and build-win reads, under the job's FARM_CACHE_DIR.
        from windows.toolkit import wheels as toolkit_wheels

        assert job["env"]["FARM_CACHE_DIR"] == windows_jobs.WINDOWS_CACHE
        assert cache["with"]["path"] == str(toolkit_wheels.cached_folder(target.cell, windows_jobs.WINDOWS_CACHE))
        assert any(f"build-win --target {target.id}" in s.get("run", "") for s in job["steps"])
    cell = dataclasses.replace(matrix.get_cell("13.0"), windows=dataclasses.replace(
        matrix.get_cell("13.0").windows, toolset="14.99"))  # type: ignore[type-var]
    with pytest.raises(UsageError, match="MSVC_COMPONENTS"):
        windows_jobs.windows_runner(cell)


def test_import_tests_use_a_cpu_torch_only_when_the_project_promises_it(documents: dict[str, dict[str, Any]],
                                                                         tmp_path: Path) -> None:
    job = documents["wheels.yml"]["jobs"][gha_steps.job_key("import", "fusedops-stable-cu128-cp310abi3-linux_x86_64")]
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert any("--torch-kind cpu --torch-index https://download.pytorch.org/whl/cpu" in r for r in runs)
    # torch 2.10 on PyPI is a CUDA 12.8 build: the cu128 wheel is tested with it.
    assert any("--torch-kind cuda --torch-index https://download.pytorch.org/whl/cu128" in r for r in runs)
    # aarch64: PyPI's torch 2.11 is a CUDA build; the runner has no GPU, so the CPU-only import is of that build.
    job = documents["wheels.yml"]["jobs"][gha_steps.job_key("import", "fusedops-stable-cu130-cp310abi3-linux_aarch64")]
    assert job["runs-on"] == "ubuntu-24.04-arm"
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert any("--torch-kind cpu --torch-index https://pypi.org/simple" in r for r in runs)
    assert any("--torch-kind cuda --torch-index https://pypi.org/simple" in r for r in runs)
    classic = gha.render(gha_steps.context(reading.load(CLASSIC), gha_steps.FarmSource("owner/farm", FARM_REF)))
    job = classic["wheels.yml"]["jobs"][gha_steps.job_key("import", "classic_ext-torch2.11-cu130-cp311-linux_x86_64")]
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert not any("--torch-kind cpu" in r for r in runs) and any("--torch-kind cuda" in r for r in runs)


def test_the_farms_tools_run_on_the_farms_python_and_tests_on_the_targets(
        documents: dict[str, dict[str, Any]], config: project.ProjectConfig) -> None:
    """The farm's lock serves the farm's Python; the target's CPython is set up apart and handed to the farm by
    path (setup-python's output: Windows has no python3.10 on PATH)."""
    jobs = documents["wheels.yml"]["jobs"]
    ctx = gha_steps.context(config, gha_steps.FarmSource())
    for target in (*ctx.linux, *ctx.windows):
        steps = jobs[gha_steps.job_key("import", target.id)]["steps"]
        names = [str(s["name"]) for s in steps]
        pythons = [s for s in steps if "setup-python" in str(s.get("uses", ""))]
        assert [p["with"]["python-version"] for p in pythons] == [target.python, pins.FARM_PYTHON]
        assert pythons[0]["id"] == "target-python"
        assert names.index(f"Python {pins.FARM_PYTHON} (the farm's)") < next(
            i for i, n in enumerate(names) if n.startswith("The farm's tools"))
        runs = [s for s in steps if "release import-test" in s.get("run", "")]
        variable = f"FARM_PYTHON_{target.python.replace('.', '_')}"
        assert runs and all(f"--test-python {target.python}" in s["run"] for s in runs)
        assert all(s["env"] == {variable: "${{ steps.target-python.outputs.python-path }}"} for s in runs)


def test_a_push_touching_any_input_of_an_image_rebuilds_it(documents: dict[str, dict[str, Any]],
                                                            config: project.ProjectConfig) -> None:
    import fnmatch

    from ci.linux import images

    paths = documents["images.yml"]["on"]["push"]["paths"]
    for cell in {t.cell.name: t.cell for t in targets.targets_for(config, "linux")}.values():
        spec = images.ImageSpec(cell, "base", ())
        for source in spec.context_files().values():
            relative = source.resolve().relative_to(ROOT).as_posix()
            assert any(fnmatch.fnmatch(relative, p.replace("**", "*")) for p in paths), relative


# --- the YAML writer -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "written"), [
    ("3.10", '"3.10"'), ("on", '"on"'), ("yes", '"yes"'), ("12", '"12"'), ("v*", "v*"), ("*", '"*"'),
    ("cu130", "cu130"), ("a: b", '"a: b"'), ("x #y", '"x #y"'), ("${{ github.ref }}", "${{ github.ref }}"),
    ("- x", '"- x"'), ("", '""'), ("2024-01-01", '"2024-01-01"'), ("null", '"null"'), (True, "true"),
    (None, "null"), (30, "30"),
])
def test_scalars_read_back_as_written(value: object, written: str) -> None:
    assert yamlout.scalar(value) == written


def test_the_writer_round_trips_every_workflow(documents: dict[str, dict[str, Any]]) -> None:
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema (lint.txt)")

    def plain(value: object) -> object:
        if isinstance(value, Commented):
            return value.value
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    for name, doc in documents.items():
        loaded = yaml.YAML(typ="safe", pure=True).load(yamlout.dump(doc))
        assert loaded == plain(doc), name


def test_multi_line_scripts_are_literal_blocks() -> None:
    text = yamlout.dump({"run": "echo a\necho 'b: c' # not a comment\n", "x": [{"a": 1, "b": [1]}]})
    assert text == "run: |\n  echo a\n  echo 'b: c' # not a comment\nx:\n  - a: 1\n    b:\n      - 1\n"


# --- the linters -----------------------------------------------------------------------------------------


def test_lint_fails_on_a_broken_copy_of_the_action(tmp_path: Path) -> None:
    if workflows.tool("zizmor") is None or workflows.tool("check-jsonschema") is None:
        pytest.skip("zizmor and check-jsonschema are in ci/requirements/lint.txt")
    folder = tmp_path / "wf"
    folder.mkdir()
    shutil.copy(REUSABLE, folder)
    text = ACTION.read_text()
    injected = tmp_path / "injected" / "action.yml"
    injected.parent.mkdir()
    # An input expanded inside a script is code the caller controls.
    injected.write_text(text.replace("        set -euo pipefail\n", "        set -euo pipefail\n"
                                     "        echo ${{ inputs.args }}\n", 1))
    assert injected.read_text() != text
    with pytest.raises(CommandFailed, match="zizmor found problems"):
        workflows.lint(folder, actions=[injected])
    malformed = tmp_path / "malformed" / "action.yml"
    malformed.parent.mkdir()
    malformed.write_text(text.replace("  using: composite\n", "  using: compound\n", 1))
    assert malformed.read_text() != text
    with pytest.raises(CommandFailed, match="check-jsonschema found problems"):
        workflows.lint(folder, actions=[malformed])
    assert workflows.lint(folder, actions=[ACTION]) == 0


def test_shell_scripts_pass_shellcheck(documents: dict[str, dict[str, Any]]) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (actionlint runs it in the CI workflow)")
    hand_written = workflows.load_yaml([ACTION, REUSABLE])
    assert set(hand_written) == {"action.yml", "farm-build.yml"} or not hand_written  # without ruamel.yaml
    problems = workflows.shellcheck({**documents, **hand_written})
    assert not problems, "\n".join(problems)


# --- the registry helpers the workflows call ---------------------------------------------------------------


def test_images_keep_their_content_tag_in_the_repository_registry() -> None:
    from ci.linux import images

    cell = matrix.get_cell("13.0")
    local = images.spec_for(cell).tag
    registry = workflows.registry(env={"GITHUB_REPOSITORY": "Some-Owner/FusedOps"})
    assert registry == "ghcr.io/some-owner/fusedops"  # GHCR names are lower case
    remote = workflows.remote_ref(registry, local)
    assert remote == f"ghcr.io/some-owner/fusedops/builder:{local.split(':')[1]}"
    assert remote.endswith(":" + local.rpartition(":")[2]) and remote.split(":")[1].startswith("cu130-")
    assert workflows.registry("ghcr.io/x/y/", env={}) == "ghcr.io/x/y"
    assert workflows.registry(env={"FARM_REGISTRY": "registry.example/farm"}) == "registry.example/farm"
    with pytest.raises(UsageError, match="no image registry"):
        workflows.registry(env={})


def test_the_cuda_12_release_cell_builds_on_manylinux_with_nvidias_repository(
        documents: dict[str, dict[str, Any]]) -> None:
    """The release's CUDA 12 cell is torch's own 12.8, on the manylinux_2_28 base (NVIDIA's RPMs): no job
    debootstraps a Debian base, and the local stand-in cu124 is in no workflow."""
    assert matrix.get_cell("12").name == "cu128" and matrix.get_cell("12").toolkit.kind == "nvidia-repo"
    for name, doc in documents.items():
        text = json.dumps(doc, default=str)
        assert "cu124" not in text and "FARM_BASE_IMAGE" not in text and "base-image --suite" not in text, name
    job = documents["wheels.yml"]["jobs"][gha_steps.job_key("build", "fusedops-stable-cu128-cp310abi3-linux_x86_64")]
    names = [str(s.get("name")) for s in job["steps"]]
    assert job["runs-on"] == "ubuntu-24.04"
    assert any("build it on quay.io/pypa/manylinux_2_28_x86_64" in n for n in names)
    assert "image-cu128" in documents["images.yml"]["jobs"] and "container-cu128" in documents["ci.yml"]["jobs"]


def test_every_linux_build_is_held_to_the_release_glibc_floor(documents: dict[str, dict[str, Any]]) -> None:
    builds = [(n, k, j) for n, d in documents.items() for k, j in d["jobs"].items()
              if any("build-cuda" in s.get("run", "") for s in j.get("steps", []))]
    assert len(builds) >= 11
    for name, key, job in builds:
        assert job["env"]["FARM_GLIBC_FLOOR"] == "manylinux_2_28", f"{name} {key}"


def test_aarch64_wheels_build_natively_on_the_arm64_runner_in_the_manylinux_aarch64_base(
        documents: dict[str, dict[str, Any]], config: project.ProjectConfig) -> None:
    arm = [t for t in targets.platform_targets(config, "linux") if t.arch == "aarch64"]
    assert {t.cell.name for t in arm} == {c.name for c in matrix.CELLS if c.aarch64 and not c.stand_in_for}
    wheels = documents["wheels.yml"]["jobs"]
    for target in arm:
        job = wheels[gha_steps.job_key("build", target.id)]
        assert job["runs-on"] == "ubuntu-24.04-arm"
        names = [str(s.get("name")) for s in job["steps"]]
        assert any("build it on quay.io/pypa/manylinux_2_28_aarch64" in n for n in names)
        assert wheels[gha_steps.job_key("import", target.id)]["runs-on"] == "ubuntu-24.04-arm"
        image = documents["images.yml"]["jobs"][f"image-{target.cell.name}-aarch64"]
        assert image["runs-on"] == "ubuntu-24.04-arm"
        assert any(f"images push {target.cell.name}" in s.get("run", "") for s in image["steps"])
    # The assemble job downloads every wheel-* artifact: both architectures land in each variant's index.
    assemble = documents["release.yml"]["jobs"]["assemble"]
    assert any(s.get("with", {}).get("pattern") == "wheel-*" for s in assemble["steps"])


def test_only_the_default_branch_and_tags_push_builder_images(documents: dict[str, dict[str, Any]]) -> None:
    pushes = [(n, k, s) for n, d in documents.items() for k, j in d["jobs"].items() for s in j.get("steps", [])
              if "images push" in s.get("run", "")]
    assert pushes and {n for n, _, _ in pushes} == {"images.yml"}
    for _, _, step in pushes:
        assert step["if"] == ("steps.pull.outputs.found != 'true' && (github.ref == 'refs/heads/main' || "
                              "startsWith(github.ref, 'refs/tags/v'))")


# --- the farm from another repository's workflows: action.yml and farm-build.yml (docs/github-actions.md) ----


@pytest.fixture(scope="module")
def hand_written() -> dict[str, dict[str, Any]]:
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema (lint.txt)")
    return {path.name: yaml.YAML(typ="safe", pure=True).load(path.read_text()) for path in (ACTION, REUSABLE)}


def test_the_action_and_the_reusable_workflow_pin_what_the_generated_workflows_pin() -> None:
    pins = {a.repo: a for a in actions.ALL}
    for path in (ACTION, REUSABLE):
        refs = USES.findall(path.read_text())
        assert refs, path
        for ref, rest in refs:
            if ref == "./.farm":
                continue
            repo, _, sha = ref.partition("@")
            assert pins[repo].sha == sha and rest == f" # {pins[repo].version}", f"{path.name}: {ref} is not the pin"
    # Rendering a workflow of that name would overwrite the hand-written one.
    assert REUSABLE.name not in gha.FILES


def _steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["runs"]["steps"] if "runs" in doc else [s for j in doc["jobs"].values() for s in j["steps"]]


def test_inputs_reach_scripts_only_through_the_environment(hand_written: dict[str, dict[str, Any]]) -> None:
    for name, doc in hand_written.items():
        scripts = [s["run"] for s in _steps(doc) if "run" in s]
        assert scripts, name
        for script in scripts:
            assert "${{" not in script, f"{name}: an expression inside a script is injectable"
        for step in _steps(doc):
            if "actions/checkout@" in str(step.get("uses", "")):
                assert step["with"]["persist-credentials"] is False, name


def test_the_reusable_workflow_runs_the_action_of_its_own_commit(hand_written: dict[str, dict[str, Any]]) -> None:
    action, workflow = hand_written["action.yml"], hand_written["farm-build.yml"]
    assert workflow["permissions"] == {} and set(workflow["on"]) == {"workflow_call"}
    declared = set(workflow["on"]["workflow_call"]["inputs"])
    used = set(re.findall(r"\binputs\.([\w-]+)", REUSABLE.read_text()))
    assert used <= declared and declared - used == set(), (used, declared)
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read"}
    steps = {s.get("id") or s["name"]: s for s in job["steps"]}
    caller, farm_checkout = (s for s in job["steps"] if "actions/checkout@" in str(s.get("uses", "")))
    assert "repository" not in caller["with"] and "path" not in caller["with"]
    assert steps["farm"]["env"]["FARM_WORKFLOW_SHA"] == "${{ fromJSON(toJSON(job)).workflow_sha }}"
    assert steps["farm"]["env"]["FARM_WORKFLOW_REPOSITORY"] == "${{ fromJSON(toJSON(job)).workflow_repository }}"
    assert farm_checkout["with"] == {"repository": "${{ steps.farm.outputs.repository }}",
                                     "ref": "${{ steps.farm.outputs.ref }}", "path": ".farm",
                                     "persist-credentials": False}
    build = steps["build"]
    assert build["uses"] == "./.farm"
    assert set(build["with"]) == set(action["inputs"]), "every input of action.yml is passed on"
    for key, value in build["with"].items():
        assert value == f"${{{{ inputs.{key} }}}}" or key == "output-dir", key
    upload = next(s for s in job["steps"] if "actions/upload-artifact@" in str(s.get("uses", "")))
    assert upload["with"]["path"] == "${{ steps.build.outputs.wheelhouse }}" and "wheelhouse" in action["outputs"]
    assert workflow["on"]["workflow_call"]["outputs"]["artifact-name"]["value"] == \
        "${{ jobs.build.outputs.artifact-name }}"


def _bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env={**os.environ, **env}, cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.skipif(shutil.which("bash") is None or os.name == "nt", reason="the runners' bash")
def test_the_reusable_workflow_stops_when_it_cannot_tell_the_farms_commit(
        hand_written: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    (job,) = hand_written["farm-build.yml"]["jobs"].values()
    script = next(s for s in job["steps"] if s.get("id") == "farm")["run"]
    out = tmp_path / "out"
    blank = {"FARM_WORKFLOW_REPOSITORY": "", "FARM_WORKFLOW_SHA": "", "FARM_REPOSITORY_INPUT": "",
             "FARM_REF_INPUT": "", "GITHUB_OUTPUT": str(out)}
    result = _bash(script, blank, tmp_path)
    assert result.returncode == 1 and "::error title=cuda-ext-farm::" in result.stdout and not out.exists()
    # A tag or branch is not a commit: the caller pins one commit, and the farm is checked out at that one.
    result = _bash(script, {**blank, "FARM_WORKFLOW_REPOSITORY": "owner/farm", "FARM_WORKFLOW_SHA": "v1"}, tmp_path)
    assert result.returncode == 1
    result = _bash(script, {**blank, "FARM_WORKFLOW_REPOSITORY": "owner/farm", "FARM_WORKFLOW_SHA": FARM_REF},
                   tmp_path)
    assert result.returncode == 0 and out.read_text() == f"repository=owner/farm\nref={FARM_REF}\n"
    out.unlink()
    other = "fedcba9876543210fedcba9876543210fedcba98"
    result = _bash(script, {**blank, "FARM_WORKFLOW_REPOSITORY": "owner/farm", "FARM_WORKFLOW_SHA": FARM_REF,
                            "FARM_REPOSITORY_INPUT": "fork/farm", "FARM_REF_INPUT": other}, tmp_path)
    assert result.returncode == 0 and out.read_text() == f"repository=fork/farm\nref={other}\n"


@pytest.mark.skipif(shutil.which("bash") is None or os.name == "nt", reason="the runners' bash")
def test_the_action_runs_the_farm_through_pipx_from_its_own_checkout(
        hand_written: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    script = next(s for s in hand_written["action.yml"]["runs"]["steps"] if s.get("id") == "farm")["run"]
    bin_dir, workspace = tmp_path / "bin", tmp_path / "ws"
    bin_dir.mkdir()
    (workspace / "ext").mkdir(parents=True)
    (workspace / "ext" / "pyproject.toml").write_text("[tool.cuda-ext-farm]\n")
    seen = tmp_path / "seen.json"
    # A stand-in pipx that records what it was asked to run, where and with which environment.
    pipx = bin_dir / "pipx"
    pipx.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"json.dump({{'argv': sys.argv[1:], 'cwd': os.getcwd(), 'env': dict(os.environ)}}, "
                    f"open({str(seen)!r}, 'w'))\nsys.exit(7)\n")
    pipx.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GITHUB_ACTION_PATH": str(ROOT),
           "GITHUB_WORKSPACE": str(workspace), "GITHUB_OUTPUT": str(tmp_path / "out"),
           "FARM_PYTHON": sys.executable, "FARM_INPUT_PROJECT": "ext", "FARM_INPUT_COMMAND": "build-cuda",
           "FARM_INPUT_ARGS": "--cuda 12 --arch-list '9.0 10.0'", "FARM_INPUT_OUTPUT_DIR": "dist/wheels"}
    result = _bash(script, env, workspace)
    assert result.returncode == 7, result.stdout  # the farm's exit status is the step's
    ran = json.loads(seen.read_text())
    assert ran["argv"] == ["run", "--python", sys.executable, "--spec", str(ROOT / "farm"), "cuda-ext-farm",
                           "build-cuda", "--cuda", "12", "--arch-list", "9.0 10.0"]
    assert Path(ran["cwd"]) == workspace / "ext" and ran["env"]["FARM_PROJECT"] == str(workspace / "ext")
    assert ran["env"]["FARM_WHEELHOUSE"] == str(workspace / "dist" / "wheels")
    assert (tmp_path / "out").read_text() == f"wheelhouse={workspace / 'dist' / 'wheels'}\n"
    result = _bash(script, {**env, "FARM_INPUT_PROJECT": "missing"}, workspace)
    assert result.returncode == 1 and "is not a folder" in result.stdout
    # What the action runs is the farm's distribution and its command.
    import tomllib

    farm = tomllib.loads((ROOT / "farm" / "pyproject.toml").read_text())
    assert "cuda-ext-farm" in farm["project"]["scripts"]


def test_the_documented_caller_workflows_pass_the_linters_and_use_what_exists(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "github-actions.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert len(examples) == 2
    step, job = examples
    assert re.search(r"uses: OWNER/FARM@[0-9a-f]{40} ", step)
    assert re.search(r"uses: OWNER/FARM/\.github/workflows/farm-build\.yml@[0-9a-f]{40} ", job)
    assert (FOLDER / "farm-build.yml").is_file()
    # The inputs the examples pass exist (the action's in action.yml, the workflow's in farm-build.yml).
    action_inputs = set(re.findall(r"^  ([\w-]+):$", ACTION.read_text().split("\noutputs:")[0], re.MULTILINE))
    workflow_inputs = set(re.findall(r"^      ([\w-]+):$", REUSABLE.read_text().split("\n    outputs:")[0],
                                     re.MULTILINE))
    assert {"project", "command", "args", "output-dir", "python-version"} <= action_inputs
    passed = set(re.findall(r"^          ([\w-]+): ", step.split("uses: OWNER/FARM@")[1].split("- name:")[0],
                            re.MULTILINE))
    assert {"args"} <= passed <= action_inputs, passed
    passed = set(re.findall(r"^      ([\w-]+): ", job.split("farm-build.yml@")[1].split("\n  collect:")[0],
                            re.MULTILINE))
    assert {"args", "artifact-name"} <= passed <= workflow_inputs, passed
    if workflows.tool("zizmor") is None or workflows.tool("check-jsonschema") is None:
        pytest.skip("zizmor and check-jsonschema are in ci/requirements/lint.txt")
    for i, example in enumerate(examples):
        (tmp_path / f"example-{i}.yml").write_text(example)
    assert workflows.lint(tmp_path) == 0


def test_every_job_that_pulls_or_builds_an_image_makes_room_first(documents: dict[str, dict[str, Any]]) -> None:
    seen = 0
    for name, doc in documents.items():
        for key, job in doc["jobs"].items():
            names = [str(s.get("name", "")) for s in job.get("steps", [])]
            pulls = [i for i, n in enumerate(names) if n.startswith("Builder image") and n.endswith("content tag")]
            if not pulls:
                continue
            seen += 1
            room = [i for i, n in enumerate(names) if n.startswith("Free disk")]
            assert room and room[0] < pulls[0], f"{name} {key}"
            script = job["steps"][room[0]]["run"]
            cell = names[pulls[0]].split()[2].rstrip(":")
            need = gha_steps.DISK_NEEDED_GIB[matrix.get_cell(cell).toolkit.kind]
            assert "exit 1" in script and f'-lt {need} ]' in script
    assert seen >= 4


def test_the_assemble_step_merges_the_pypi_wheel_only_for_a_project_across_cuda_majors(
        config: project.ProjectConfig, documents: dict[str, dict[str, Any]]) -> None:
    """fusedops sets pypi-cuda-majors: its assemble step (the same job, permissions and command: ``release
    assemble`` reads the key) says it merges the release cells' wheels; a project without the key's does not."""
    import dataclasses

    def assemble(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return docs["release.yml"]["jobs"]["assemble"]  # type: ignore[no-any-return]

    ours = assemble(documents)
    steps = [s for s in ours["steps"] if "release assemble" in s.get("run", "")]
    assert [s["name"] for s in steps] == ["python -m ci release assemble; pypi-cuda-majors: PyPI gets the release "
                                          "cells' x86_64 wheels merged into one wheel across CUDA majors"]
    assert {k: getattr(v, "value", v) for k, v in ours["permissions"].items()} == {"contents": "read"}
    plain = dataclasses.replace(config, pypi_cuda_majors=False)
    theirs = assemble(gha.render(gha_steps.context(plain, gha_steps.FarmSource())))
    assert [s["name"] for s in theirs["steps"] if "release assemble" in s.get("run", "")] == [
        "python -m ci release assemble"]
    assert [s["run"] for s in theirs["steps"] if "run" in s] == [s["run"] for s in ours["steps"] if "run" in s]
