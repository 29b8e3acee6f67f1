"""torch.cuda.is_available() is True in the project's build (a CUDA build of the farm; ``cuda-available-in-build``).

Why: the farm's builders have no GPU, so torch.cuda.is_available() is False there, and a setup.py that decides on
CUDA with it (``if torch.cuda.is_available(): CUDAExtension(...) else: CppExtension(...)``, pytorch/extension-cpp's
``use_cuda = ... torch.cuda.is_available() and CUDA_HOME is not None``) builds a CPU-only library into a CUDA
wheel. Such projects are common and the farm builds them as they come, without an edit to setup.py.

How: the farm puts this file's folder first on ``PYTHONPATH`` for the build command alone (``ci/builds/
cuda_available.py``; host builds, cibuildwheel's ``CIBW_ENVIRONMENT`` in containers, where this folder is mounted
read-only, and on Windows). Python imports the first ``sitecustomize`` on its path at startup, in the build's
``python -m build`` and in every Python the build starts (the backend's process, a ``setup.py`` run). The farm
builds without isolation: pip's isolated build environment would replace ``PYTHONPATH`` with its own
``sitecustomize``. This module

1. adds an import hook that, once ``torch.cuda`` has been imported (``import torch`` does it), replaces
   ``torch.cuda.is_available`` with a function that returns True; nothing else of torch changes
   (``device_count()`` is still 0: a setup.py that asks the GPU's capability still fails, and the project turns
   this off with ``cuda-available-in-build = false``);
2. then runs the ``sitecustomize`` it hides, the next one on ``sys.path`` (Debian's Python has one), so nothing
   the interpreter did before is lost.

The farm's own steps (repair, audit, the smoke and test commands in clean environments) run without it. Only the
standard library, and nothing at import time beyond ``os``, ``sys`` and ``typing``: this runs at the start of every
Python of the build, on every Python version the farm builds for.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: The module whose ``is_available`` is replaced once it has been executed.
TORCH_CUDA = "torch.cuda"


def is_available() -> bool:
    """True: the farm builds CUDA code on machines without a GPU (ci/buildsite/sitecustomize.py, the farm's
    ``cuda-available-in-build``); this build compiles for the GPUs the farm's architecture list names."""
    return True


def patch(module: ModuleType) -> None:
    """Replace the ``is_available`` of an executed ``torch.cuda``; the real one stays at ``__wrapped__``."""
    real = getattr(module, "is_available", None)
    if real is not None and real is not is_available:
        is_available.__wrapped__ = real  # type: ignore[attr-defined]
        module.is_available = is_available  # type: ignore[attr-defined]


class CudaAvailableFinder:
    """A meta path finder that finds nothing itself: for ``torch.cuda`` it asks the finders after it and wraps the
    loader's ``exec_module`` so that :func:`patch` runs on the module once its code ran (torch's own code of
    ``torch/cuda/__init__.py`` first, as it is, then the one replacement)."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name != TORCH_CUDA:
            return None
        spec: ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        run = getattr(spec.loader, "exec_module", None) if spec is not None else None
        if spec is None or run is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        # On the loader object of this one spec (a new one per find), so the module keeps torch's own loader type.
        setattr(spec.loader, "exec_module", exec_module)  # noqa: B010 - a method cannot be assigned otherwise
        return spec


def install() -> None:
    """The hook, first on ``sys.meta_path``; a ``torch.cuda`` already imported is patched now."""
    if not any(isinstance(f, CudaAvailableFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, CudaAvailableFinder())
    if TORCH_CUDA in sys.modules:
        patch(sys.modules[TORCH_CUDA])


def chain() -> None:
    """Run the next ``sitecustomize`` on ``sys.path``: the one Python would have imported without this folder."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = PathFinder.find_spec(__name__, rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    spec.loader.exec_module(module)


install()
chain()
