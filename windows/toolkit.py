"""The CUDA toolkit of a cell on Windows: pinned PyPI wheels (CUDA 13) or NVIDIA's installer (CUDA 12).

CUDA 13's ``win_amd64`` wheels hold a complete toolkit under ``nvidia\\cu13``:
``bin\\nvcc.exe`` (with ``nvcc.profile``), ``nvvm\\bin\\cicc.exe`` (nvidia-nvvm),
``include\\crt\\host_config.h`` (nvidia-cuda-crt), ``lib\\x64\\cudart.lib`` (what
torch links on Windows) and the CCCL headers. They are the cell's Linux pins
(``ci/matrix.py``; nvcc, nvvm and crt of one version), installed with
``pip install --target`` into a folder of the farm's cache keyed by the pins
(the lock / temporary folder / verify / rename pattern of ``ci/toolkit.py``),
never a virtual environment. The cuBLAS/cuSPARSE/cuSOLVER headers that
``ATen/cuda/CUDAContext.h`` includes come from the cell's ``library_headers``
pins, whose Windows wheels exist too; only their ``include`` folders are kept.

CUDA 12.x has no nvcc in its Windows wheels (``nvidia-cuda-nvcc-cu12`` holds
ptxas and headers only), so its cells take NVIDIA's network installer with the
sub-packages listed in the cell (``-s nvcc_12.4 cudart_12.4 ...``): in CI only,
see windows/README.md. The farm finds it through ``CUDA_PATH_V12_4`` (which the
installer sets) or its default folder, and checks it like a wheel install.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath, PureWindowsPath

from ci import matrix
from ci import pins as ci_pins
from ci import toolkit as linux_toolkit
from ci.errors import MissingRequirement, UsageError, env_path

DEFAULT_INSTALL_ROOT = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA"
#: Files a toolkit must have for torch's builds (relative to CUDA_HOME).
CORE_FILES = ("bin/nvcc.exe", "nvvm/bin/cicc.exe", "lib/x64/cudart.lib", "include/cuda_runtime.h",
              "include/crt/host_config.h")
#: What ATen/cuda/CUDAContext.h pulls in (classic extensions).
LIBRARY_HEADER_FILES = ("include/cublas_v2.h", "include/cusparse.h", "include/cusolverDn.h")


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


def path_entries(cuda_home: PurePath) -> list[str]:
    """Folders the build needs on PATH: nvcc and its tools, and ``bin\\x86_64`` where CUDA 13's wheels keep
    their DLLs (nvvm64_40_0.dll); Python itself never looks for an extension's DLLs on PATH."""
    return [str(cuda_home / "bin"), str(cuda_home / "bin" / "x86_64")]


def requirements(cell: matrix.Cell) -> tuple[str, ...]:
    """The pinned wheels of a PyPI cell (the cell's Windows pins, else its Linux pins: same versions)."""
    facts = cell.windows
    if facts is None or facts.toolkit != "pypi":
        raise UsageError(f"cell {cell.name} does not take its Windows toolkit from PyPI", cell.cuda,
                         "use its installer (windows/README.md)")
    pins = facts.packages or cell.toolkit.packages
    loose = [p for p in pins if "==" not in p]
    if loose:
        raise UsageError("toolkit package must be pinned with ==", loose[0], "pin it in ci/matrix.py")
    return pins


def required_files(cell: matrix.Cell) -> tuple[str, ...]:
    headers = cell.toolkit.library_headers or (cell.windows is not None and any(
        p.startswith("cublas_dev") for p in cell.windows.packages))
    return CORE_FILES + (LIBRARY_HEADER_FILES if headers else ())


def missing_files(cuda_home: PurePath, cell: matrix.Cell, exists: Callable[[str], bool]) -> list[str]:
    return [f for f in required_files(cell) if not exists(str(cuda_home / f))]


def installer_dir(cell: matrix.Cell, env: Mapping[str, str]) -> PureWindowsPath:
    """Where NVIDIA's installer put the cell's CUDA: ``CUDA_PATH_V12_4``, else its default folder."""
    major, minor = cell.cuda.split(".")[:2]
    value = env.get(f"CUDA_PATH_V{major}_{minor}", "").strip()
    return PureWindowsPath(value) if value else PureWindowsPath(DEFAULT_INSTALL_ROOT, f"v{major}.{minor}")


def installer_command(cell: matrix.Cell, installer: str = "cuda_installer.exe") -> list[str]:
    """NVIDIA's installer, silent (``-s``), only the cell's sub-packages, no reboot (``-n``)."""
    facts = cell.windows
    if facts is None or facts.toolkit != "nvidia-installer" or not facts.packages:
        raise UsageError(f"cell {cell.name} lists no NVIDIA installer sub-packages", cell.cuda,
                         "add them to its WindowsFacts.packages in ci/matrix.py")
    return [installer, "-s", *facts.packages, "-n"]


def installer_hint(cell: matrix.Cell) -> str:
    url = cell.windows.installer if cell.windows is not None and cell.windows.installer else "NVIDIA's CUDA " \
        f"{cell.cuda} network installer"
    return (f"install CUDA {cell.cuda} with NVIDIA's installer, only what builds need: "
            f"{' '.join(installer_command(cell, PureWindowsPath(url).name))} (from {url}); or point FARM_CUDA_HOME "
            "at a CUDA " + cell.cuda + " toolkit")


# --- the thin layer ---------------------------------------------------------------------------


def _nvcc_version(cuda_home: Path) -> str | None:
    return linux_toolkit.nvcc_version(cuda_home, "nvcc.exe")


def _checked(cell: matrix.Cell, cuda_home: Path, source: str) -> WindowsToolkit:
    missing = missing_files(cuda_home, cell, os.path.exists)
    if missing:
        raise MissingRequirement(f"the CUDA {cell.cuda} toolkit ({source}) lacks files torch's builds need",
                                 f"{cuda_home}: {', '.join(missing)}",
                                 installer_hint(cell) if source == "nvidia-installer" else
                                 "remove it from the farm's cache (FARM_CACHE_DIR/tools) and build again")
    version = _nvcc_version(cuda_home)
    if version is None or not version.startswith(cell.cuda + "."):
        raise UsageError(f"the toolkit ({source}) is not CUDA {cell.cuda}", f"{cuda_home}: nvcc {version}",
                         installer_hint(cell) if source == "nvidia-installer" else "check the cell's pins")
    return WindowsToolkit(cuda_home, version, source)


def ensure(cell: matrix.Cell) -> WindowsToolkit:  # pragma: no cover - installs/runs Windows binaries
    """The cell's toolkit on this Windows host: FARM_CUDA_HOME, the pinned wheels, or the installed CUDA 12."""
    home = env_path("FARM_CUDA_HOME", kind="folder")
    if home is not None:
        return _checked(cell, Path(home), "FARM_CUDA_HOME")
    facts = cell.windows
    if facts is None:
        raise UsageError(f"cell {cell.name} has no Windows facts", cell.cuda, "add them in ci/matrix.py")
    if facts.toolkit == "nvidia-installer":
        folder = Path(installer_dir(cell, os.environ))
        if not (folder / "bin" / "nvcc.exe").is_file():
            raise MissingRequirement(f"CUDA {cell.cuda} is not installed", folder, installer_hint(cell))
        return _checked(cell, folder, "nvidia-installer")
    requirements(cell)  # validates that the cell takes its Windows toolkit from PyPI, pinned
    subdir = cell.toolkit.home_subdir or "nvidia/cu13"

    def finish(root: Path) -> None:
        linux_toolkit._add_library_headers(cell, root / subdir)

    def verify(root: Path) -> bool:
        return not missing_files(root / subdir, cell, os.path.exists) and _nvcc_version(root / subdir) is not None

    # The universal locks of ci/requirements/ hold the win_amd64 wheels' hashes too.
    headers = (ci_pins.headers_lock(cell),) if cell.toolkit.library_headers else ()
    root = linux_toolkit._install_once(f"cuda-win-{cell.cuda}", ci_pins.toolkit_lock(cell), finish, verify,
                                       also_keyed_by=headers)
    return _checked(cell, root / subdir, "pypi")


def ensure_cuobjdump() -> Path | None:  # pragma: no cover - Windows host
    """cuobjdump.exe for the audit's architecture check (None when it cannot be installed)."""
    def verify(root: Path) -> bool:
        return any(p.is_file() for p in root.glob("nvidia/cu*/bin/cuobjdump.exe"))

    root = linux_toolkit._install_once("cuobjdump-win", "cuobjdump", verify=verify)
    found = sorted(root.glob("nvidia/cu*/bin/cuobjdump.exe"))
    return found[0] if found else None
