"""The CUDA toolkit of a cell on Windows: pinned PyPI wheels (CUDA 13) or NVIDIA's installer (CUDA 12).

CUDA 13's ``win_amd64`` wheels (``tests/fixtures/windows_toolkit/`` records
their files) hold a complete toolkit under ``nvidia\\cu13``, laid out like
NVIDIA's installer except for the DLLs: ``bin\\nvcc.exe`` (with
``nvcc.profile``), ``nvvm\\bin\\cicc.exe`` (nvidia-nvvm),
``include\\crt\\host_config.h`` (nvidia-cuda-crt), ``include\\cccl``,
``lib\\x64\\cudart.lib`` (what torch links on Windows) and
``bin\\x86_64\\cudart64_13.dll`` / ``nvvm64_40_0.dll``. They are the cell's
Linux pins (one universal lock, ``ci/requirements/toolkit-<cell>.txt``, holds
the hashes of both platforms' wheels), installed with ``pip install --target``
into ``<cache>\\tools\\<install_name(cell)>`` (the lock / temporary folder /
verify / rename pattern of ``ci/toolchain/toolkit.py``), never a virtual environment.
The cuBLAS/cuSPARSE/cuSOLVER headers that ``ATen/cuda/CUDAContext.h``
includes come from the cell's ``library_headers`` pins, whose Windows wheels
exist too (DLLs and headers, no import libraries); only their ``include``
folders are kept.

CUDA 12.x has no nvcc in its Windows wheels (``nvidia-cuda-nvcc-cu12`` holds
ptxas and headers only), so its cells take NVIDIA's network installer with the
sub-packages listed in the cell (``-s nvcc_12.4 cudart_12.4 ... -n``):
``python -m ci toolkit --cuda 12.4`` downloads it into ``<cache>\\tools\\installers``,
checks the checksum the matrix pins and runs it; a build only looks for it
(``CUDA_PATH_V12_4``, which the installer sets, or its default folder) and
never changes the machine.

The code that finds and checks a toolkit takes the folder and a :class:`~windows.toolkit.layout.Layout`
(the platform's decisions: ``.exe``, ``lib\\x64``, ``cudart.lib``) instead of
asking the host, so it runs on Linux over a recorded layout; only running
``nvcc.exe`` (the ``probe``) and NVIDIA's installer need Windows.

The package: the entry points (:func:`ensure`, :func:`ensure_installer`, :func:`ensure_cuobjdump`) here;
``layout`` what a toolkit folder holds; ``found`` a folder checked to be the cell's toolkit; ``wheels`` CUDA 13's
pinned wheels; ``installer`` NVIDIA's installer (its folder, command and checksum, the download).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ci import proc, settings, toolenv
from ci.errors import CommandFailed, MissingRequirement, UsageError, env_path
from ci.toolchain import toolkit as linux_toolkit
from ci.universe import shapes
from windows.toolkit.found import Probe, checked, nvcc_version
from windows.toolkit.installer import (
    download,
    fetch_installer,
    installer_command,
    installer_dir,
    installer_hint,
    installer_variable,
)
from windows.toolkit.layout import WINDOWS, Layout, WindowsToolkit
from windows.toolkit.wheels import ensure_pypi


def _run_installer(cmd: list[str]) -> int:  # pragma: no cover - runs NVIDIA's installer
    return proc.run(cmd, check=False).returncode


def ensure_installer(cell: shapes.Cell, *, env: Mapping[str, str], tools: Path, install: bool,
                     probe: Probe = nvcc_version, layout: Layout = WINDOWS,
                     fetch: Callable[[str, Path], None] = download,
                     run_installer: Callable[[list[str]], int] = _run_installer) -> WindowsToolkit:
    """The cell's CUDA from NVIDIA's installer: found in its folder, else (``install``) downloaded into
    ``tools/installers``, checked and run silently with the cell's sub-packages only."""
    # The variable's value as this host spells paths (a test's folder on Linux), else the default folder.
    value = env.get(installer_variable(cell), "").strip()
    folder = Path(value) if value else Path(str(installer_dir(cell, {})))
    if not (folder / "bin" / layout.exe("nvcc")).is_file():
        if not install:
            raise MissingRequirement(f"CUDA {cell.cuda} is not installed", folder, installer_hint(cell))
        installer = fetch_installer(cell, tools / "installers", fetch)
        code = run_installer(installer_command(cell, str(installer)))
        if code != 0:
            raise CommandFailed(f"NVIDIA's CUDA {cell.cuda} installer failed", f"exit status {code}",
                                "it downloads its sub-packages from developer.download.nvidia.com and needs "
                                "administrator rights; run it again, or install by hand: " + installer_hint(cell))
    return checked(cell, folder, "nvidia-installer", probe, layout)


def ensure(cell: shapes.Cell, *, install: bool = False) -> WindowsToolkit:  # pragma: no cover - Windows host
    """The cell's toolkit on this Windows host: FARM_CUDA_HOME, the pinned wheels (installed on first use), or
    NVIDIA's installer's CUDA 12 (installed only when ``install``: ``python -m ci toolkit``; a build never changes
    the machine)."""
    home = env_path("FARM_CUDA_HOME", settings.current().environ, kind="folder")
    if home is not None:
        return checked(cell, Path(home), "FARM_CUDA_HOME", nvcc_version)
    facts = cell.windows
    if facts is None:
        raise UsageError(f"cell {cell.name} has no Windows facts", cell.cuda, "add them in ci/universe/matrix.py")
    if facts.toolkit == "nvidia-installer":
        return ensure_installer(cell, env=settings.current().environ, tools=toolenv.cache_root() / "tools",
                                install=install)
    return ensure_pypi(cell)


def ensure_cuobjdump() -> Path | None:  # pragma: no cover - Windows host
    """cuobjdump.exe for the audit's architecture check (None when it cannot be installed)."""
    def verify(root: Path) -> bool:
        return any(p.is_file() for p in root.glob("nvidia/cu*/bin/cuobjdump.exe"))

    root = linux_toolkit.install_once("cuobjdump-win", "cuobjdump", verify=verify)
    found = sorted(root.glob("nvidia/cu*/bin/cuobjdump.exe"))
    return found[0] if found else None
