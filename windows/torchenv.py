"""The target's torch on a Windows build host: the CUDA build, installed once into a folder of the cache.

PyPI's ``win_amd64`` torch wheels are CPU builds (no ``c10_cuda.lib``,
``torch_cuda.lib``); the CUDA builds are on PyTorch's own index, one per CUDA
version of the release (``https://download.pytorch.org/whl/cu130``). The farm
installs the target's requirement from there with the target's CPython
(``pip install --target``, dependencies included) into
``<cache>/torch-win/...``, once per (torch, Python, index), and every later
build and test environment sees that folder through a ``.pth`` file, as the
container builds see their torch volume. ``FARM_TORCH_INDEX_URL`` points at a
mirror (``{cuda}`` in it becomes ``130``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from ci import fsutil, proc, settings, toolenv
from ci.errors import UsageError
from ci.log import log, mask
from ci.toolchain import envs
from ci.universe import matrix
from ci.universe.targets import Target

INDEX_BASE = "https://download.pytorch.org/whl"
_VERSION = re.compile(r"^__version__\s*(?::\s*str)?\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_CUDA = re.compile(r"^cuda\s*(?::\s*[A-Za-z_\[\]. |]+)?\s*=\s*(None|['\"]([^'\"]*)['\"])", re.M)


def index_url(target: Target, env: Mapping[str, str] | None = None) -> str:
    """PyTorch's index of the CUDA build of the target's torch (cu130 for 2.11, cu128 for 2.10)."""
    env = settings.current().environ if env is None else env
    cuda = matrix.get_torch(target.torch).cuda.replace(".", "")
    override = env.get("FARM_TORCH_INDEX_URL", "").strip()
    if override:
        return override.replace("{cuda}", cuda)
    return f"{INDEX_BASE}/cu{cuda}"


def install_command(python: Path, folder: Path, requirement: str, index: str) -> list[str]:
    return [str(python), "-m", "pip", "install", "--target", str(folder), "--index-url", index,
            "--only-binary=:all:", "--disable-pip-version-check", "--no-warn-script-location", requirement]


def parse_version_py(text: str) -> tuple[str, str | None]:
    """(``__version__``, ``cuda``) of ``torch/version.py``."""
    version = _VERSION.search(text)
    cuda = _CUDA.search(text)
    if version is None:
        raise UsageError("torch/version.py has no __version__", text[:80], "reinstall torch")
    return version.group(1), (cuda.group(2) if cuda and cuda.group(2) else None)


def check_torch(version: str, cuda: str | None, target: Target) -> None:
    if version.split("+")[0] != target.torch:
        raise UsageError(f"the installed torch is {version}, not the target's", target.torch,
                         "remove the folder from the cache (FARM_CACHE_DIR/torch-win) and build again")
    if cuda is None or int(cuda.split(".")[0]) != target.cell.cuda_major:
        raise UsageError(f"the target needs a CUDA {target.cell.cuda_major} build of torch", f"{version} (CUDA {cuda})",
                         f"check the index ({index_url(target)}) or FARM_TORCH_INDEX_URL")


def interpreter(python: str, env: Mapping[str, str] | None = None) -> Path:
    """CPython ``python``: ``FARM_PYTHON_3_12`` (CI sets it from actions/setup-python's ``python-path``), else
    the running one, ``py -3.12`` or ``python312`` (``ci.toolchain.envs.find_interpreter``)."""
    return envs.find_interpreter(python, env)


def folder_for(target: Target, python: str, index: str, root: Path) -> Path:
    key = hashlib.sha256(json.dumps([python, target.torch_requirement, index]).encode()).hexdigest()[:10]
    return root / "torch-win" / f"torch{target.torch}-py{python}-cu{target.cell.cuda_major}-{key}"


def mark_complete(folder: Path, version: str, index: str) -> None:
    """The marker of a finished install: the torch and the index it came from, whose credentials (a mirror's
    ``https://user:token@host``) are masked; the folder's name keys the index itself (:func:`folder_for`)."""
    (folder / ".farm-complete").write_text(f"{version}\n{mask(index)}\n")


def ensure_torch(target: Target, python: str) -> Path:
    """The folder (a site directory) holding the CUDA build of the target's torch for CPython ``python``."""
    index = index_url(target)
    folder = folder_for(target, python, index, toolenv.cache_root())
    folder.parent.mkdir(parents=True, exist_ok=True)
    with fsutil.locked(folder.with_name(folder.name + ".lock"), f"the torch install {folder.name}"):
        for stale in fsutil.stale_staging(folder.parent):
            if stale.name.startswith(folder.name + ".tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        if (folder / ".farm-complete").is_file():
            log.reuse(f"torch {target.torch} in {folder}")
            return folder
        tmp = folder.with_name(folder.name + f".tmp-pid{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            proc.run(install_command(interpreter(python), tmp, target.torch_requirement, index),
                     env=envs.pip_env(), what=f"installing torch {target.torch} (CUDA build) failed",
                     hint=f"check the network or the index ({index}; FARM_TORCH_INDEX_URL sets a mirror)")
            version, cuda = parse_version_py((tmp / "torch" / "version.py").read_text(encoding="utf-8"))
            check_torch(version, cuda, target)
            mark_complete(tmp, version, index)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder
