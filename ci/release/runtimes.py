"""The CUDA runtimes a wheel across CUDA majors meets (ci/release/majors.py): each ``_cuda<MAJOR>/`` library must
resolve its CUDA runtime symbols in the ``libcudart.so.<MAJOR>`` of the oldest minor of that major among the torch
builds its ``Requires-Dist`` admits, on PyPI and on PyTorch's own index (torch 2.10+cu126 beside PyPI's cu128: the
checks are ci/audit/cuda_majors.py's). The runtimes are NVIDIA's ``nvidia-cuda-runtime`` wheels that those torch
builds pin (``matrix.CUDA_RUNTIMES``), installed once into the tool cache from their hash-pinned locks."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from ci import wheelmeta
from ci.audit import cuda_majors, describe
from ci.audit.checks import Check, LibraryInfo
from ci.audit.gpu_code import major_of
from ci.errors import UsageError


def runtime_library(cuda: str) -> Path:
    """The ``libcudart.so.<major>`` torch's builds of CUDA ``cuda`` (``12.6``) ship: the runtime wheel they pin
    (``matrix.CUDA_RUNTIMES``), installed once into the tool cache from its hash-pinned lock (``cudart-cu126``)."""
    from ci.toolchain import toolkit
    from ci.universe import matrix, pins

    if cuda not in matrix.CUDA_RUNTIMES:
        raise UsageError("no CUDA runtime is recorded for a CUDA version torch builds with", cuda,
                         "add the nvidia-cuda-runtime pin its torch builds use to CUDA_RUNTIMES in the farm's matrix, "
                         "then make the locks again")

    def found(root: Path) -> list[Path]:
        return sorted(root.glob(f"nvidia/*/lib/libcudart.so.{cuda.split('.')[0]}"))

    root = toolkit.install_once(f"cudart-{cuda}", pins.runtime_lock(cuda), verify=lambda root: bool(found(root)))
    return found(root)[0]


def runtime_checks(wheel: Path, runtimes: Mapping[int, Path] | None = None) -> list[Check]:
    """``cuda-runtime-minor:<lib>`` of a wheel across majors (ci/audit/cuda_majors.py ``check_runtimes``): each
    ``_cuda<MAJOR>/`` library against the runtime of its major's oldest minor among the torch builds the wheel's
    ``Requires-Dist`` admits; ``runtimes`` (major -> ``libcudart.so.<MAJOR>``) stands in for the pinned wheels."""
    oldest = cuda_majors.oldest_runtimes(describe.torch_specifier(
        wheelmeta.read_metadata(wheel).get("Requires-Dist", [])))
    with tempfile.TemporaryDirectory(prefix="farm-runtime-") as tmp:
        root = Path(tmp)
        with wheelmeta.open_wheel(wheel) as zf:
            zf.extractall(root)
        libs = [LibraryInfo(p.relative_to(root).as_posix(), (), ()) for p in sorted(root.rglob("*.so*"))
                if p.is_file() and major_of(p.relative_to(root).as_posix()) is not None]
        wanted = {major for lib in libs if (major := major_of(lib.path)) in oldest}
        found = dict(runtimes) if runtimes is not None else {m: runtime_library(oldest[m][0]) for m in wanted}
        return cuda_majors.check_runtimes(root, libs, oldest, found)
