"""Loads the compiled libraries: always the CPU one, the CUDA one only when usable.

The CUDA kernels live in ``_C_cuda`` so that this wheel imports and runs its
CPU ops under a CPU-only torch (where ``libc10_cuda.so`` does not exist) and
under a torch built for another CUDA major (where ``libcudart`` differs).

Two layouts, one import: a wheel for one CUDA major has ``_C_cuda.abi3.so``;
the PyPI wheel across majors (the farm's ``pypi-cuda-majors``) has
``_cuda12/_C_cuda.abi3.so``, ``_cuda13/...`` and a generated ``_C_cuda.py``
that loads the one matching ``torch.version.cuda`` as ``fusedops._C_cuda``.
Either way ``import fusedops._C_cuda`` gives the extension module, whose file
``torch.ops.load_library`` then records.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class LoadState:
    cuda_kernels: bool
    reason: str
    build_info: dict[str, Any]
    #: fusedops._C_cuda as a Python module: the eager fast path (csrc/cuda/fast_launch.cpp), or None
    launchers: Any = None


def _package_dir() -> Path:
    return Path(str(resources.files(__package__ or "fusedops")))


def _read_build_info(pkg: Path) -> dict[str, Any]:
    path = pkg / "_build_info.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    return {}


def _major(version: str | None) -> int | None:
    return int(version.split(".")[0]) if version else None


def _built_majors(pkg: Path, info: dict[str, Any]) -> list[int]:
    """The CUDA majors this wheel has kernels for: its ``_cuda<MAJOR>/`` folders, else the build's own major."""
    found = sorted(int(p.name[len("_cuda"):]) for p in pkg.glob("_cuda*") if p.is_dir() and p.name[5:].isdigit())
    if found:
        return found
    major = _major(info.get("cuda"))
    return [major] if major is not None else []


def load() -> LoadState:
    from . import _C  # noqa: F401  (registers the schemas and CPU kernels)

    pkg = _package_dir()
    info = _read_build_info(pkg)
    majors = _built_majors(pkg, info)
    libs = sorted(pkg.glob("_C_cuda*.so")) + sorted(pkg.glob("_C_cuda*.pyd")) + sorted(pkg.glob("_C_cuda.py"))
    if not libs:
        return LoadState(False, "this build of fusedops has no CUDA kernels", info)
    info = {**info, "cuda_majors": majors}
    if torch.version.cuda is None:
        return LoadState(False, f"torch {torch.__version__} is a CPU-only build", info)
    runtime = _major(torch.version.cuda)
    if majors and runtime not in majors:
        built = ", ".join(str(m) for m in majors)
        reason = (
            f"fusedops was built for CUDA {info.get('cuda') if len(majors) == 1 else built} but torch "
            f"{torch.__version__} uses CUDA {torch.version.cuda}; install the fusedops wheel built for CUDA {runtime}"
        )
        warnings.warn(f"{reason}. CUDA kernels are disabled; CPU ops work.", RuntimeWarning, stacklevel=3)
        return LoadState(False, reason, info)
    # The extension module (in a wheel across majors, the build for torch's major): its functions launch the
    # kernels beside the dispatcher (the eager fast path); importing it registers its ops.
    launchers = importlib.import_module(f"{__package__ or 'fusedops'}._C_cuda")
    own = Path(launchers.__file__).parent / "_build_info.json"
    if own.parent != pkg and own.exists():  # the loaded major's own build record (a wheel across majors)
        info = {**info, **json.loads(own.read_text()), "cuda_majors": majors}
    torch.ops.load_library(launchers.__file__)
    return LoadState(True, "loaded", info, launchers)
