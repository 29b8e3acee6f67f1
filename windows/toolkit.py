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

The code that finds and checks a toolkit takes the folder and a :class:`Layout`
(the platform's decisions: ``.exe``, ``lib\\x64``, ``cudart.lib``) instead of
asking the host, so it runs on Linux over a recorded layout; only running
``nvcc.exe`` (the ``probe``) and NVIDIA's installer need Windows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from urllib.parse import urlparse

from ci import proc, settings, toolenv
from ci.errors import CommandFailed, MissingRequirement, UsageError, env_path
from ci.log import log
from ci.toolchain import toolkit as linux_toolkit
from ci.universe import pins as ci_pins
from ci.universe import shapes

DEFAULT_INSTALL_ROOT = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA"


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
HASH_ALGORITHMS = ("sha256", "md5")


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


def required_files(cell: shapes.Cell, layout: Layout = WINDOWS) -> tuple[str, ...]:
    headers = cell.toolkit.library_headers or (cell.windows is not None and any(
        p.startswith("cublas_dev") for p in cell.windows.packages))
    return layout.core_files() + (LIBRARY_HEADER_FILES if headers else ())


def missing_files(cuda_home: PurePath, cell: shapes.Cell, exists: Callable[[str], bool],
                  layout: Layout = WINDOWS) -> list[str]:
    return [f for f in required_files(cell, layout) if not exists(str(cuda_home / f))]


def installer_variable(cell: shapes.Cell) -> str:
    """The variable NVIDIA's installer sets to the cell's CUDA folder (``CUDA_PATH_V12_4``)."""
    major, minor = cell.cuda.split(".")[:2]
    return f"CUDA_PATH_V{major}_{minor}"


def installer_dir(cell: shapes.Cell, env: Mapping[str, str]) -> PureWindowsPath:
    """Where NVIDIA's installer put the cell's CUDA: ``CUDA_PATH_V12_4``, else its default folder."""
    major, minor = cell.cuda.split(".")[:2]
    value = env.get(installer_variable(cell), "").strip()
    return PureWindowsPath(value) if value else PureWindowsPath(DEFAULT_INSTALL_ROOT, f"v{major}.{minor}")


def installer_command(cell: shapes.Cell, installer: str = "cuda_installer.exe") -> list[str]:
    """NVIDIA's installer, silent (``-s``), only the cell's sub-packages, no reboot (``-n``)."""
    facts = cell.windows
    if facts is None or facts.toolkit != "nvidia-installer" or not facts.packages:
        raise UsageError(f"cell {cell.name} lists no NVIDIA installer sub-packages", cell.cuda,
                         "add them to its WindowsFacts.packages in ci/universe/matrix.py")
    return [installer, "-s", *facts.packages, "-n"]


def installer_hint(cell: shapes.Cell) -> str:
    url = cell.windows.installer if cell.windows is not None and cell.windows.installer else "NVIDIA's CUDA " \
        f"{cell.cuda} network installer"
    return (f"run `python -m ci toolkit --cuda {cell.cuda}` (as administrator: it runs NVIDIA's installer, only what "
            f"builds need: {' '.join(installer_command(cell, PureWindowsPath(url).name))}, from {url}); "
            f"or point FARM_CUDA_HOME at a CUDA {cell.cuda} toolkit")


def _fix(cell: shapes.Cell, source: str, where: Path) -> str:
    if source == "nvidia-installer":
        return installer_hint(cell)
    if source == "FARM_CUDA_HOME":
        return f"point FARM_CUDA_HOME at a CUDA {cell.cuda} toolkit (the folder with bin\\nvcc.exe) or unset it"
    return f"remove {where} and run `python -m ci toolkit --cuda {cell.cuda}` again; check the cell's pins"


# --- finding a toolkit in a folder (any host) ---------------------------------------------------------


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


def _nvcc_version(cuda_home: Path) -> str | None:  # pragma: no cover - runs nvcc.exe
    return linux_toolkit.nvcc_version(cuda_home, WINDOWS.exe("nvcc"))


#: Reads the version of a toolkit's nvcc (``nvcc.exe --version`` on Windows); None: it does not run.
Probe = Callable[[Path], str | None]


def _matching(cell: shapes.Cell, found: FoundToolkit, version: str | None, source: str) -> WindowsToolkit:
    if version is None or not version.startswith(cell.cuda + "."):
        raise UsageError(f"the toolkit ({source}) is not CUDA {cell.cuda}", f"{found.cuda_home}: nvcc {version}",
                         installer_hint(cell) if source == "nvidia-installer" else "check the cell's pins")
    return WindowsToolkit(found.cuda_home, version, source)


def checked(cell: shapes.Cell, cuda_home: Path, source: str, probe: Probe, layout: Layout = WINDOWS) -> WindowsToolkit:
    """A toolkit somebody else installed (FARM_CUDA_HOME, NVIDIA's installer): its files, then its nvcc's version."""
    found = find_toolkit(cuda_home, cell, source=source, layout=layout)
    return _matching(cell, found, probe(found.cuda_home), source)


# --- CUDA 13: the pinned wheels -----------------------------------------------------------------------


def ensure_pypi(cell: shapes.Cell, *, probe: Probe | None = _nvcc_version, layout: Layout = WINDOWS,
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
    return _matching(cell, found, version_of(root, found), "pypi")


# --- CUDA 12: NVIDIA's installer ------------------------------------------------------------------------


def _installer_facts(cell: shapes.Cell) -> shapes.WindowsFacts:
    facts = cell.windows
    if facts is None or facts.toolkit != "nvidia-installer" or not facts.installer:
        raise UsageError(f"cell {cell.name} names no NVIDIA installer", cell.cuda,
                         "set WindowsFacts.installer in ci/universe/matrix.py")
    return facts


def parse_hash(pin: str) -> tuple[str, str]:
    """``sha256:<hex>`` -> (algorithm, hex); the algorithms the matrix may pin."""
    algorithm, _, digest = pin.partition(":")
    if algorithm not in HASH_ALGORITHMS or not re.fullmatch(r"[0-9a-f]+", digest) or \
            len(digest) != hashlib.new(algorithm).digest_size * 2:
        raise UsageError("an installer checksum must be <algorithm>:<lowercase hex>", pin or "none",
                         f"pin one of {', '.join(HASH_ALGORITHMS)} in WindowsFacts.installer_hash "
                         "(ci/universe/matrix.py)")
    return algorithm, digest


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: Path) -> None:
    """Stream ``url`` into ``dest``; the pinned checksum, not the transport, is what makes the file trusted."""
    with urllib.request.urlopen(url, timeout=120) as response, dest.open("wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)


def fetch_installer(cell: shapes.Cell, folder: Path, fetch: Callable[[str, Path], None] = download) -> Path:
    """NVIDIA's installer of the cell in ``folder``, downloaded once and checked against the matrix's pin before
    anything runs it (a cached copy is checked again)."""
    facts = _installer_facts(cell)
    algorithm, expected = parse_hash(facts.installer_hash)
    target = folder / PurePosixPath(urlparse(facts.installer).path).name
    if target.is_file() and file_digest(target, algorithm) == expected:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-pid{os.getpid()}")
    try:
        log.info(f"downloading {facts.installer}")
        try:
            fetch(facts.installer, tmp)
        except OSError as exc:
            raise MissingRequirement(f"NVIDIA's CUDA {cell.cuda} installer could not be downloaded",
                                     f"{facts.installer}: {exc}", "check the network (developer.download.nvidia.com)"
                                     " or download it yourself into " + str(folder)) from exc
        got = file_digest(tmp, algorithm)
        # Printed so that an md5 pin (NVIDIA publishes no other) can be replaced by a SHA-256 one.
        log.info(f"{target.name}: sha256 {file_digest(tmp, 'sha256')}")
        if got != expected:
            raise CommandFailed(f"NVIDIA's CUDA {cell.cuda} installer does not match the checksum the matrix pins",
                                f"{algorithm} {got}, pinned {expected}",
                                "the file changed on NVIDIA's site or in transit; compare it with NVIDIA's checksums "
                                "before changing WindowsFacts.installer_hash in ci/universe/matrix.py")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _run_installer(cmd: list[str]) -> int:  # pragma: no cover - runs NVIDIA's installer
    return proc.run(cmd, check=False).returncode


def ensure_installer(cell: shapes.Cell, *, env: Mapping[str, str], tools: Path, install: bool,
                     probe: Probe = _nvcc_version, layout: Layout = WINDOWS,
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


# --- the entry point of builds and of `python -m ci toolkit` -----------------------------------------------


def ensure(cell: shapes.Cell, *, install: bool = False) -> WindowsToolkit:  # pragma: no cover - Windows host
    """The cell's toolkit on this Windows host: FARM_CUDA_HOME, the pinned wheels (installed on first use), or
    NVIDIA's installer's CUDA 12 (installed only when ``install``: ``python -m ci toolkit``; a build never changes
    the machine)."""
    home = env_path("FARM_CUDA_HOME", settings.current().environ, kind="folder")
    if home is not None:
        return checked(cell, Path(home), "FARM_CUDA_HOME", _nvcc_version)
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
