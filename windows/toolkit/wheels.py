"""CUDA 13's toolkit from its pinned ``win_amd64`` wheels: the cell's Linux pins (one lock holds both platforms'
hashes), installed once with ``pip install --target`` into ``<cache>/tools/<install_name(cell)>``, and the folder a
Windows job caches."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PureWindowsPath

from ci.errors import MissingRequirement, UsageError
from ci.toolchain import toolkit as linux_toolkit
from ci.universe import pins as ci_pins
from ci.universe import shapes
from windows.toolkit.found import Probe, find_toolkit, matching, nvcc_version
from windows.toolkit.installer import installer_dir
from windows.toolkit.layout import WINDOWS, FoundToolkit, Layout, WindowsToolkit


def requirements(cell: shapes.Cell) -> tuple[str, ...]:
    """The pinned wheels of a PyPI cell: its Linux pins, whose lock holds the win_amd64 wheels' hashes too."""
    facts = cell.windows
    if facts is None or facts.toolkit != "pypi":
        raise UsageError(f"cell {cell.name} does not take its Windows toolkit from PyPI", cell.cuda,
                         "use its installer (windows/README.md)")
    pins = facts.packages or cell.toolkit.packages
    loose = [p for p in pins if "==" not in p]
    if loose:
        raise UsageError("toolkit package must be pinned with ==", loose[0], "pin it in ci/universe/matrix.py")
    # What is installed is the lock of the Linux pins: Windows pins that differ would be silently ignored.
    if facts.packages and sorted(facts.packages) != sorted(cell.toolkit.packages):
        raise UsageError(f"the Windows pins of cell {cell.name} differ from its Linux pins", ", ".join(facts.packages),
                         "drop WindowsFacts.packages of a PyPI cell (one lock holds both platforms' wheels)")
    return pins


def wheel_home(root: Path, cell: shapes.Cell) -> Path:
    """CUDA_HOME inside a ``pip install --target`` folder of the cell's wheels (``nvidia/cu13``)."""
    if not cell.toolkit.home_subdir:
        raise UsageError(f"cell {cell.name} names no folder of its toolkit wheels", cell.cuda,
                         "set Toolkit.home_subdir in ci/universe/matrix.py")
    return root.joinpath(*cell.toolkit.home_subdir.split("/"))


def wheel_version(root: Path, distribution: str) -> str | None:
    """The version of ``distribution`` installed into ``root`` (its ``.dist-info`` folder's name), or None."""
    prefix = re.sub(r"[-_.]+", "_", distribution).lower() + "-"
    versions = sorted(p.name[len(prefix):-len(".dist-info")] for p in root.glob("*.dist-info")
                      if p.name.lower().startswith(prefix))
    return versions[-1] if len(versions) == 1 else None


def install_name(cell: shapes.Cell) -> str:
    """The cell's toolkit folder under ``<cache>/tools`` (keyed by its locks: a workflow can name what it caches)."""
    headers = (ci_pins.headers_lock(cell),) if cell.toolkit.library_headers else ()
    return linux_toolkit.install_folder_name(f"cuda-win-{cell.cuda}", ci_pins.toolkit_lock(cell), headers)


def cached_folder(cell: shapes.Cell, farm_cache_dir: str) -> PureWindowsPath:
    """The one folder a Windows job restores and saves so that ``python -m ci toolkit`` and ``build-win`` find the
    cell's toolkit without installing it: the wheels' install folder under ``FARM_CACHE_DIR`` (the job sets it to
    ``farm_cache_dir``), or the folder NVIDIA's installer fills (CUDA 12; the toolkit step finds nvcc.exe there
    and runs no installer)."""
    facts = cell.windows
    if facts is not None and facts.toolkit == "nvidia-installer":
        return installer_dir(cell, {})
    return PureWindowsPath(farm_cache_dir, "tools", install_name(cell))


def ensure_pypi(cell: shapes.Cell, *, probe: Probe | None = nvcc_version, layout: Layout = WINDOWS,
                pip_platform: Sequence[str] = ()) -> WindowsToolkit:
    """Install (once, into ``<cache>/tools/<install_name(cell)>``) or reuse the cell's pinned toolkit wheels.

    ``probe``: how to read nvcc's version; None where nvcc.exe cannot run (another host): the nvcc wheel's
    version stands in. ``pip_platform``: pip options picking the wheels of another platform
    (``--platform win_amd64 --python-version 3.12``); empty on Windows itself."""
    requirements(cell)  # a PyPI cell, pinned

    def version_of(root: Path, found: FoundToolkit) -> str | None:
        return probe(found.cuda_home) if probe is not None else wheel_version(root, "nvidia-cuda-nvcc")

    def finish(root: Path) -> None:
        linux_toolkit._add_library_headers(cell, wheel_home(root, cell), pip_platform)

    def verify(root: Path) -> bool:
        try:
            found = find_toolkit(wheel_home(root, cell), cell, source="pypi", layout=layout, remove=root)
        except MissingRequirement:
            return False
        return version_of(root, found) is not None

    headers = (ci_pins.headers_lock(cell),) if cell.toolkit.library_headers else ()
    name = f"cuda-win-{cell.cuda}"
    root = linux_toolkit.install_once(name, ci_pins.toolkit_lock(cell), finish, verify, also_keyed_by=headers,
                                       pip_extra=pip_platform)
    found = find_toolkit(wheel_home(root, cell), cell, source="pypi", layout=layout, remove=root)
    return matching(cell, found, version_of(root, found), "pypi")
