"""The GitHub Actions workflows of a project, as data: one job per target id, derived from the matrix.

``cuda-ext-farm workflows render`` writes these documents with :mod:`ci.gha.yamlout`; nothing here touches the disk.
Nine workflows (``.github/workflows/``):

``ci.yml``         every push and pull request: lint (the farm's own: ruff, mypy, its floor plan; every project:
                   drift from the matrix, zizmor, the workflow schema), actionlint, the unit and CPU tests with a
                   host build of the release target, and the container build of each Linux cell whose builder
                   image changed. Read-only token.
``images.yml``     the builder image of each Linux cell and architecture (aarch64 ones on the arm64 runner),
                   tagged by content like ``nox -s images``, pulled from the repository's registry or built and
                   pushed there (the pushed image is the cache).
``wheels.yml``     reusable: every target of the matrix (Linux in its cell's image with cibuildwheel, Windows
                   on GitHub's Windows runners), audited by the farm, then import-tested on a clean runner with
                   a CPU-only torch and the CUDA torch of its cell. Every Linux build runs in a manylinux_2_28
                   base and its audit holds the wheel to that floor (``FARM_GLIBC_FLOOR``); linux_aarch64
                   targets build natively on ``ubuntu-24.04-arm`` in the manylinux_2_28_aarch64 base and are
                   import-tested there with PyPI's aarch64 torch (a CUDA build) and no GPU. A cell's local
                   stand-in (``stand_in_for``: cu124) is in no workflow: GitHub builds the release cell (cu128).
                   Called with ``targets`` (a JSON list), only those targets' jobs run (so does gpu-tests.yml).
``gpu-tests.yml``  reusable: ``nox -s test-gpu`` on each Linux wheel on a self-hosted GPU runner whose label
                   is the repository variable ``GPU_RUNNER_LABEL``; skipped, with a warning, when it is unset.
``release.yml``    on a ``v*`` tag: images -> wheels + sdist -> GPU tests -> assemble (indexes, SHA256SUMS,
                   manifest) -> PyPI (trusted publishing) -> GitHub Release (provenance) -> the index site.
``dispatch.yml``   by hand: the targets named or selected by torch/CUDA/Python/OS filters, through the same jobs,
                   optionally added to a tag's release and the index site (``ci/gha/dispatch_jobs.py``).
``adopt-torch.yml``, ``torch-canary.yml``  daily: a new torch from PyPI adopted (the farm: a pull request; a
                   project: its release's missing targets through dispatch.yml), and the project against torch's
                   release candidate, CPU only (``ci/gha/adopt_jobs.py``).
``extended-tests.yml``  the farm's own only: ``nox -s tests-extended`` weekly and by hand
                   (``ci/gha/extended_jobs.py``).

Standard library only (``packaging`` through ``ci.universe.targets``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ci import toolenv
from ci.gha import actions, adopt_jobs, chained_jobs, extended_jobs
from ci.gha.dispatch_jobs import TARGETS_INPUT, dispatch_workflow, index_site_job, local_workflow, only_selected
from ci.gha.steps import (
    GPU_RUNNER_VARIABLE,
    IMAGE_INPUTS,
    LINUX_RUNNER,
    LINUX_RUNNERS,
    Context,
    Job,
    Step,
    base_image_env,
    cached_build,
    cell_summary,
    checkout,
    document,
    download,
    env_step,
    free_disk,
    glibc_floor_env,
    image_steps,
    job_key,
    job_suffix,
    permissions,
    prologue,
    registry_login,
    target_python_env,
    upload,
)
from ci.gha.windows_jobs import windows_build_job, windows_runner
from ci.release import import_steps
from ci.universe import matrix, shapes, targets

if TYPE_CHECKING:
    from ci.universe.project import ProjectConfig

#: The farm's own workflows (another project's have no ``extended-tests.yml``: the extended suite is the farm's).
FILES = ("ci.yml", "images.yml", "wheels.yml", "gpu-tests.yml", "release.yml", "dispatch.yml", *adopt_jobs.FILES,
         extended_jobs.FILE)

# --- ci.yml ------------------------------------------------------------------------------------------------



#: Host builds link against a Debian bullseye sysroot (ci/linux/sysroot.py: manylinux_2_31 wheels); Ubuntu runners need
#: Debian's archive keyring to check its packages.
SYSROOT_KEYRING: Step = {"name": "Debian's archive keyring (the host build's bullseye sysroot)",
                         "run": "sudo apt-get update -qq\nsudo apt-get install -y -qq debian-archive-keyring\n"}

#: What each lint step checks, as the job's name lists it (the farm's own steps: toolenv.LINT_COMMANDS, in order).
FARM_LINT_NAMES = ("ruff", "mypy", "floor plan")
WORKFLOW_LINT_STEPS: tuple[tuple[str, Step], ...] = (
    ("drift", {"name": "Workflows follow the matrix", "run": "python -m ci workflows check"}),
    ("zizmor, schema", {"name": "zizmor and the GitHub workflow schema", "run": "python -m ci workflows lint"}),
)


def ci_lint_parts(ctx: Context) -> list[tuple[str, Step]]:
    """The lint job's checks, each with its name in the job's: for the farm itself nox -s lint's commands
    (ci/toolenv.py), for every project the workflows' drift check and linters. A project's code is not linted:
    its own linters are its choice, and the job's name says only what it runs."""
    own: list[tuple[str, Step]] = [] if ctx.external else [
        (label, {"name": name, "run": shlex.join(["python", *args])})
        for label, (name, args) in zip(FARM_LINT_NAMES, toolenv.LINT_COMMANDS, strict=True)]
    return [*own, *((label, dict(step)) for label, step in WORKFLOW_LINT_STEPS)]


