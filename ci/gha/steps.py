"""The building blocks of the generated workflows (``ci/gha/jobs.py``): the context a project's workflows are rendered
for, job permissions with their reasons, and the steps every job shares (checkout, the farm's Python and tools,
the target's Python, disk, registry, artifacts, builder images).

Standard library only (``packaging`` through ``ci.universe.targets``).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ci.errors import UsageError
from ci.gha import actions
from ci.gha.yamlout import Commented
from ci.linux import debian
from ci.universe import matrix, pins, shapes, targets
from ci.universe.project import ProjectConfig

Job = dict[str, Any]
Step = dict[str, Any]

LINUX_RUNNER = "ubuntu-24.04"
#: The GitHub-hosted runner of each Linux architecture: linux_aarch64 wheels build natively on the arm64 runner
#: (``ubuntu-24.04-arm``, GitHub's label for its hosted arm64 Linux runners; there is no ``ubuntu-latest-arm``).
LINUX_RUNNERS: Mapping[str, str] = {"x86_64": LINUX_RUNNER, "aarch64": "ubuntu-24.04-arm"}
GPU_RUNNER_VARIABLE = "GPU_RUNNER_LABEL"
#: What a builder image's content tag hashes (``ci/linux/images.py``: the Dockerfile and its scripts, the locks it
#: installs, the cell's arguments): a push touching them rebuilds the images. tests/unit/gha/test_workflows.py checks
#: that every file of every image's build context matches one of these.
IMAGE_INPUTS = ("docker/**", "ci/requirements/**", "ci/linux/images.py", "ci/universe/matrix.py")

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
    def linux_cells(self) -> tuple[shapes.Cell, ...]:
        """The cells of the x86_64 Linux targets (CI's container builds, the ``changes`` job)."""
        return tuple({t.cell.name: t.cell for t in self.linux if t.arch == "x86_64"}.values())

    @property
    def linux_images(self) -> tuple[tuple[shapes.Cell, str], ...]:
        """(cell, architecture) of every builder image the release needs: one per cell and Linux architecture."""
        return tuple({(t.cell.name, t.arch): (t.cell, t.arch) for t in self.linux}.values())

    @property
    def release_target(self) -> targets.Target:
        return targets.default_target(self.config)


def context(config: ProjectConfig, farm: FarmSource, default_branch: str = "main") -> Context:
    """Every architecture's Linux targets (``targets.platform_targets``) and the Windows ones, without stand-ins."""
    linux, windows = targets.workflow_targets(config)
    return Context(config, linux, windows, farm, default_branch)


def job_suffix(arch: str) -> str:
    """``-aarch64`` for the jobs of another architecture than x86_64 (whose keys keep their old names)."""
    return "" if arch == "x86_64" else f"-{arch}"


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


#: The command a header names: the installed one, the same whoever renders (the text must not depend on how the
#: farm was run, or `workflows check` would see drift); the farm's own checkout also has `nox -s workflows`.
RENDER_COMMAND = "cuda-ext-farm workflows render"


def header(ctx: Context, name: str) -> str:
    source = ("the farm's matrix and [tool.cuda-ext-farm]" if ctx.external
              else "ci/universe/matrix.py and [tool.cuda-ext-farm]")
    again = "run that again" if ctx.external else "run that (or nox -s workflows) again"
    return (f"{name}: generated by `{RENDER_COMMAND}` from {source}\n"
            f"of {ctx.config.name}. Do not edit it: change the matrix or the configuration and {again}.\n"
            "`cuda-ext-farm workflows check` (the tests and the lint job) fails when this file and the matrix\n"
            "disagree. docs/releasing.md explains the jobs.")


# --- steps -------------------------------------------------------------------------------------------------


def checkout(ctx: Context) -> list[Step]:
    steps: list[Step] = [{"name": "Check out", "uses": actions.CHECKOUT.uses(),
                          "with": {"persist-credentials": False}}]
    if ctx.external:
        steps.append({"name": "Check out the farm", "uses": actions.CHECKOUT.uses(), "with": {
            "repository": ctx.farm.repository, "ref": ctx.farm.ref, "path": ".farm", "persist-credentials": False}})
    return steps


def setup_python(version: str = pins.FARM_PYTHON) -> Step:
    return {"name": f"Python {version}", "uses": actions.SETUP_PYTHON.uses(), "with": {"python-version": version}}


def farm_tools(ctx: Context, lock: str = "farm") -> Step:
    return {"name": f"The farm's tools (ci/requirements/{lock}.txt, hash-pinned)",
            "run": f"python -m pip install --require-hashes --no-deps -r {ctx.requirements(lock)}"}


def prologue(ctx: Context, lock: str = "farm", *, target_python: str | None = None) -> list[Step]:
    """Check out, Python, the farm's tools. The farm's tools always run in the farm's own interpreter (their
    lock serves the Pythons and platforms ``ci/universe/pins.py`` names); a job that builds or tests for another CPython
    sets that one up first, under the id ``target-python`` (``target_python_env`` hands its path to the farm)."""
    steps = checkout(ctx)
    if target_python is not None and target_python != pins.FARM_PYTHON:
        steps.append({"name": f"CPython {target_python} (the target's)", "id": "target-python",
                      "uses": actions.SETUP_PYTHON.uses(), "with": {"python-version": target_python}})
    return [*steps, {**setup_python(pins.FARM_PYTHON), "name": f"Python {pins.FARM_PYTHON} (the farm's)"},
            farm_tools(ctx, lock)]


def target_python_env(version: str) -> dict[str, str]:
    """``FARM_PYTHON_3_10``: the interpreter ``ci.toolchain.envs.find_interpreter`` uses for that version
    (setup-python's
    own path: Windows runners have no ``python3.10`` on PATH)."""
    if version == pins.FARM_PYTHON:
        return {}
    return {f"FARM_PYTHON_{version.replace('.', '_')}": "${{ steps.target-python.outputs.python-path }}"}


#: GiB free on / a job needs before it pulls or builds a cell's builder image and builds in it, measured here
#: (``nox -s images`` prints each layer): the CUDA 12.4 (Debian packages) image is 5.3 GiB and its build peaks
#: near 10 GiB, a wheels job needs about 14 (the pulled image twice, compressed and unpacked; the torch volume,
#: 4; pip's cache and the build); a PyPI-toolkit image is 0.9 GiB, with torch about 7 in all. A standard
#: ubuntu-24.04 runner guarantees 14 GiB free. The NVIDIA-repository image (CUDA 12.8 RPMs: nvcc, the runtime,
#: CCCL and the cuBLAS/cuSPARSE/cuSOLVER development packages with their static libraries) is estimated, not
#: measured (NVIDIA's site is unreachable here): about 4 GiB, so between the two.
DISK_NEEDED_GIB: Mapping[str, int] = {"debian": 20, "nvidia-repo": 16, "pypi": 10}
#: Preinstalled SDKs no job of the farm uses (about 30 GiB on ubuntu-24.04).
UNUSED_SDKS = ("/usr/share/dotnet", "/usr/local/lib/android", "/opt/ghc", "/opt/hostedtoolcache/CodeQL",
               "/usr/local/share/boost", "/usr/local/.ghcup")


def free_disk(cell: shapes.Cell) -> Step:
    """Make room for the cell's image and torch when there is too little (removing SDKs takes a minute or two),
    then stop early, with the figures, when there still is too little."""
    return make_room(DISK_NEEDED_GIB[cell.toolkit.kind], f"the {cell.name} image and torch", f"the {cell.name} build")


def make_room(need: int, what: str, who: str) -> Step:
    """Free ``need`` GiB on / for ``what`` (a step's name) or stop, naming ``who`` needs it."""
    free = "$(df --output=avail -BG / | tail -n 1 | tr -dc 0-9)"
    return {"name": f"Free disk for {what} ({need} GiB)", "run":
            f"free={free}\n"
            f'if [ "$free" -lt {need} ]; then\n'
            f"  sudo rm -rf {' '.join(UNUSED_SDKS)}\n"
            "  sudo docker image prune --all --force > /dev/null\n"
            f"  free={free}\n"
            "fi\n"
            f'echo "free on /: ${{free}} GiB ({who} needs {need})"\n'
            f'if [ "$free" -lt {need} ]; then\n'
            f'  echo "::error title=Disk::${{free}} GiB free, {who} needs {need} GiB: '
            'use a larger runner"\n'
            "  exit 1\n"
            "fi\n"}


def registry_login() -> Step:
    return {"name": "Log in to the repository's container registry (GITHUB_TOKEN)",
            "uses": actions.DOCKER_LOGIN.uses(),
            "with": {"registry": "ghcr.io", "username": "${{ github.actor }}", "password": "${{ github.token }}"}}


def upload(name: str, path: str, *, retention: int | None = None, when: str | None = None,
           if_missing: str = "error", overwrite: bool = False) -> Step:
    """``overwrite``: a re-run of the job replaces its artifact (upload-artifact answers 409 otherwise)."""
    step: Step = {"name": f"Upload {name}"}
    if when:
        step["if"] = when
    step["uses"] = actions.UPLOAD_ARTIFACT.uses()
    step["with"] = {"name": name, "path": path, "if-no-files-found": if_missing}
    if retention is not None:
        step["with"]["retention-days"] = retention
    if overwrite:
        step["with"]["overwrite"] = True
    return step


def download(name: str | None, path: str, *, pattern: str | None = None) -> Step:
    with_: dict[str, Any] = {"path": path}
    if pattern:
        with_["pattern"] = pattern
    else:
        with_ = {"name": name, **with_}
    return {"name": f"Download {name or pattern}", "uses": actions.DOWNLOAD_ARTIFACT.uses(), "with": with_}


def base_image_env(cells: Iterable[shapes.Cell]) -> dict[str, str]:
    """Cells whose toolkit comes from Debian packages build on the bootstrapped Debian base, as here."""
    return {f"FARM_BASE_IMAGE_{c.name.upper()}": "cuda-ext-farm/base" for c in cells if c.toolkit.kind == "debian"}


def image_steps(ctx: Context, cell: shapes.Cell, *, push: bool, arch: str = "x86_64") -> list[Step]:
    """Pull the cell's builder image by its content tag; build it when the registry lacks it (and push). An image is
    the runner's architecture (``images.spec_for``): the aarch64 jobs run these steps on the arm64 runner."""
    missing = "steps.pull.outputs.found != 'true'"
    steps: list[Step] = [{"name": f"Builder image {cell.name}: pull it by its content tag", "id": "pull",
                          "run": f"python -m ci images pull {cell.name}"}]
    if cell.toolkit.kind == "debian":
        steps.append({
            "name": f"Debian {cell.debian_suite} base (the cell's toolkit comes from Debian packages)",
            "if": missing, "timeout-minutes": 30,
            "run": "sudo apt-get update -qq\n"
                   "sudo apt-get install -y -qq debootstrap debian-archive-keyring\n"
                   # debootstrap needs root; the farm runs with the runner's Python and its tools.
                   'sudo --preserve-env=PYTHONPATH "$(command -v python)" -m ci base-image '
                   f"--suite {cell.debian_suite} --mirror {debian.DEFAULT_MIRROR}\n"})
    base = "its Debian base" if cell.toolkit.kind == "debian" else matrix.base_image_for_arch(cell.base_image, arch)
    steps.append({"name": f"Builder image {cell.name}: build it on {base} (its tag is new)", "if": missing,
                  "timeout-minutes": 60, "run": f"python -m ci images {cell.name}"})
    if push:
        # Only the default branch and release tags write the registry later releases pull from.
        trusted = f"(github.ref == 'refs/heads/{ctx.default_branch}' || startsWith(github.ref, 'refs/tags/v'))"
        steps.append({"name": f"Builder image {cell.name}: push it (default branch and tags only)",
                      "if": f"{missing} && {trusted}",
                      "run": f"python -m ci images push {cell.name}"})
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


def cell_summary(cell: shapes.Cell) -> str:
    return f"CUDA {cell.cuda}, torch {cell.torch}, {runner_compiler(cell)}, SASS {' '.join(cell.sass_archs)}"


def glibc_floor_env() -> dict[str, str]:
    """Every Linux build job's audit holds its wheel to the release's glibc floor (ci/audit/glibc_floor.py)."""
    return {"FARM_GLIBC_FLOOR": matrix.RELEASE_FLOOR}


def runner_compiler(cell: shapes.Cell) -> str:
    """The compiler the cell's image has on GitHub: Debian's ``gcc-N`` on the Debian base (toolkit from Debian
    packages), the manylinux base's ``gcc-toolset-N`` otherwise (``docker/detect-toolchain.sh`` finds it)."""
    if cell.toolkit.kind == "debian" or not cell.base_image.startswith("quay.io/pypa/manylinux"):
        return cell.host_compiler
    return cell.host_compiler.replace("gcc-", "gcc-toolset-", 1)


def env_step(variables: Mapping[str, str]) -> Step:
    return {"env": dict(variables)} if variables else {}


#: The compile cache of a build step (docs/compile-cache.md): the engine from a repository variable, the shared
#: storage from a secret, since its URL may carry a password (``redis://:pw@host``) and a variable's value is printed
#: in the job's log where a secret's is masked. An unset one is empty, and the farm keeps the route's own cache. A
#: workflow another one calls (wheels.yml from release.yml and dispatch.yml) is handed no secret: its builds use no
#: shared storage, so a release never reads objects another build wrote.
COMPILE_CACHE_ENV: Mapping[str, str] = {
    "FARM_COMPILE_CACHE": "${{ vars.FARM_COMPILE_CACHE }}",
    "FARM_CCACHE_REMOTE": "${{ secrets.FARM_CCACHE_REMOTE }}",
}
#: An sccache-dist scheduler (a variable) and its client token (a secret): the scheduler only where the token
#: reached the job (not in a fork's pull request, not in a workflow called without it), so a build never asks a
#: scheduler it cannot authenticate to.
SCHEDULER_ENV: Mapping[str, str] = {
    "FARM_SCCACHE_SCHEDULER": "${{ secrets.FARM_SCCACHE_TOKEN != '' && vars.FARM_SCCACHE_SCHEDULER || '' }}",
    "FARM_SCCACHE_TOKEN": "${{ secrets.FARM_SCCACHE_TOKEN }}",
}

#: sccache's GitHub Actions cache reads the runner's cache service URL and token, which GitHub hands to
#: JavaScript actions only: exported for the job's later steps (the farm's own), and only when the repository
#: chose that backend (a step's ``if`` cannot read a secret, so the script does). The cache service needs no
#: permission of the job's token.
_EXPORT_CACHE_SERVICE = ("if ((process.env.FARM_CCACHE_REMOTE || '').trim().toLowerCase() === 'gha') {\n"
                         "  core.exportVariable('ACTIONS_RESULTS_URL', process.env.ACTIONS_RESULTS_URL || '');\n"
                         "  core.exportVariable('ACTIONS_RUNTIME_TOKEN', process.env.ACTIONS_RUNTIME_TOKEN || '');\n"
                         "}")


def compile_cache_steps() -> list[Step]:
    """What a job does before a build step that carries :data:`COMPILE_CACHE_ENV`."""
    return [{"name": "sccache's GitHub Actions cache service (when the secret FARM_CCACHE_REMOTE is gha)",
             "uses": actions.GITHUB_SCRIPT.uses(),
             "env": {"FARM_CCACHE_REMOTE": COMPILE_CACHE_ENV["FARM_CCACHE_REMOTE"]},
             "with": {"script": _EXPORT_CACHE_SERVICE}}]


def cached_build(step: Step, *, scheduler: bool = False, container: bool = False) -> list[Step]:
    """A build step with the compile cache's settings (``scheduler``: and sccache-dist's, with its secret), after
    the step that serves sccache's GitHub cache to a build on the runner. A ``container`` build gets no such step:
    the runner's cache token stays out of the container, where the project's build runs, and out of the
    environment the container route echoes; with ``gha`` that route says so in one warning and keeps its own
    cache (a server's URL reaches it as on every route)."""
    env = {**step.get("env", {}), **COMPILE_CACHE_ENV, **(SCHEDULER_ENV if scheduler else {})}
    return [*([] if container else compile_cache_steps()), {**step, "env": env}]
