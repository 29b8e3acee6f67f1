"""The build matrix: the one source of truth for every build cell.

A *cell* is one CUDA toolkit (version and where it comes from), the torch
release it is built against, the CUDA architectures it targets, the Python used
to drive the build, the host compiler and the base image for container builds.
Sessions, images, workflows and documentation tables are all derived from
``CELLS``; adding a cell is one entry in that tuple.

This module only uses the standard library so ``noxfile.py`` can import it
before any virtual environment exists.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

ToolkitKind = Literal["pypi", "debian", "nvidia-repo"]


class MatrixError(ValueError):
    """A request that the matrix cannot satisfy; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Toolkit:
    """Where a cell's CUDA toolkit comes from, with every version pinned."""

    kind: ToolkitKind
    #: Exact requirement strings (``name==version``) for ``kind == "pypi"``;
    #: Debian package specs (``name=version``) for ``kind == "debian"``.
    packages: tuple[str, ...]
    #: For PyPI toolkits: the folder inside the install that is CUDA_HOME.
    home_subdir: str = ""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One reproducible build configuration."""

    cuda: str
    toolkit: Toolkit
    torch: str
    #: Architectures that get SASS; ``ptx_arch`` additionally gets PTX so newer
    #: GPUs can JIT-compile it.
    sass_archs: tuple[str, ...]
    ptx_arch: str
    python: str
    base_image: str
    #: Host compiler family and version (``gcc-12``): the container images install it.
    host_compiler: str
    #: Debian suite of the bootstrapped base used where no registry is reachable.
    debian_suite: str = "bookworm"
    release: bool = False

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])

    @property
    def name(self) -> str:
        return f"cu{self.cuda.replace('.', '')}"

    @property
    def torch_requirement(self) -> str:
        """The pip requirement that gets the CUDA build of ``torch``.

        The local CPU wheel ``torch==X+cpu`` also satisfies ``torch==X``; it is
        excluded explicitly so a CUDA cell can never be built against it.
        """
        return f"torch=={self.torch},!={self.torch}+cpu"

    @property
    def arch_list(self) -> str:
        """The value for ``TORCH_CUDA_ARCH_LIST``."""
        parts = [a + ("+PTX" if a == self.ptx_arch else "") for a in self.sass_archs]
        if self.ptx_arch not in self.sass_archs:
            parts.append(self.ptx_arch + "+PTX")
        return ";".join(parts)

    def as_dict(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data.update(name=self.name, arch_list=self.arch_list, torch_requirement=self.torch_requirement)
        return data


#: The CUDA version each torch release on PyPI is built with. Used to refuse a
#: cell whose toolkit major differs from torch's (the extension would link a
#: ``libcudart`` that the user's torch does not ship).
TORCH_CUDA: Mapping[str, str] = {
    "2.8": "12.8",
    "2.9": "12.8",
    "2.10": "12.8",
    "2.11": "13.0",
    "2.12": "13.0",
    "2.13": "13.0",
    "2.14": "13.0",
    "2.15": "13.0",
}

#: The oldest torch whose LibTorch stable ABI the extension targets
#: (``TORCH_TARGET_VERSION``): wheels load in this release and every later one.
TORCH_TARGET = "2.10"

#: The oldest CPython the abi3 wheels support (``Py_LIMITED_API``).
PYTHON_LIMITED_API = "3.10"

CUDA13_SASS = ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")


def _pypi_cuda13(nvcc: str, runtime: str, cccl: str) -> Toolkit:
    return Toolkit(
        kind="pypi",
        packages=(
            f"nvidia-cuda-nvcc=={nvcc}",
            f"nvidia-nvvm=={nvcc}",
            f"nvidia-cuda-crt=={nvcc}",
            f"nvidia-cuda-runtime=={runtime}",
            f"nvidia-cuda-cccl=={cccl}",
        ),
        home_subdir="nvidia/cu13",
    )


MANYLINUX_2_28 = "quay.io/pypa/manylinux_2_28_x86_64"

CELLS: tuple[Cell, ...] = (
    Cell(
        cuda="13.0",
        toolkit=_pypi_cuda13(nvcc="13.0.88", runtime="13.0.96", cccl="13.0.85"),
        torch="2.11.0",
        sass_archs=CUDA13_SASS,
        ptx_arch="12.0",
        python="3.12",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-12",
        release=True,
    ),
    Cell(
        cuda="13.2",
        toolkit=_pypi_cuda13(nvcc="13.2.86", runtime="13.2.86", cccl="13.2.86"),
        torch="2.11.0",
        sass_archs=CUDA13_SASS,
        ptx_arch="12.0",
        python="3.12",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-12",
    ),
    Cell(
        cuda="13.5",
        toolkit=_pypi_cuda13(nvcc="13.5.37", runtime="13.5.37", cccl="13.3.5.0.6"),
        torch="2.11.0",
        sass_archs=CUDA13_SASS,
        ptx_arch="12.0",
        python="3.12",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-12",
    ),
    # CUDA 12: Debian's toolkit in the tested path (no NVIDIA download site is
    # reachable here); docker/README.md describes the production path on a
    # manylinux base with NVIDIA's repository. CUDA 12.4 has no SASS for
    # Blackwell: those GPUs JIT the sm_90 PTX.
    Cell(
        cuda="12.4",
        toolkit=Toolkit(kind="debian", packages=("nvidia-cuda-toolkit=12.4.131~12.4.1-2",)),
        torch="2.10.0",
        sass_archs=("7.5", "8.0", "8.6", "8.9", "9.0"),
        ptx_arch="9.0",
        python="3.13",
        base_image=MANYLINUX_2_28,
        host_compiler="gcc-13",
        debian_suite="trixie",
        release=True,
    ),
)

#: Newest GCC major each CUDA release accepts as host compiler (NVIDIA's
#: installation guide; nvcc refuses newer ones).
MAX_GCC: Mapping[str, int] = {"12.4": 13, "12.8": 14, "13.0": 15, "13.2": 15, "13.5": 15}
MIN_GCC = 6

#: cuobjdump reads the fatbinaries of every 13.x toolkit; PyPI has it from 13.2.
CUOBJDUMP_REQUIREMENT = "nvidia-cuda-cuobjdump==13.2.78"

#: Libraries that come from the user's torch install and must never be bundled.
TORCH_LIBRARIES = (
    "libc10.so",
    "libc10_cuda.so",
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch_python.so",
)


def cuda_libraries(cuda_major: int) -> tuple[str, ...]:
    """CUDA runtime sonames provided by torch's CUDA wheels."""
    return (f"libcudart.so.{cuda_major}",)


