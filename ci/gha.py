"""The GitHub Actions workflows of a project, as data: one job per target id, derived from the matrix.

``python -m ci workflows`` writes these documents with :mod:`ci.yamlout`; nothing here touches the disk.
Five workflows (``.github/workflows/``):

``ci.yml``         every push and pull request: lint (ruff, mypy, zizmor, the workflow schema, actionlint,
                   drift from the matrix), the unit and CPU tests with a host build of the release target, and
                   the container build of each Linux cell whose builder image changed. Read-only token.
``images.yml``     the builder image of each Linux cell, tagged by content like ``nox -s images``, pulled from
                   the repository's registry or built and pushed there (the pushed image is the cache).
``wheels.yml``     reusable: every target of the matrix (Linux in its cell's image with cibuildwheel, Windows
                   on GitHub's Windows runners), audited by the farm, then import-tested on a clean runner with
                   a CPU-only torch and the CUDA torch of its cell.
``gpu-tests.yml``  reusable: ``nox -s test-gpu`` on each Linux wheel on a self-hosted GPU runner whose label
                   is the repository variable ``GPU_RUNNER_LABEL``; skipped, with a warning, when it is unset.
``release.yml``    on a ``v*`` tag: images -> wheels + sdist -> GPU tests -> assemble (indexes, SHA256SUMS,
                   manifest) -> PyPI (trusted publishing) -> GitHub Release (provenance) -> the index site.

Standard library only (``packaging`` through ``ci.targets``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ci import actions, matrix, targets
from ci.errors import UsageError
from ci.project import ProjectConfig
from ci.yamlout import Commented

Job = dict[str, Any]
Step = dict[str, Any]

LINUX_RUNNER = "ubuntu-24.04"
#: The farm's own Python on the runners (any CPython >= 3.10 runs the farm).
FARM_PYTHON = "3.12"
PYTORCH_INDEX = "https://download.pytorch.org/whl"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
GPU_RUNNER_VARIABLE = "GPU_RUNNER_LABEL"
FILES = ("ci.yml", "images.yml", "wheels.yml", "gpu-tests.yml", "release.yml")

#: MSVC toolsets the cells pin -> the Visual Studio component that installs that toolset, and the GitHub
#: runner image whose Visual Studio can hold it (VS 2022 has 14.3x-14.4x, VS 2026 has 14.5x).
MSVC_COMPONENTS: Mapping[str, tuple[str, str]] = {
    "14.38": ("Microsoft.VisualStudio.Component.VC.14.38.17.8.x86.x64", "windows-2022"),
    "14.44": ("Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64", "windows-2022"),
    "14.50": ("Microsoft.VisualStudio.Component.VC.14.50.18.0.x86.x64", "windows-2025"),
}


@dataclasses.dataclass(frozen=True)
class FarmSource:
    """Where the workflows find the farm: the project's own repository (the farm's checkout), or the farm's
    repository checked out at a pinned commit into ``.farm`` (any other project)."""

    repository: str | None = None
    ref: str | None = None

    def __post_init__(self) -> None:
        if self.repository is not None and not re.fullmatch(r"[0-9a-f]{40}", self.ref or ""):
            raise UsageError("the farm's commit must be a full 40-hex SHA", self.ref,
                             "pass --farm-ref $(git -C FARM rev-parse HEAD)")

    @property
    def path(self) -> str:
        return "." if self.repository is None else ".farm"


@dataclasses.dataclass(frozen=True)
class Context:
    config: ProjectConfig
    linux: tuple[targets.Target, ...]
    windows: tuple[targets.Target, ...]
    farm: FarmSource
    default_branch: str = "main"

    @property
    def external(self) -> bool:
        return self.farm.repository is not None

    def requirements(self, lock: str) -> str:
        return f"{self.farm.path}/ci/requirements/{lock}.txt" if self.external else f"ci/requirements/{lock}.txt"

    @property
    def noxfile(self) -> str:
        return " -f .farm/noxfile.py" if self.external else ""

    def workflow_env(self) -> dict[str, str] | None:
        """Another project runs the farm from its pinned checkout, on itself (FARM_PROJECT)."""
        if not self.external:
            return None
        return {"PYTHONPATH": "${{ github.workspace }}/.farm", "FARM_PROJECT": "${{ github.workspace }}"}

    @property
    def linux_cells(self) -> tuple[matrix.Cell, ...]:
        return tuple({t.cell.name: t.cell for t in self.linux}.values())

    @property
    def release_target(self) -> targets.Target:
        return targets.default_target(self.config)


def context(config: ProjectConfig, farm: FarmSource, default_branch: str = "main") -> Context:
    return Context(config, targets.targets_for(config, "linux"), targets.targets_for(config, "windows"), farm,
                   default_branch)


#: Why a job holds each permission: written next to it (zizmor's undocumented-permissions audit wants that too).
WHY: Mapping[tuple[str, str], str] = {
    ("contents", "read"): "check out the repository",
    ("contents", "write"): "create the GitHub Release and upload its files",
    ("packages", "read"): "pull builder images from the repository's registry",
    ("packages", "write"): "push builder images to the repository's registry",
    ("attestations", "write"): "store the build provenance attestations",
    ("pages", "write"): "deploy the index site to GitHub Pages",
}


def permissions(*, oidc: str = "", **levels: str) -> dict[str, Commented]:
    """A job's permissions, each with its reason; ``oidc`` says what the OIDC token (id-token) is for."""
    result = {name.replace("_", "-"): Commented(level, WHY[(name, level)]) for name, level in levels.items()}
    if oidc:
        result["id-token"] = Commented("write", f"OIDC token: {oidc}")
    return result


