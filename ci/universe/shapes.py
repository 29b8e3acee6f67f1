"""The shapes of the farm's universe: a toolkit, a cell, a torch release (``ci/universe/matrix.py`` holds the values).

Standard library only (``noxfile.py`` imports ``ci/universe/matrix.py`` before any environment exists).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

ToolkitKind = Literal["pypi", "debian", "nvidia-repo"]
WindowsToolkitKind = Literal["pypi", "nvidia-installer"]


@dataclasses.dataclass(frozen=True)
class Toolkit:
    """Where a cell's CUDA toolkit comes from (Linux), with every version pinned."""

    kind: ToolkitKind
    #: Exact requirement strings (``name==version``) for ``kind == "pypi"``;
    #: Debian package specs (``name=version``) for ``kind == "debian"``;
    #: RPM specs of NVIDIA's repository (``name-version-release``, dnf's NEVRA without the
    #: architecture) for ``kind == "nvidia-repo"``.
    packages: tuple[str, ...]
    #: For PyPI toolkits: the folder inside the install that is CUDA_HOME.
    home_subdir: str = ""
    #: Extra pinned wheels with the headers torch's own CUDA headers include
    #: (``ATen/cuda/CUDAContext.h`` -> cuBLAS, cuSPARSE, cuSOLVER): classic
    #: extensions need them, stable-ABI ones do not.
    library_headers: tuple[str, ...] = ()

    @property
    def linkable(self) -> dict[str, str]:
        """The libraries a project may link (``toolkit-libraries``): those pinned here, by name (``cublas``)."""
        return {req.split("==")[0].removeprefix("nvidia-"): req for req in self.library_headers}