def cells(names: Iterable[str] | None = None) -> tuple[Cell, ...]:
    """Return all cells or those named (by CUDA version ``13.0`` or name ``cu130``)."""
    if names is None:
        return CELLS
    return tuple(get_cell(n) for n in names)


def get_cell(key: str) -> Cell:
    """Find a cell by CUDA version (``13.0``), name (``cu130``) or major (``13`` = release cell)."""
    key = key.strip()
    for cell in CELLS:
        if key in (cell.cuda, cell.name):
            return cell
    if key.isdigit():
        majors = [c for c in CELLS if c.cuda_major == int(key)]
        release = [c for c in majors if c.release] or majors
        if release:
            return release[0]
    known = ", ".join(c.cuda for c in CELLS)
    raise MatrixError(
        f"unknown CUDA version {key!r}: the matrix has {known}. "
        "Pick one of those, or add a cell to CELLS in ci/matrix.py."
    )


def torch_cuda_version(torch_version: str) -> str:
    """The CUDA version a torch release on PyPI is built with."""
    parts = torch_version.split("+")[0].split(".")
    minor = ".".join(parts[:2])
    try:
        return TORCH_CUDA[minor]
    except KeyError:
        raise MatrixError(
            f"torch {torch_version} is not in TORCH_CUDA (ci/matrix.py); "
            "add the CUDA version its PyPI wheels are built with."
        ) from None