#: GitHub's newer "$/" self-repository form is not yet known to actionlint or the workflow schema.
SELF_REPOSITORY_IGNORE = "zizmor: ignore[self-repository]"


def job_key(prefix: str, target_id: str) -> str:
    """A job id for a target: GitHub allows letters, digits, ``-`` and ``_`` (``torch2.11`` -> ``torch2_11``)."""
    return f"{prefix}-" + re.sub(r"[^A-Za-z0-9_-]", "_", target_id)


def header(ctx: Context, name: str) -> str:
    source = "the farm's matrix and [tool.cuda-ext-farm]" if ctx.external else "ci/matrix.py and [tool.cuda-ext-farm]"
    return (f"{name}: generated by `python -m ci workflows` (nox -s workflows) from {source}\n"
            f"of {ctx.config.name}. Do not edit it: change the matrix or the configuration and run that again.\n"
            "`python -m ci workflows --check` (the tests and the lint job) fails when this file and the matrix\n"
            "disagree. docs/releasing.md explains the jobs.")


# --- steps -------------------------------------------------------------------------------------------------


def checkout(ctx: Context) -> list[Step]:
    steps: list[Step] = [{"name": "Check out", "uses": actions.CHECKOUT.uses(),
                          "with": {"persist-credentials": False}}]
    if ctx.external:
        steps.append({"name": "Check out the farm", "uses": actions.CHECKOUT.uses(), "with": {
            "repository": ctx.farm.repository, "ref": ctx.farm.ref, "path": ".farm", "persist-credentials": False}})
    return steps


def setup_python(version: str = FARM_PYTHON) -> Step:
    return {"name": f"Python {version}", "uses": actions.SETUP_PYTHON.uses(), "with": {"python-version": version}}


def farm_tools(ctx: Context, lock: str = "farm") -> Step:
    return {"name": f"The farm's tools (ci/requirements/{lock}.txt, hash-pinned)",
            "run": f"python -m pip install --require-hashes --no-deps -r {ctx.requirements(lock)}"}


def prologue(ctx: Context, python: str = FARM_PYTHON, lock: str = "farm") -> list[Step]:
    return [*checkout(ctx), setup_python(python), farm_tools(ctx, lock)]


def registry_login() -> Step:
    return {"name": "Log in to the repository's container registry (GITHUB_TOKEN)",
            "uses": actions.DOCKER_LOGIN.uses(),
            "with": {"registry": "ghcr.io", "username": "${{ github.actor }}", "password": "${{ github.token }}"}}