def ci_lint_steps(ctx: Context) -> list[Step]:
    return [*prologue(ctx, lock="lint"), *(step for _, step in ci_lint_parts(ctx))]


def ci_lint_name(ctx: Context) -> str:
    """``lint (drift, zizmor, schema)``: what the job runs, from its steps."""
    return f"lint ({', '.join(label for label, _ in ci_lint_parts(ctx))})"


def ci_test_steps(ctx: Context) -> list[Step]:
    """The tests job: the release target's host build, then a project's smoke and CPU tests, or the farm's own
    suite (whose markers leave the container and extended tests out; the container jobs cover containers)."""
    release = ctx.release_target
    if ctx.external:
        return [*prologue(ctx), SYSROOT_KEYRING,
                *cached_build({"name": f"Host build of {release.id}", "run": "python -m ci build"}),
                {"name": "Smoke and CPU tests in a clean environment", "run": "python -m ci test"}]
    return [*prologue(ctx, lock="lint"), SYSROOT_KEYRING,
            *cached_build({"name": f"Host build of {release.id} (hermetic toolkit, repair, audit)",
                           "run": "nox -s build"}),
            {"name": "Unit and CPU tests, then the wheel under a CPU-only torch (nox -s tests)",
             "env": {"PIP_EXTRA_INDEX_URL": f"{matrix.PYTORCH_INDEX}/cpu"}, "run": "nox -s tests"}]


def ci_container_job(ctx: Context, cell: shapes.Cell) -> Job:
    """One cell's container build of its x86_64 targets, when the cell's image changed."""
    ids = [t.id for t in ctx.linux if t.cell.name == cell.name and t.arch == "x86_64"]
    target_args = " ".join(f"--target {i}" for i in ids)
    return {
        "name": f"container build {cell.name} ({', '.join(ids)})", "needs": "changes",
        "if": f"contains(fromJSON(needs.changes.outputs.cells), '{cell.name}')",
        "runs-on": LINUX_RUNNER, "timeout-minutes": 180, "permissions": permissions(contents="read", packages="read"),
        "env": {**glibc_floor_env(), **base_image_env([cell])},
        "steps": [*prologue(ctx), free_disk(cell), registry_login(), *image_steps(ctx, cell, push=False),
                  *cached_build({"name": "cibuildwheel in the image, repair, audit",
                                 "run": f"python -m ci build-cuda {target_args} --wheelhouse wheelhouse"},
                                container=True),
                  upload(f"ci-wheels-{cell.name}", "wheelhouse/", retention=7)],
    }