def validate(cell: Cell) -> Cell:
    """Refuse cells that cannot produce a working wheel."""
    torch_cuda = torch_cuda_version(cell.torch)
    if int(torch_cuda.split(".")[0]) != cell.cuda_major:
        raise MatrixError(
            f"cell {cell.name}: CUDA {cell.cuda} cannot be paired with torch {cell.torch}, "
            f"which is built with CUDA {torch_cuda}. An extension must use the same CUDA major "
            f"as torch; pair CUDA {cell.cuda_major}.x with a torch built for CUDA {cell.cuda_major} "
            f"({', '.join(t for t, c in TORCH_CUDA.items() if c.startswith(f'{cell.cuda_major}.')) or 'none known'})."
        )
    family, _, version = cell.host_compiler.partition("-")
    if family != "gcc" or not version.isdigit():
        raise MatrixError(f"cell {cell.name}: host compiler {cell.host_compiler!r} must be written gcc-<major>")
    newest = MAX_GCC.get(cell.cuda)
    if newest is None:
        raise MatrixError(f"cell {cell.name}: no supported host-compiler range known for CUDA {cell.cuda} (MAX_GCC)")
    if not MIN_GCC <= int(version) <= newest:
        raise MatrixError(
            f"cell {cell.name}: host compiler {cell.host_compiler} is outside CUDA {cell.cuda}'s supported range "
            f"(gcc-{MIN_GCC} to gcc-{newest}); nvcc would refuse it. Pick a gcc in that range."
        )
    if cell.ptx_arch not in cell.sass_archs:
        raise MatrixError(f"cell {cell.name}: ptx_arch {cell.ptx_arch} must also be in sass_archs")
    for req in cell.toolkit.packages:
        if cell.toolkit.kind == "pypi" and "==" not in req:
            raise MatrixError(f"cell {cell.name}: toolkit package {req!r} must be pinned with ==")
    return cell


def parse_arch_list(value: str) -> tuple[tuple[str, ...], str | None]:
    """Parse a ``TORCH_CUDA_ARCH_LIST`` value into (SASS archs, PTX arch).

    Accepts ``;``, ``,`` or spaces as separators, like torch does.
    """
    archs: list[str] = []
    ptx: str | None = None
    for raw in value.replace(",", ";").replace(" ", ";").split(";"):
        item = raw.strip()
        if not item:
            continue
        base = item.removesuffix("+PTX")
        try:
            major, minor = base.split(".")
            int(major)
            int(minor.rstrip("af"))
        except ValueError:
            raise MatrixError(
                f"bad architecture {item!r} in arch list {value!r}: use forms like '8.0' or '12.0+PTX'"
            ) from None
        archs.append(base)
        if item.endswith("+PTX"):
            ptx = base
    if not archs:
        raise MatrixError(f"empty architecture list {value!r}")
    return tuple(archs), ptx


def with_arch_list(cell: Cell, value: str | None) -> Cell:
    """Return ``cell`` with its architectures overridden by ``value`` (if given)."""
    if not value:
        return cell
    archs, ptx = parse_arch_list(value)
    return dataclasses.replace(cell, sass_archs=archs, ptx_arch=ptx or archs[-1])


def resolve(
    key: str,
    arch_list: str | None = None,
    env: Mapping[str, str] | None = None,
    torch: str | None = None,
) -> Cell:
    """The one place a build resolves its cell: lookup, overrides, validation."""
    env = os.environ if env is None else env
    cell = get_cell(key)
    cell = with_arch_list(cell, arch_list or env.get("TORCH_CUDA_ARCH_LIST"))
    if torch:
        cell = dataclasses.replace(cell, torch=torch)
    return validate(cell)


def to_json(selected: Sequence[Cell]) -> str:
    return json.dumps([c.as_dict() for c in selected], indent=2)
