"""What a CUDA toolkit folder holds for torch's builds on Windows, as data (:class:`Layout`, not ``os.name``
checks), and the environment it gives a build."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path, PurePath

from ci.universe import shapes


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a CUDA_HOME keeps what torch's builds use, as data rather than ``os.name`` checks."""

    exe_suffix: str = ".exe"
    #: Import libraries: nvcc.profile's ``/LIBPATH:$(TOP)/lib/$(_WIN_PLATFORM_)``, torch's ``lib/x64``.
    lib_dir: str = "lib/x64"
    runtime_library: str = "cudart.lib"
    #: DLL folders for PATH: the installer's ``bin``; the wheels' ``bin/x86_64`` (nvvm64_40_0.dll, which
    #: cicc.exe loads, is only there).
    dll_dirs: tuple[str, ...] = ("bin", "bin/x86_64")

    def exe(self, name: str) -> str:
        return name + self.exe_suffix

    def core_files(self) -> tuple[str, ...]:
        """Files every toolkit must have for torch's builds (relative to CUDA_HOME)."""
        return (f"bin/{self.exe('nvcc')}", f"nvvm/bin/{self.exe('cicc')}", f"{self.lib_dir}/{self.runtime_library}",
                "include/cuda_runtime.h", "include/crt/host_config.h")


WINDOWS = Layout()
#: What ATen/cuda/CUDAContext.h pulls in (classic extensions).
LIBRARY_HEADER_FILES = ("include/cublas_v2.h", "include/cusparse.h", "include/cusolverDn.h")


@dataclasses.dataclass(frozen=True)
class FoundToolkit:
    """The parts of a toolkit folder the build uses, each checked to exist."""

    cuda_home: Path
    nvcc: Path
    include: Path
    lib_dir: Path
    cudart: Path
    dll_dirs: tuple[Path, ...]


@dataclasses.dataclass(frozen=True)
class WindowsToolkit:
    cuda_home: PurePath
    nvcc_version: str
    source: str

    def env(self) -> dict[str, str]:
        return toolkit_env(self.cuda_home)


def toolkit_env(cuda_home: PurePath) -> dict[str, str]:
    """CUDA_HOME for torch.utils.cpp_extension, CUDA_PATH for nvcc's own lookups (PATH is composed by the caller)."""
    return {"CUDA_HOME": str(cuda_home), "CUDA_PATH": str(cuda_home)}


def path_entries(cuda_home: PurePath, layout: Layout = WINDOWS) -> list[str]:
    """Folders the build needs on PATH: nvcc and its tools, and ``bin\\x86_64`` where CUDA 13's wheels keep
    their DLLs (nvvm64_40_0.dll); Python itself never looks for an extension's DLLs on PATH."""
    return [str(cuda_home.joinpath(*d.split("/"))) for d in layout.dll_dirs]


def required_files(cell: shapes.Cell, layout: Layout = WINDOWS) -> tuple[str, ...]:
    headers = cell.toolkit.library_headers or (cell.windows is not None and any(
        p.startswith("cublas_dev") for p in cell.windows.packages))
    return layout.core_files() + (LIBRARY_HEADER_FILES if headers else ())


def missing_files(cuda_home: PurePath, cell: shapes.Cell, exists: Callable[[str], bool],
                  layout: Layout = WINDOWS) -> list[str]:
    return [f for f in required_files(cell, layout) if not exists(str(cuda_home / f))]