@dataclasses.dataclass(frozen=True)
class WindowsFacts:
    """What a cell needs on Windows: the MSVC versions its nvcc accepts and where its toolkit comes from.

    ``msc_ver`` is the half-open ``_MSC_VER`` range of the toolkit's
    ``crt/host_config.h`` (its ``#if _MSC_VER < LOW || _MSC_VER >= HIGH`` line;
    windows/hostconfig.py checks an installed toolkit against it); ``toolset``
    the MSVC toolset the farm prefers (``vcvarsall.bat x64 -vcvars_ver=<toolset>``;
    the STL gate STL1002 of newer toolsets is in windows/msvc.py).
    """

    msc_ver: tuple[int, int]
    toolset: str
    toolkit: WindowsToolkitKind
    #: PyPI pins (pypi; empty: the cell's Linux pins, whose win_amd64 wheels exist) or NVIDIA installer
    #: sub-packages (nvidia-installer).
    packages: tuple[str, ...] = ()
    #: NVIDIA's network installer (nvidia-installer cells).
    installer: str = ""
    #: The installer's checksum as ``<algorithm>:<hex>`` (pip's ``--hash`` form), checked before it runs:
    #: ``sha256:...``, or ``md5:...``, the only checksum NVIDIA publishes for it (``docs/sidebar/md5sum.txt``
    #: of the release); windows/toolkit/installer.py prints the download's SHA-256 so the pin can be strengthened.
    installer_hash: str = ""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One CUDA toolkit configuration of the farm."""

    cuda: str
    toolkit: Toolkit
    #: The torch release stable-ABI projects build against in this cell.
    torch: str
    #: Architectures that get SASS; ``ptx_arch`` additionally gets PTX so newer
    #: GPUs can JIT-compile it.
    sass_archs: tuple[str, ...]
    ptx_arch: str
    #: The Python stable-ABI container builds use with a manylinux base.
    python: str
    base_image: str
    #: Host compiler family and version (``gcc-12``): the container images install it.
    host_compiler: str
    #: Debian suite of the bootstrapped base used where no registry is reachable.
    debian_suite: str = "bookworm"
    release: bool = False
    windows: WindowsFacts | None = None
    #: The release cell (its name) whose local stand-in this cell is: a cell this machine can build (its toolkit's
    #: source is reachable here) of the same CUDA major, used where the release cell's toolkit cannot be had.
    #: Not a release cell itself; the generated workflows build the release cell, never the stand-in.
    stand_in_for: str = ""
    #: linux_aarch64 (sbsa) targets too: the toolkit's runtime, CRT and CCCL wheels exist for aarch64 and torch
    #: ships aarch64 CUDA wheels of this CUDA major (ci/linux/cross.py builds them on x86_64).
    aarch64: bool = False

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])

    @property
    def name(self) -> str:
        return f"cu{self.cuda.replace('.', '')}"

    @property
    def torch_requirement(self) -> str:
        return torch_requirement(self.torch)

    @property
    def arch_list(self) -> str:
        """The value for ``TORCH_CUDA_ARCH_LIST`` (``ptx_arch`` empty: no PTX, SASS only)."""
        parts = [a + ("+PTX" if a == self.ptx_arch else "") for a in self.sass_archs]
        if self.ptx_arch and self.ptx_arch not in self.sass_archs:
            parts.append(self.ptx_arch + "+PTX")
        return ";".join(parts)

    def as_dict(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data.update(name=self.name, arch_list=self.arch_list, torch_requirement=self.torch_requirement)
        return data


@dataclasses.dataclass(frozen=True)
class TorchRelease:
    """A torch release on PyPI: the version builds pin, its CUDA, the CPythons it has wheels for."""

    version: str
    cuda: str
    #: CPython versions with manylinux x86_64 and win_amd64 wheels (GIL builds).
    pythons: tuple[str, ...]
    #: PyPI has CUDA builds of it for manylinux_2_28_aarch64 (2.11 onwards; older aarch64 wheels are CPU builds).
    aarch64: bool = False
    #: The architectures torch's own CUDA build carries SASS for (``torch.cuda.get_arch_list()`` of that
    #: wheel, read once per release by ``nox -s torch-archs``): x86_64 (and win_amd64, built by PyTorch with the
    #: same list), and linux_aarch64.
    sass: tuple[str, ...] = ()
    sass_aarch64: tuple[str, ...] = ()
    #: The C++ standard its headers are written for (17 or 20): the ``-std=c++NN`` torch's own
    #: ``torch/utils/cpp_extension.py`` passes the compiler, read from the wheel by ``cuda-ext-farm adopt-torch``
    #: (C++20 from 2.12 on). A project that pins an older standard is refused before its compile
    #: (``ci/builds/standard.py``).
    cxx: int = 17
    #: The CPythons (``3.13``) whose free-threaded build (``cp313t``, PEP 703) it has manylinux x86_64 and win_amd64
    #: wheels for, as ``pythons`` for the GIL builds; :attr:`labels` spells them ``3.13t``.
    free_threaded: tuple[str, ...] = ()

    @property
    def labels(self) -> tuple[str, ...]:
        """Every CPython it has wheels for as a project's ``python`` list spells them, in version order, each
        free-threaded build after its GIL build: ``3.12``, ``3.13``, ``3.13t``, ``3.14``, ``3.14t``."""
        return tuple(sorted((*self.pythons, *(f"{p}t" for p in self.free_threaded)), key=python_order))

    def archs_for(self, arch: str) -> tuple[str, ...]:
        """Torch's SASS list for a wheel's CPU architecture (``x86_64``, ``amd64``, ``aarch64``)."""
        return self.sass_aarch64 if arch == "aarch64" else self.sass

    @property
    def minor(self) -> str:
        return minor_of(self.version)

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])


def torch_requirement(version: str) -> str:
    """The pip requirement that gets the CUDA build of ``torch``.

    The local CPU wheel ``torch==X+cpu`` also satisfies ``torch==X``; it is
    excluded explicitly so a CUDA build can never use it.
    """
    return f"torch=={version},!={version}+cpu"


def minor_of(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def version_key(version: str) -> tuple[int, ...]:
    """``2.11.0+cu130`` -> (2, 11, 0); a free-threaded CPython's ``3.13t`` -> (3, 13), as its GIL build."""
    return tuple(int(p) for p in version.split("+")[0].removesuffix("t").split(".") if p.isdigit())


def is_free_threaded(python: str) -> bool:
    """Whether a CPython label names a free-threaded build: ``3.13t`` (PEP 703's ``t`` ABI flag), not ``3.13``."""
    return python.endswith("t")


def python_minor(python: str) -> str:
    """The ``X.Y`` of a CPython label: ``3.13t`` -> ``3.13``."""
    return python.removesuffix("t")


def python_order(python: str) -> tuple[tuple[int, ...], bool]:
    """The sort key of CPython labels: by version, a free-threaded build after the GIL build of its version."""
    return version_key(python), is_free_threaded(python)