def upload(name: str, path: str, *, retention: int | None = None, when: str | None = None,
           if_missing: str = "error") -> Step:
    step: Step = {"name": f"Upload {name}"}
    if when:
        step["if"] = when
    step["uses"] = actions.UPLOAD_ARTIFACT.uses()
    step["with"] = {"name": name, "path": path, "if-no-files-found": if_missing}
    if retention is not None:
        step["with"]["retention-days"] = retention
    return step


def download(name: str | None, path: str, *, pattern: str | None = None) -> Step:
    with_: dict[str, Any] = {"path": path}
    if pattern:
        with_["pattern"] = pattern
    else:
        with_ = {"name": name, **with_}
    return {"name": f"Download {name or pattern}", "uses": actions.DOWNLOAD_ARTIFACT.uses(), "with": with_}


def base_image_env(cells: Iterable[matrix.Cell]) -> dict[str, str]:
    """Cells whose toolkit comes from Debian packages build on the bootstrapped Debian base, as here."""
    return {f"FARM_BASE_IMAGE_{c.name.upper()}": "cuda-ext-farm/base" for c in cells if c.toolkit.kind == "debian"}


def image_steps(ctx: Context, cell: matrix.Cell, *, push: bool) -> list[Step]:
    """Pull the cell's builder image by its content tag; build it when the registry lacks it (and push)."""
    missing = "steps.pull.outputs.found != 'true'"
    steps: list[Step] = [{"name": f"Builder image {cell.name}: pull it by its content tag", "id": "pull",
                          "run": f"python -m ci workflows --pull-image {cell.name}"}]
    if cell.toolkit.kind == "debian":
        steps.append({
            "name": f"Debian {cell.debian_suite} base (the cell's toolkit comes from Debian packages)",
            "if": missing, "timeout-minutes": 30,
            "run": "sudo apt-get update -qq\n"
                   "sudo apt-get install -y -qq debootstrap debian-archive-keyring\n"
                   # debootstrap needs root; the farm runs with the runner's Python and its tools.
                   'sudo --preserve-env=PYTHONPATH "$(command -v python)" -m ci base-image '
                   f"--suite {cell.debian_suite} --mirror {DEBIAN_MIRROR}\n"})
    steps.append({"name": f"Builder image {cell.name}: build it (its tag is new)", "if": missing,
                  "timeout-minutes": 60, "run": f"python -m ci images {cell.name}"})
    if push:
        # Only the default branch and release tags write the registry later releases pull from.
        trusted = f"(github.ref == 'refs/heads/{ctx.default_branch}' || startsWith(github.ref, 'refs/tags/v'))"
        steps.append({"name": f"Builder image {cell.name}: push it (default branch and tags only)",
                      "if": f"{missing} && {trusted}",
                      "run": f"python -m ci workflows --push-image {cell.name}"})
    return steps