def ci_workflow(ctx: Context) -> dict[str, Any]:
    release = ctx.release_target
    jobs: dict[str, Job] = {
        "lint": {"name": ci_lint_name(ctx), "runs-on": LINUX_RUNNER,
                 "timeout-minutes": 20, "permissions": permissions(contents="read"), "steps": ci_lint_steps(ctx)},
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
                  "timeout-minutes": 150, "permissions": permissions(contents="read"), "steps": ci_test_steps(ctx)},
        "changes": {
            "name": "builder images that changed", "runs-on": LINUX_RUNNER, "timeout-minutes": 15,
            "permissions": permissions(contents="read", packages="read"),
            "env": base_image_env(ctx.linux_cells) or None,
            "outputs": {"cells": "${{ steps.changed.outputs.cells }}"},
            "steps": [*prologue(ctx), registry_login(),
                      {"name": "Cells whose image tag is not in the registry yet", "id": "changed",
                       "run": "python -m ci images changed"}]},
    }
    if jobs["changes"]["env"] is None:
        del jobs["changes"]["env"]
    jobs |= {f"container-{cell.name}": ci_container_job(ctx, cell) for cell in ctx.linux_cells}
    return document(ctx, "CI", {"push": {"branches": ["**"]}, "pull_request": None, "workflow_dispatch": None},
                    jobs, {"group": "ci-${{ github.event.pull_request.number || github.ref }}",
                           "cancel-in-progress": True})


# --- images.yml --------------------------------------------------------------------------------------------


def images_workflow(ctx: Context) -> dict[str, Any]:
    paths = [".github/workflows/images.yml"] if ctx.external else \
        [".github/workflows/images.yml", *IMAGE_INPUTS]
    jobs: dict[str, Job] = {}
    for cell, arch in ctx.linux_images:
        # Each architecture's image is built natively on its own runner (images.spec_for: the machine's).
        job: Job = {"name": f"builder image {cell.name} {arch} ({cell_summary(cell)})", "runs-on": LINUX_RUNNERS[arch],
                    "timeout-minutes": 120, "permissions": permissions(contents="read", packages="write")}
        env = base_image_env([cell])
        if env:
            job["env"] = env
        job["steps"] = [*prologue(ctx), free_disk(cell), registry_login(),
                        *image_steps(ctx, cell, push=True, arch=arch)]
        jobs[f"image-{cell.name}{job_suffix(arch)}"] = job
    return document(ctx, "Builder images", {"workflow_call": None, "workflow_dispatch": None,
                                            "push": {"branches": [ctx.default_branch], "paths": paths}}, jobs,
                    # Not the caller's group (a called workflow sharing it would wait for its caller).
                    {"group": "builder-images-${{ github.ref }}", "cancel-in-progress": False})


# --- wheels.yml --------------------------------------------------------------------------------------------


def import_job(ctx: Context, target: targets.Target) -> Job:
    runner = LINUX_RUNNERS[target.arch] if target.os == "linux" else windows_runner(target.cell)
    steps: list[Step] = [*prologue(ctx, target_python=target.python), download(f"wheel-{target.id}", "dist")]
    env = env_step(target_python_env(target.python))
    for name, command in import_steps.import_commands(target):
        steps.append({"name": name, **env, "run": command})
    job: Job = {"name": f"import-test {target.id} (CPython {target.python})", "needs": job_key("build", target.id)}
    if target.os == "linux":  # a chain of build jobs (ci/gha/chained_jobs.py): the one that finished has the wheel
        job["needs"], job["if"] = chained_jobs.import_needs(target)
    return {**job, "runs-on": runner, "timeout-minutes": 60, "permissions": permissions(contents="read"),
            "steps": steps}


