"""A hermetic CUDA toolkit: installed from pinned PyPI wheels, never from the machine.

``torch.utils.cpp_extension`` wants a classic CUDA_HOME (``bin/nvcc``,
``include``, ``lib64/libcudart.so``). NVIDIA's wheels put the toolkit under
``nvidia/cu13`` with ``lib`` and only a versioned ``libcudart.so.13``, so the
install is completed with the two links torch expects. Installs are keyed by the
hash of their pinned requirements and reused; pip's own cache makes a fresh
install after a cache wipe cheap too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from ci import matrix, proc

_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")


class ToolkitError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class InstalledToolkit:
    root: Path
    cuda_home: Path
    nvcc_version: str

    @property
    def nvcc(self) -> Path:
        return self.cuda_home / "bin" / "nvcc"

    def env(self) -> dict[str, str]:
        """Environment for a build that must use only this toolkit."""
        path = os.pathsep.join([str(self.cuda_home / "bin"), os.environ.get("PATH", "")])
        return {"CUDA_HOME": str(self.cuda_home), "CUDA_PATH": str(self.cuda_home), "PATH": path}


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """Where toolkits and tools are kept: ``$FARM_CACHE_DIR`` or the user cache folder."""
    env = os.environ if env is None else env
    if env.get("FARM_CACHE_DIR"):
        return Path(env["FARM_CACHE_DIR"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "cuda-ext-farm"


def install_key(requirements: tuple[str, ...]) -> str:
    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()
    return digest[:12]


def parse_nvcc_version(text: str) -> str:
    m = _NVCC_RELEASE.search(text)
    if not m:
        raise ToolkitError(f"could not read the nvcc version from:\n{text}")
    return m.group(2)


def pip_install_target(requirements: tuple[str, ...], target: Path) -> list[str]:
    """The pip command that installs pinned wheels into ``target``."""
    return [
        sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--target", str(target), *requirements,
    ]


def _install_once(name: str, requirements: tuple[str, ...], finish: Callable[[Path], None] | None = None) -> Path:
    root = cache_root() / "tools" / f"{name}-{install_key(requirements)}"
    if (root / ".complete").exists():
        proc.console.print(f"[green]reusing[/] {name} in {root}")
        return root
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc.run(pip_install_target(requirements, tmp),
                 hint="Could not install the pinned CUDA wheels from PyPI; "
                 "check the network or the pins in ci/matrix.py.")
        if finish is not None:
            finish(tmp)
        (tmp / ".complete").write_text("\n".join(requirements) + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _complete_cuda_home(cuda_home: Path) -> None:
    if not (cuda_home / "lib64").exists():
        (cuda_home / "lib64").symlink_to("lib")
    for versioned in (cuda_home / "lib").glob("libcudart.so.*"):
        link = cuda_home / "lib" / "libcudart.so"
        if not link.exists():
            link.symlink_to(versioned.name)
        break


def ensure_toolkit(cell: matrix.Cell) -> InstalledToolkit:
    """Install (or reuse) the cell's pinned toolkit and return its CUDA_HOME."""
    tk = cell.toolkit
    preinstalled = os.environ.get("FARM_CUDA_HOME")
    if preinstalled:
        # Inside a builder image the cell's toolkit is already installed.
        cuda_home = Path(preinstalled)
        text = proc.run([cuda_home / "bin" / "nvcc", "--version"], capture=True).stdout
        version = parse_nvcc_version(text)
        if not version.startswith(cell.cuda + "."):
            raise ToolkitError(f"FARM_CUDA_HOME={cuda_home} holds CUDA {version}, cell {cell.name} wants {cell.cuda}")
        return InstalledToolkit(root=cuda_home, cuda_home=cuda_home, nvcc_version=version)
    if tk.kind != "pypi":
        # Debian and NVIDIA-repository toolkits live in the cell's container image.
        raise ToolkitError(
            f"cell {cell.name} takes its toolkit from {tk.kind!r}, which is only available inside "
            f"its container image: use `nox -s build-cuda -- {cell.cuda}` instead of the host build."
        )

    def finish(root: Path) -> None:
        _complete_cuda_home(root / tk.home_subdir)

    root = _install_once(f"cuda-{cell.cuda}", tk.packages, finish)
    cuda_home = root / tk.home_subdir
    result = proc.run([cuda_home / "bin" / "nvcc", "--version"], capture=True)
    version = parse_nvcc_version(result.stdout)
    if not version.startswith(cell.cuda + "."):
        raise ToolkitError(f"cell {cell.name} expects CUDA {cell.cuda} but nvcc reports {version}")
    return InstalledToolkit(root=root, cuda_home=cuda_home, nvcc_version=version)


def ensure_cuobjdump() -> Path:
    """A cuobjdump for reading fatbinaries (the audit's architecture check)."""
    root = _install_once("cuobjdump", (matrix.CUOBJDUMP_REQUIREMENT,))
    found = sorted(root.glob("nvidia/cu*/bin/cuobjdump"))
    if not found:
        raise ToolkitError(f"no cuobjdump binary in {root}")
    return found[0]