def document(ctx: Context, name: str, on: Mapping[str, Any], jobs: Mapping[str, Job],
             concurrency: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A workflow: no permissions at the top (each job says what it needs), bash everywhere (Windows too)."""
    doc: dict[str, Any] = {"name": name, "on": dict(on), "permissions": {}}
    if concurrency:
        doc["concurrency"] = dict(concurrency)
    env = ctx.workflow_env()
    if env:
        doc["env"] = env
    doc["defaults"] = {"run": {"shell": "bash"}}
    doc["jobs"] = dict(jobs)
    return doc


def _cell_summary(cell: matrix.Cell) -> str:
    return f"CUDA {cell.cuda}, torch {cell.torch}, {cell.host_compiler}, SASS {' '.join(cell.sass_archs)}"


# --- ci.yml ------------------------------------------------------------------------------------------------


def ci_workflow(ctx: Context) -> dict[str, Any]:
    release = ctx.release_target
    lint_steps: list[Step] = [*prologue(ctx, lock="lint")]
    if not ctx.external:
        lint_steps += [
            {"name": "ruff", "run": "ruff check ci noxfile.py tests setup.py package"},
            {"name": "mypy (strict)", "run": "mypy ci"},
        ]
    lint_steps += [
        {"name": "Workflows follow the matrix", "run": "python -m ci workflows --check"},
        {"name": "zizmor and the GitHub workflow schema", "run": "python -m ci workflows --lint"},
    ]
    if ctx.external:
        test_steps: list[Step] = [
            *prologue(ctx),
            {"name": f"Host build of {release.id}", "run": "python -m ci build"},
            {"name": "Smoke and CPU tests in a clean environment", "run": "python -m ci test"},
        ]
    else:
        test_steps = [
            *prologue(ctx, lock="lint"),
            {"name": f"Host build of {release.id} (hermetic toolkit, repair, audit)", "run": "nox -s build"},
            # The container tests need a bootstrapped base image; the container jobs below cover containers.
            {"name": "Unit and CPU tests, then the wheel under a CPU-only torch (nox -s tests)",
             "env": {"PIP_EXTRA_INDEX_URL": f"{PYTORCH_INDEX}/cpu"},
             "run": 'nox -s tests -- -m "not docker"'},
        ]
    jobs: dict[str, Job] = {
        "lint": {"name": "lint (ruff, mypy, zizmor, schema, drift)", "runs-on": LINUX_RUNNER,
                 "timeout-minutes": 20, "permissions": permissions(contents="read"), "steps": lint_steps},
        "actionlint": {
            "name": "actionlint", "runs-on": LINUX_RUNNER, "timeout-minutes": 10,
            "permissions": permissions(contents="read"),
            "steps": [*checkout(ctx)[:1],
                      {"name": f"Go {actions.GO_VERSION}", "uses": actions.SETUP_GO.uses(),
                       "with": {"go-version": actions.GO_VERSION, "cache": False}},
                      # `go run` checks the module against the Go checksum database; shellcheck (on the
                      # runner image) checks the run: scripts.
                      {"name": f"actionlint {actions.ACTIONLINT_VERSION}",
                       "run": f"go run {actions.ACTIONLINT_MODULE}@{actions.ACTIONLINT_VERSION} -color"}]},
        "tests": {"name": f"tests (unit, CPU; host build of {release.id})", "runs-on": LINUX_RUNNER,
                  "timeout-minutes": 150, "permissions": permissions(contents="read"), "steps": test_steps},
        "changes": {
            "name": "builder images that changed", "runs-on": LINUX_RUNNER, "timeout-minutes": 15,
            "permissions": permissions(contents="read", packages="read"),
            "env": base_image_env(ctx.linux_cells) or None,
            "outputs": {"cells": "${{ steps.changed.outputs.cells }}"},
            "steps": [*prologue(ctx), registry_login(),
                      {"name": "Cells whose image tag is not in the registry yet", "id": "changed",
                       "run": "python -m ci workflows --changed-cells"}]},
    }
    if jobs["changes"]["env"] is None:
        del jobs["changes"]["env"]
    for cell in ctx.linux_cells:
        ids = [t.id for t in ctx.linux if t.cell.name == cell.name]
        job: Job = {
            "name": f"container build {cell.name} ({', '.join(ids)})",
            "needs": "changes",
            "if": f"contains(fromJSON(needs.changes.outputs.cells), '{cell.name}')",
            "runs-on": LINUX_RUNNER, "timeout-minutes": 180,
            "permissions": permissions(contents="read", packages="read"),
        }
        env = base_image_env([cell])
        if env:
            job["env"] = env
        target_args = " ".join(f"--target {i}" for i in ids)
        job["steps"] = [*prologue(ctx), registry_login(), *image_steps(ctx, cell, push=False),
                        {"name": "cibuildwheel in the image, repair, audit",
                         "run": f"python -m ci build-cuda {target_args} --wheelhouse wheelhouse"},
                        upload(f"ci-wheels-{cell.name}", "wheelhouse/", retention=7)]
        jobs[f"container-{cell.name}"] = job
    return document(ctx, "CI", {"push": {"branches": ["**"]}, "pull_request": None, "workflow_dispatch": None},
                    jobs, {"group": "ci-${{ github.event.pull_request.number || github.ref }}",
                           "cancel-in-progress": True})


# --- images.yml --------------------------------------------------------------------------------------------


def images_workflow(ctx: Context) -> dict[str, Any]:
    paths = [".github/workflows/images.yml"] if ctx.external else \
        [".github/workflows/images.yml", "docker/**", "ci/images.py", "ci/matrix.py"]
    jobs: dict[str, Job] = {}
    for cell in ctx.linux_cells:
        job: Job = {"name": f"builder image {cell.name} ({_cell_summary(cell)})", "runs-on": LINUX_RUNNER,
                    "timeout-minutes": 120, "permissions": permissions(contents="read", packages="write")}
        env = base_image_env([cell])
        if env:
            job["env"] = env
        job["steps"] = [*prologue(ctx), registry_login(), *image_steps(ctx, cell, push=True)]
        jobs[f"image-{cell.name}"] = job
    return document(ctx, "Builder images", {"workflow_call": None, "workflow_dispatch": None,
                                            "push": {"branches": [ctx.default_branch], "paths": paths}}, jobs,
                    # Not the caller's group (a called workflow sharing it would wait for its caller).
                    {"group": "builder-images-${{ github.ref }}", "cancel-in-progress": False})


# --- wheels.yml --------------------------------------------------------------------------------------------


def _windows_toolset_step(cell: matrix.Cell) -> Step:
    assert cell.windows is not None
    toolset = cell.windows.toolset
    if toolset not in MSVC_COMPONENTS:
        raise UsageError(f"no Visual Studio component known for the MSVC toolset of {cell.name}", toolset,
                         f"add it to MSVC_COMPONENTS in ci/gha.py (known: {', '.join(MSVC_COMPONENTS)})")
    component = MSVC_COMPONENTS[toolset][0]
    low, high = cell.windows.msc_ver
    script = (
        '$vswhere = "${env:ProgramFiles(x86)}\\Microsoft Visual Studio\\Installer\\vswhere.exe"\n'
        "$vs = & $vswhere -latest -products * -property installationPath\n"
        f'if (Test-Path "$vs\\VC\\Tools\\MSVC\\{toolset}.*") {{ "MSVC {toolset} is installed in $vs"; exit 0 }}\n'
        '$installer = "${env:ProgramFiles(x86)}\\Microsoft Visual Studio\\Installer\\vs_installer.exe"\n'
        f"$arguments = @('modify', '--installPath', \"`\"$vs`\"\", '--add', '{component}', '--quiet', "
        "'--norestart', '--nocache')\n"
        "$process = Start-Process -FilePath $installer -ArgumentList $arguments -Wait -PassThru\n"
        f'if (-not (Test-Path "$vs\\VC\\Tools\\MSVC\\{toolset}.*")) {{\n'
        f'  throw "MSVC {toolset} did not install (vs_installer exit code $($process.ExitCode))"\n'
        "}\n"
    )
    return {"name": f"MSVC toolset {toolset} (CUDA {cell.cuda} accepts _MSC_VER {low}-{high - 1})",
            "timeout-minutes": 30, "shell": "pwsh", "run": script}


def windows_runner(cell: matrix.Cell) -> str:
    assert cell.windows is not None
    if cell.windows.toolset not in MSVC_COMPONENTS:
        _windows_toolset_step(cell)  # raises the one-line error
    return MSVC_COMPONENTS[cell.windows.toolset][1]


def toolkit_cache_key(cell: matrix.Cell) -> str:
    """Changes whenever the cell's Windows toolkit pins change (the matrix decides, so drift shows it)."""
    assert cell.windows is not None
    pins = json.dumps({"cuda": cell.cuda, "windows": dataclasses.asdict(cell.windows)}, sort_keys=True)
    return f"cuda-toolkit-windows-{cell.name}-{hashlib.sha256(pins.encode()).hexdigest()[:16]}"


def build_python(target: targets.Target) -> str:
    """abi3 wheels build with the cell's Python (any later one works); per-Python wheels with their own."""
    return target.cell.python if target.abi3 else target.python


def linux_build_job(ctx: Context, target: targets.Target) -> Job:
    cell = target.cell
    job: Job = {"name": f"build {target.id}", "runs-on": LINUX_RUNNER, "timeout-minutes": 180,
                "permissions": permissions(contents="read", packages="read")}
    env = base_image_env([cell])
    if env:
        job["env"] = env
    job["steps"] = [
        *prologue(ctx), registry_login(), *image_steps(ctx, cell, push=False),
        {"name": f"cibuildwheel in the {cell.name} image, repair, audit ({_cell_summary(cell)})",
         "run": f"python -m ci build-cuda --target {target.id} --wheelhouse wheelhouse"},
        upload(f"wheel-{target.id}", f"wheelhouse/{target.id}/"),
    ]
    return job


def windows_build_job(ctx: Context, target: targets.Target) -> Job:
    cell = target.cell
    assert cell.windows is not None
    facts = cell.windows
    what = ", ".join(facts.packages) if facts.packages else "the cell's PyPI toolkit wheels"
    steps: list[Step] = [
        *prologue(ctx, python=build_python(target)),
        _windows_toolset_step(cell),
        {"name": "Restore the CUDA toolkit (not in a release: inputs.cache is false there)", "if": "inputs.cache",
         "uses": actions.CACHE.uses(),
         "with": {"path": "~/.cache/cuda-ext-farm/tools", "key": toolkit_cache_key(cell)}},
        {"name": f"CUDA {cell.cuda} toolkit ({facts.toolkit}: {what})", "timeout-minutes": 30,
         "run": f"python -m ci toolkit --cuda {cell.cuda}"},
        {"name": f"Build, repair (delvewheel), audit with MSVC {facts.toolset}",
         "run": f"python -m ci build-win --target {target.id} --wheelhouse wheelhouse"},
        upload(f"wheel-{target.id}", f"wheelhouse/{target.id}/"),
    ]
    return {"name": f"build {target.id}", "runs-on": windows_runner(cell), "timeout-minutes": 180,
            "permissions": permissions(contents="read"), "steps": steps}


def torch_cuda_index(target: targets.Target) -> str:
    """PyTorch's index of the CUDA build of the target's torch (``…/cu130`` for torch 2.11)."""
    return f"{PYTORCH_INDEX}/cu{matrix.get_torch(target.torch).cuda.replace('.', '')}"


def import_job(ctx: Context, target: targets.Target) -> Job:
    runner = LINUX_RUNNER if target.os == "linux" else windows_runner(target.cell)
    base = f"python -m ci release --import-test dist --target {target.id}"
    steps: list[Step] = [*prologue(ctx, python=target.python), download(f"wheel-{target.id}", "dist")]
    if target.project.cpu_libraries:
        steps.append({"name": f"Import with a CPU-only torch {target.torch}",
                      "run": f"{base} --torch-kind cpu --torch-index {PYTORCH_INDEX}/cpu"})
    steps.append({"name": f"Import with the CUDA torch of {target.cell.name} (torch {target.torch})",
                  "run": f"{base} --torch-kind cuda --torch-index {torch_cuda_index(target)}"})
    return {"name": f"import-test {target.id} (CPython {target.python})", "needs": job_key("build", target.id),
            "runs-on": runner, "timeout-minutes": 60, "permissions": permissions(contents="read"), "steps": steps}


def wheels_workflow(ctx: Context) -> dict[str, Any]:
    jobs: dict[str, Job] = {}
    for target in ctx.linux:
        jobs[job_key("build", target.id)] = linux_build_job(ctx, target)
    for target in ctx.windows:
        jobs[job_key("build", target.id)] = windows_build_job(ctx, target)
    for target in (*ctx.linux, *ctx.windows):
        jobs[job_key("import", target.id)] = import_job(ctx, target)
    cache_input = {"description": "restore the Windows CUDA toolkits from the Actions cache (never in a release)",
                   "type": "boolean", "default": False}
    return document(ctx, "Wheels", {"workflow_call": {"inputs": {"cache": cache_input}},
                                    "workflow_dispatch": {"inputs": {"cache": {**cache_input, "default": True}}}},
                    jobs, {"group": "wheels-${{ github.ref }}", "cancel-in-progress": False})


# --- gpu-tests.yml -----------------------------------------------------------------------------------------


def gpu_workflow(ctx: Context) -> dict[str, Any]:
    variable = f"vars.{GPU_RUNNER_VARIABLE}"
    notice = (
        'if [ -z "$GPU_RUNNER_LABEL" ]; then\n'
        f'  echo "::warning title=GPU tests skipped::the repository variable {GPU_RUNNER_VARIABLE} is not set; '
        'set it to the label of a self-hosted GPU runner to run nox -s test-gpu on every Linux wheel"\n'
        f'  echo "GPU tests skipped: set the repository variable {GPU_RUNNER_VARIABLE}" >> "$GITHUB_STEP_SUMMARY"\n'
        "else\n"
        '  echo "GPU tests run on the self-hosted runner labelled $GPU_RUNNER_LABEL"\n'
        "fi\n"
    )
    jobs: dict[str, Job] = {
        "gpu-runner": {"name": f"GPU runner ({GPU_RUNNER_VARIABLE})", "runs-on": LINUX_RUNNER,
                       "timeout-minutes": 5, "permissions": {},
                       "steps": [{"name": "Say whether GPU tests run", "env": {
                           "GPU_RUNNER_LABEL": f"${{{{ {variable} }}}}"}, "run": notice}]},
    }
    for target in ctx.linux:
        steps: list[Step] = [
            *checkout(ctx), download(f"wheel-{target.id}", "dist"),
            {"name": f"nox -s test-gpu on {target.id}",
             "run": "python3 -m venv .venv-gpu\n"
                    f".venv-gpu/bin/python -m pip install --require-hashes --no-deps -r {ctx.requirements('lint')}\n"
                    'wheel="$(ls dist/*.whl)"\n'
                    f".venv-gpu/bin/nox{ctx.noxfile} -s test-gpu -- --target {target.id} "
                    f'--wheel "$wheel" --out "test-results/{target.id}"\n'},
            upload(f"gpu-results-{target.id}", f"test-results/{target.id}/", when="always()", if_missing="warn"),
        ]
        jobs[job_key("test-gpu", target.id)] = {
            "name": f"test-gpu {target.id}", "if": f"{variable} != ''",
            "runs-on": ["self-hosted", f"${{{{ {variable} }}}}"], "timeout-minutes": 120,
            "permissions": permissions(contents="read"), "steps": steps}
    return document(ctx, "GPU tests", {"workflow_call": None}, jobs)


# --- release.yml -------------------------------------------------------------------------------------------


def local_workflow(name: str) -> Commented:
    return Commented(f"./.github/workflows/{name}", SELF_REPOSITORY_IGNORE)


def release_workflow(ctx: Context) -> dict[str, Any]:
    name = ctx.config.name
    is_tag = "github.ref_type == 'tag'"
    assemble_script = (
        "tag_args=()\n"
        'if [ "$GITHUB_REF_TYPE" = tag ]; then tag_args=(--tag "$GITHUB_REF_NAME"); fi\n'
        "python -m ci release --assemble artifacts --sdist-dir sdist --out release "
        '"${tag_args[@]}"\n'
    )
    release_script = (
        'gh release create "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --verify-tag \\\n'
        f'  --title "{name} $GITHUB_REF_NAME" --notes-file notes/release-notes.md assets/*\n'
        # GitHub renames assets with characters it dislikes; the indexes link the names we uploaded.
        'gh release view "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --json assets --jq ".assets[].name" \\\n'
        "  | sort > uploaded.txt\n"
        "(cd assets && ls -1) | sort > expected.txt\n"
        "diff expected.txt uploaded.txt\n"
    )
    site_script = (
        "mkdir -p manifests\n"
        'gh release list --repo "$GITHUB_REPOSITORY" --limit 1000 --json tagName --jq ".[].tagName" \\\n'
        "  | while read -r tag; do\n"
        '    gh release download "$tag" --repo "$GITHUB_REPOSITORY" --pattern release-manifest.json '
        '--dir "manifests/$tag" \\\n'
        '      || echo "::notice::release $tag has no release-manifest.json (not made by the farm)"\n'
        "  done\n"
        "python -m ci release --site site --manifests manifests "
        '--base-url "https://github.com/$GITHUB_REPOSITORY/releases/download"\n'
    )
    jobs: dict[str, Job] = {
        "images": {"name": "builder images", "uses": local_workflow("images.yml"),
                   "permissions": permissions(contents="read", packages="write")},
        "wheels": {"name": "wheels", "needs": "images", "uses": local_workflow("wheels.yml"),
                   "with": {"cache": False}, "permissions": permissions(contents="read", packages="read")},
        "sdist": {"name": "sdist", "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
                  "permissions": permissions(contents="read"),
                  "steps": [*prologue(ctx),
                            {"name": "python -m build --sdist",
                             "run": "python -m ci release --sdist dist"},
                            upload("sdist", "dist/")]},
        "gpu-tests": {"name": "GPU tests", "needs": "wheels", "uses": local_workflow("gpu-tests.yml"),
                      "permissions": permissions(contents="read")},
        "assemble": {
            "name": "assemble: indexes, SHA256SUMS, manifest; audit again; check the indexes install",
            "needs": ["wheels", "sdist", "gpu-tests"], "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
            "permissions": permissions(contents="read"),
            "steps": [*prologue(ctx), download(None, "artifacts", pattern="wheel-*"), download("sdist", "sdist"),
                      {"name": "python -m ci release --assemble", "run": assemble_script},
                      upload("release-pypi", "release/pypi/"), upload("release-assets", "release/assets/"),
                      upload("release-notes", "release/release-notes.md"), upload("release-index", "release/index/")]},
        "publish-pypi": {
            "name": "publish to PyPI (trusted publishing, attestations)", "if": is_tag, "needs": "assemble",
            "runs-on": LINUX_RUNNER, "timeout-minutes": 20,
            "environment": {"name": "pypi", "url": f"https://pypi.org/project/{name}/"},
            "permissions": permissions(oidc="PyPI trusted publishing and its attestations"),
            "steps": [download("release-pypi", "dist"),
                      {"name": "Upload to PyPI", "uses": actions.PYPI_PUBLISH.uses(),
                       "with": {"packages-dir": "dist/", "attestations": True, "print-hash": True}}]},
        "publish-github": {
            "name": "GitHub Release: every wheel, SHA256SUMS, manifest, provenance", "if": is_tag,
            "needs": ["assemble", "publish-pypi"], "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
            "permissions": permissions(contents="write", attestations="write", oidc="sign the build provenance"),
            "steps": [download("release-assets", "assets"), download("release-notes", "notes"),
                      {"name": "Build provenance for every file in SHA256SUMS",
                       "uses": actions.ATTEST_BUILD_PROVENANCE.uses(),
                       "with": {"subject-checksums": "assets/SHA256SUMS"}},
                      {"name": "Create the release", "env": {"GH_TOKEN": "${{ github.token }}"},
                       "run": release_script}]},
        "publish-index": {
            "name": "per-variant indexes on GitHub Pages", "if": is_tag, "needs": "publish-github",
            "runs-on": LINUX_RUNNER, "timeout-minutes": 20,
            "environment": {"name": "github-pages", "url": "${{ steps.deploy.outputs.page_url }}"},
            "permissions": permissions(contents="read", pages="write", oidc="deploy to GitHub Pages"),
            "steps": [*prologue(ctx),
                      {"name": "The indexes of every release (from their manifests)",
                       "env": {"GH_TOKEN": "${{ github.token }}"}, "run": site_script},
                      {"name": "Upload the site", "uses": actions.UPLOAD_PAGES_ARTIFACT.uses(),
                       "with": {"path": "site/"}},
                      {"name": "Deploy", "id": "deploy", "uses": actions.DEPLOY_PAGES.uses()}]},
    }
    return document(ctx, "Release", {"push": {"tags": ["v*"]}, "workflow_dispatch": None}, jobs,
                    {"group": "release-${{ github.ref }}", "cancel-in-progress": False})


def render(ctx: Context) -> dict[str, dict[str, Any]]:
    """Every workflow document, by file name."""
    return {"ci.yml": ci_workflow(ctx), "images.yml": images_workflow(ctx), "wheels.yml": wheels_workflow(ctx),
            "gpu-tests.yml": gpu_workflow(ctx), "release.yml": release_workflow(ctx)}


def iter_uses(document: Mapping[str, Any]) -> Sequence[tuple[str, str, object]]:
    """(job, step name, uses) of every ``uses:`` in a document, reusable-workflow calls included."""
    found: list[tuple[str, str, object]] = []
    for key, job in document.get("jobs", {}).items():
        if "uses" in job:
            found.append((key, "(job)", job["uses"]))
        for step in job.get("steps", []):
            if "uses" in step:
                found.append((key, str(step.get("name", "?")), step["uses"]))
    return found