def wheels_workflow(ctx: Context) -> dict[str, Any]:
    jobs: dict[str, Job] = {}
    for target in ctx.linux:
        jobs |= chained_jobs.linux_build_jobs(ctx, target)
    for target in ctx.windows:
        jobs[job_key("build", target.id)] = only_selected(windows_build_job(ctx, target), target.id)
    for target in (*ctx.linux, *ctx.windows):
        jobs[job_key("import", target.id)] = only_selected(import_job(ctx, target), target.id)
    cache_input = {"description": "restore the Windows CUDA toolkits from the Actions cache (never in a release)",
                   "type": "boolean", "default": False}
    return document(ctx, "Wheels", {"workflow_call": {"inputs": {"cache": cache_input, "targets": TARGETS_INPUT}},
                                    "workflow_dispatch": {"inputs": {"cache": {**cache_input, "default": True},
                                                                     "targets": TARGETS_INPUT}}},
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
    # The self-hosted GPU runner is x86_64: the aarch64 wheels' GPU lanes need an arm64 GPU runner (GH200/GB200),
    # which the repository variable names no label for yet; their import tests run on GitHub's arm64 runners.
    for target in (t for t in ctx.linux if t.arch == "x86_64"):
        steps: list[Step] = [
            *checkout(ctx), download(f"wheel-{target.id}", "dist"),
            {"name": f"nox -s test-gpu on {target.id}",
             "run": "python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {\n"
                    '  echo "::error title=GPU runner::the farm needs python3 >= 3.11 on the runner, it has '
                    '$(python3 --version 2>&1)"; exit 1; }\n'
                    "python3 -m venv .venv-gpu\n"
                    f".venv-gpu/bin/python -m pip install --require-hashes --no-deps -r {ctx.requirements('lint')}\n"
                    'wheel="$(ls dist/*.whl)"\n'
                    f".venv-gpu/bin/nox{ctx.noxfile} -s test-gpu -- --target {target.id} "
                    f'--wheel "$wheel" --out "test-results/{target.id}"\n'},
            upload(f"gpu-results-{target.id}", f"test-results/{target.id}/", when="always()", if_missing="warn",
                   overwrite=True),
        ]
        jobs[job_key("test-gpu", target.id)] = only_selected({
            "name": f"test-gpu {target.id}", "if": f"{variable} != ''",
            "runs-on": ["self-hosted", f"${{{{ {variable} }}}}"], "timeout-minutes": 120,
            "permissions": permissions(contents="read"), "steps": steps}, target.id)
    return document(ctx, "GPU tests", {"workflow_call": {"inputs": {"targets": TARGETS_INPUT}}}, jobs)


# --- release.yml -------------------------------------------------------------------------------------------


def assemble_step_name(config: ProjectConfig) -> str:
    """The assemble step; with ``pypi-cuda-majors`` it also merges the release cells' x86_64 wheels (already among
    the downloaded artifacts: nothing is built) into the one wheel PyPI gets (``ci/release/majors.py``)."""
    if not config.pypi_cuda_majors:
        return "python -m ci release assemble"
    return ("python -m ci release assemble; pypi-cuda-majors: PyPI gets the release cells' x86_64 wheels merged "
            "into one wheel across CUDA majors")


#: The assemble job's script: the downloaded wheels and sdist into the release folder, a tag's name when it is one.
ASSEMBLE_SCRIPT = (
    "tag_args=()\n"
    'if [ "$GITHUB_REF_TYPE" = tag ]; then tag_args=(--tag "$GITHUB_REF_NAME"); fi\n'
    "python -m ci release assemble artifacts --sdist-dir sdist --out release "
    '"${tag_args[@]}"\n'
)


def github_release_script(name: str) -> str:
    """The GitHub Release's upload: a re-run finds the release it made and uploads again (same names, --clobber)
    instead of failing; GitHub renames assets with characters it dislikes, and the indexes link the names uploaded,
    so the names are compared."""
    return (
        'if gh release view "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" > /dev/null 2>&1; then\n'
        '  gh release upload "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --clobber assets/*\n'
        "else\n"
        '  gh release create "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --verify-tag \\\n'
        f'    --title "{name} $GITHUB_REF_NAME" --notes-file notes/release-notes.md assets/*\n'
        "fi\n"
        'gh release view "$GITHUB_REF_NAME" --repo "$GITHUB_REPOSITORY" --json assets --jq ".assets[].name" \\\n'
        "  | sort > uploaded.txt\n"
        "(cd assets && ls -1) | sort > expected.txt\n"
        "diff expected.txt uploaded.txt\n"
    )


def sdist_jobs(ctx: Context) -> dict[str, Job]:
    """The sdist (without the CUDA torch: a CPU one only when setup.py imports torch), and the release target's wheel
    built from it alone."""
    return {
        "sdist": {"name": "sdist", "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
                  "permissions": permissions(contents="read"),
                  "steps": [*prologue(ctx),
                            {"name": "python -m build --sdist (without the CUDA torch), then its file list checked",
                             "run": f"python -m ci release sdist dist --torch-index {matrix.PYTORCH_INDEX}/cpu"},
                            upload("sdist", "dist/")]},
        "sdist-wheel": {
            "name": f"the sdist builds: {ctx.release_target.id} from the sdist alone, audited", "needs": "sdist",
            "runs-on": LINUX_RUNNER, "timeout-minutes": 90, "permissions": permissions(contents="read"),
            "steps": [*prologue(ctx), download("sdist", "sdist"),
                      {"name": "python -m ci release wheel-from-sdist",
                       "run": "python -m ci release wheel-from-sdist sdist --out sdist-wheel"}]},
    }


def publish_jobs(ctx: Context, is_tag: str) -> dict[str, Job]:
    """A tag's publishing: the GitHub Release with provenance first, then PyPI (it cannot take a file back), then
    the index site."""
    name = ctx.config.name
    return {
        "publish-pypi": {
            "name": "publish to PyPI (trusted publishing, attestations)", "if": is_tag, "needs": "publish-github",
            "runs-on": LINUX_RUNNER, "timeout-minutes": 20,
            "environment": {"name": "pypi", "url": f"https://pypi.org/project/{name}/"},
            "permissions": permissions(oidc="PyPI trusted publishing and its attestations"),
            "steps": [download("release-pypi", "dist"),
                      {"name": "Upload to PyPI", "uses": actions.PYPI_PUBLISH.uses(),
                       # A re-run skips what the first run uploaded (PyPI refuses a second file of a name).
                       "with": {"packages-dir": "dist/", "attestations": True, "print-hash": True,
                                "skip-existing": True}}]},
        "publish-github": {
            "name": "GitHub Release: every wheel, SHA256SUMS, manifest, provenance", "if": is_tag,
            "needs": "assemble", "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
            "permissions": permissions(contents="write", attestations="write", oidc="sign the build provenance"),
            "steps": [download("release-assets", "assets"), download("release-notes", "notes"),
                      {"name": "Build provenance for every file in SHA256SUMS",
                       "uses": actions.ATTEST_BUILD_PROVENANCE.uses(),
                       "with": {"subject-checksums": "assets/SHA256SUMS"}},
                      {"name": "Create the release", "env": {"GH_TOKEN": "${{ github.token }}"},
                       "run": github_release_script(name)}]},
        "publish-index": index_site_job(ctx, is_tag, "publish-github"),
    }


def release_workflow(ctx: Context) -> dict[str, Any]:
    # A run started by hand on a tag is a rehearsal: only the tag's own push publishes.
    is_tag = "github.event_name == 'push' && github.ref_type == 'tag'"
    jobs: dict[str, Job] = {
        "images": {"name": "builder images", "uses": local_workflow("images.yml"),
                   "permissions": permissions(contents="read", packages="write")},
        "wheels": {"name": "wheels", "needs": "images", "uses": local_workflow("wheels.yml"),
                   "with": {"cache": False}, "permissions": permissions(contents="read", packages="read")},
        **sdist_jobs(ctx),
        "gpu-tests": {"name": "GPU tests", "needs": "wheels", "uses": local_workflow("gpu-tests.yml"),
                      "permissions": permissions(contents="read")},
        "assemble": {
            "name": "assemble: indexes, SHA256SUMS, manifest; audit again; check the indexes install",
            "needs": ["wheels", "sdist", "sdist-wheel", "gpu-tests"], "runs-on": LINUX_RUNNER, "timeout-minutes": 30,
            "permissions": permissions(contents="read"),
            "steps": [*prologue(ctx), download(None, "artifacts", pattern="wheel-*"), download("sdist", "sdist"),
                      {"name": assemble_step_name(ctx.config), "run": ASSEMBLE_SCRIPT},
                      upload("release-pypi", "release/pypi/"), upload("release-assets", "release/assets/"),
                      upload("release-notes", "release/release-notes.md"), upload("release-index", "release/index/")]},
        **publish_jobs(ctx, is_tag),
    }
    return document(ctx, "Release", {"push": {"tags": ["v*"]}, "workflow_dispatch": None}, jobs,
                    {"group": "release-${{ github.ref }}", "cancel-in-progress": False})


def render(ctx: Context) -> dict[str, dict[str, Any]]:
    """Every workflow document, by file name."""
    rendered = {"ci.yml": ci_workflow(ctx), "images.yml": images_workflow(ctx), "wheels.yml": wheels_workflow(ctx),
                "gpu-tests.yml": gpu_workflow(ctx), "release.yml": release_workflow(ctx),
                "dispatch.yml": dispatch_workflow(ctx), "adopt-torch.yml": adopt_jobs.adopt_workflow(ctx),
                "torch-canary.yml": adopt_jobs.canary_workflow(ctx)}
    if not ctx.external:
        rendered[extended_jobs.FILE] = extended_jobs.extended_workflow(ctx)
    return rendered


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
