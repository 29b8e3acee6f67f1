"""A folder checked to be the cell's CUDA toolkit (any host): the files torch's builds need, then the version of
its nvcc; a failure is one line naming what is missing and how to get it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ci.errors import MissingRequirement, UsageError
from ci.toolchain import toolkit as linux_toolkit
from ci.universe import shapes
from windows.toolkit.installer import installer_hint
from windows.toolkit.layout import WINDOWS, FoundToolkit, Layout, WindowsToolkit, missing_files, path_entries


def _fix(cell: shapes.Cell, source: str, where: Path) -> str:
    if source == "nvidia-installer":
        return installer_hint(cell)
    if source == "FARM_CUDA_HOME":
        return f"point FARM_CUDA_HOME at a CUDA {cell.cuda} toolkit (the folder with bin\\nvcc.exe) or unset it"
    return f"remove {where} and run `python -m ci toolkit --cuda {cell.cuda}` again; check the cell's pins"


def find_toolkit(cuda_home: Path, cell: shapes.Cell, *, source: str, layout: Layout = WINDOWS,
                 remove: Path | None = None) -> FoundToolkit:
    """Check that ``cuda_home`` holds what torch's builds need (``layout``'s files; the library headers of a
    classic cell) and return where each part is; the failure is one line naming what is missing.

    ``remove``: the folder to delete for a fresh install, named in the failure (the cache folder, for wheels)."""
    nvcc = cuda_home / "bin" / layout.exe("nvcc")
    if not nvcc.is_file():
        raise MissingRequirement(f"the CUDA {cell.cuda} toolkit ({source}) has no {layout.exe('nvcc')}", nvcc,
                                 _fix(cell, source, remove or cuda_home))
    missing = missing_files(cuda_home, cell, os.path.isfile, layout)
    if missing:
        raise MissingRequirement(f"the CUDA {cell.cuda} toolkit ({source}) lacks files torch's builds need",
                                 f"{cuda_home}: {', '.join(missing)}", _fix(cell, source, remove or cuda_home))
    lib_dir = cuda_home.joinpath(*layout.lib_dir.split("/"))
    return FoundToolkit(cuda_home=cuda_home, nvcc=nvcc, include=cuda_home / "include", lib_dir=lib_dir,
                        cudart=lib_dir / layout.runtime_library,
                        dll_dirs=tuple(p for p in (Path(e) for e in path_entries(cuda_home, layout)) if p.is_dir()))


def nvcc_version(cuda_home: Path) -> str | None:  # pragma: no cover - runs nvcc.exe
    return linux_toolkit.nvcc_version(cuda_home, WINDOWS.exe("nvcc"))


#: Reads the version of a toolkit's nvcc (``nvcc.exe --version`` on Windows); None: it does not run.
Probe = Callable[[Path], str | None]


def matching(cell: shapes.Cell, found: FoundToolkit, version: str | None, source: str) -> WindowsToolkit:
    if version is None or not version.startswith(cell.cuda + "."):
        raise UsageError(f"the toolkit ({source}) is not CUDA {cell.cuda}", f"{found.cuda_home}: nvcc {version}",
                         installer_hint(cell) if source == "nvidia-installer" else "check the cell's pins")
    return WindowsToolkit(found.cuda_home, version, source)


def checked(cell: shapes.Cell, cuda_home: Path, source: str, probe: Probe, layout: Layout = WINDOWS) -> WindowsToolkit:
    """A toolkit somebody else installed (FARM_CUDA_HOME, NVIDIA's installer): its files, then its nvcc's version."""
    found = find_toolkit(cuda_home, cell, source=source, layout=layout)
    return matching(cell, found, probe(found.cuda_home), source)
