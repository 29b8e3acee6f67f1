"""Loads the compiled libraries: always the CPU one, the CUDA one only when usable.

The CUDA kernels live in ``_C_cuda`` so that this wheel imports and runs its
CPU ops under a CPU-only torch (where ``libc10_cuda.so`` does not exist) and
under a torch built for another CUDA major (where ``libcudart`` differs).
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


def load() -> LoadState:
    from . import _C  # noqa: F401  (registers the schemas and CPU kernels)

    pkg = _package_dir()
    info = _read_build_info(pkg)
    libs = sorted(pkg.glob("_C_cuda*.so")) + sorted(pkg.glob("_C_cuda*.pyd"))
    if not libs:
        return LoadState(False, "this build of fusedops has no CUDA kernels", info)
    if torch.version.cuda is None:
        return LoadState(False, f"torch {torch.__version__} is a CPU-only build", info)
    built, runtime = _major(info.get("cuda")), _major(torch.version.cuda)
    if built is not None and built != runtime:
        reason = (
            f"fusedops was built for CUDA {info.get('cuda')} but torch {torch.__version__} uses CUDA "
            f"{torch.version.cuda}; install the fusedops wheel built for CUDA {runtime}"
        )
        warnings.warn(f"{reason}. CUDA kernels are disabled; CPU ops work.", RuntimeWarning, stacklevel=3)
        return LoadState(False, reason, info)
    torch.ops.load_library(str(libs[0]))
    # The same library, imported: the module's functions launch the kernels beside the dispatcher.
    launchers = importlib.import_module(f"{__package__ or 'fusedops'}._C_cuda")
    return LoadState(True, "loaded", info, launchers)
