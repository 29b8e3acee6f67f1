"""torch.cuda answers as if the build's GPUs were the farm's architecture list (a CUDA build of the farm;
``cuda-available-in-build``).

Why: the farm's builders have no GPU, so torch.cuda.is_available() is False there, and a setup.py that decides on
CUDA with it (``if torch.cuda.is_available(): CUDAExtension(...) else: CppExtension(...)``, pytorch/extension-cpp's
``use_cuda = ... torch.cuda.is_available() and CUDA_HOME is not None``) builds a CPU-only library into a CUDA
wheel. A setup.py that then reads the visible GPUs (``for i in range(torch.cuda.device_count()):
torch.cuda.get_device_capability(i)``) to write TORCH_CUDA_ARCH_LIST would write ``""`` over the farm's list, and
torch's own fallback for an empty list (the visible GPUs again) dies with an IndexError. Such projects are common
and the farm builds them as they come, without an edit to setup.py.

How: the farm puts this file's folder first on ``PYTHONPATH`` for the build command alone (``ci/builds/
cuda_available.py``; host builds, cibuildwheel's ``CIBW_ENVIRONMENT`` in containers, where this folder is mounted
read-only, and on Windows). Python imports the first ``sitecustomize`` on its path at startup, in the build's
``python -m build`` and in every Python the build starts (the backend's process, a ``setup.py`` run). The farm
builds without isolation: pip's isolated build environment would replace ``PYTHONPATH`` with its own
``sitecustomize``. This module

1. keeps the architecture list the Python was started with (``TORCH_CUDA_ARCH_LIST``, the farm's): a setup.py
   that then writes ``TORCH_CUDA_ARCH_LIST`` (in the same process, where torch compiles it) does not change the
   GPUs the build "sees";
2. adds an import hook that, once ``torch.cuda`` has been imported (``import torch`` does it), answers from that
   list: ``is_available()`` True, ``device_count()`` one device per architecture (``8.0;9.0+PTX``: two), the
   devices newest first: device 0, the current device, is the newest architecture, so ``get_device_capability()``
   with no index answers it (a setup.py that builds bf16 or FP8 kernels only when that capability is high enough
   builds them, as it would on the newest GPU the wheel serves), and device i is the i-th architecture of the list
   from the newest down, for ``get_device_capability(i)``, ``get_device_properties(i).major, .minor`` and
   ``get_device_name(i)`` alike (``8.0;9.0``: device 0 is 9.0, device 1 is 8.0). A script that reads the devices to
   pick architectures so picks the farm's (without ``+PTX`` or an ``a`` suffix, which a capability cannot carry;
   torch's own fallback for an empty list sorts them and adds ``+PTX`` to the newest, as it does on a GPU
   machine). ``get_arch_list()`` stays torch's (the architectures torch itself was built for). Anything that needs
   a device (its memory, ``current_device()``, a tensor on it) fails as torch fails without a GPU, and the farm's
   failure line says so; ``cuda-available-in-build = false`` turns all of this off;
3. then runs the ``sitecustomize`` it hides, the next one on ``sys.path`` (Debian's Python has one), so nothing
   the interpreter did before is lost. A second copy of this folder on the path (a container's mount and the host's
   folder) is passed over, not run again: :data:`MARK` on ``sys`` lists every ``sitecustomize`` this chain ran.

The farm's own steps (repair, audit, the smoke and test commands in clean environments) run without it. Only the
standard library, and nothing at import time beyond ``os``, ``re``, ``sys`` and ``typing``: this runs at the start of
every Python of the build, on every Python version the farm builds for.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: The module whose functions are replaced once it has been executed.
TORCH_CUDA = "torch.cuda"
#: The architecture list this Python started with (the farm's; read once, before the build script runs).
STARTED_WITH = os.getenv("TORCH_CUDA_ARCH_LIST", "")
#: The attribute of ``sys`` that lists the ``sitecustomize`` files this chain ran (the farm's first).
MARK = "_cuda_ext_farm_sitecustomize"


def architectures() -> list[tuple[int, int]]:
    """The build's architectures, as ``(major, minor)`` capabilities, newest first (``9.0a`` is 9.0): the devices
    0, 1, ... of this build."""
    found: set[tuple[int, int]] = set()
    for entry in re.split(r"[;\s]+", STARTED_WITH):
        match = re.match(r"(\d+)\.(\d+)", entry)
        if match:
            found.add((int(match.group(1)), int(match.group(2))))
    return sorted(found, reverse=True)


def is_available() -> bool:
    """True: the builder has no GPU, and this build compiles CUDA code for the architecture list the farm chose
    (``cuda-available-in-build = false`` in ``[tool.cuda-ext-farm]`` gives torch's own answer)."""
    return True


def device_count() -> int:
    """One device per architecture the build compiles for (the builder has no GPU)."""
    return len(architectures())


class BuildTargetDevice:
    """What ``torch.cuda.get_device_properties(i)`` answers in the build: the i-th architecture of its list, newest
    first."""

    def __init__(self, major: int, minor: int) -> None:
        self.major, self.minor = major, minor
        self.name = f"no GPU: the build's architecture {major}.{minor}"

    def __repr__(self) -> str:
        return f"BuildTargetDevice(name={self.name!r}, major={self.major}, minor={self.minor})"


def _index(device: Any) -> int:
    """A device argument as torch takes it (None, an int, ``"cuda:1"``, a ``torch.device``) as an index; None and
    an index-less device are the current device, 0: the newest architecture."""
    if device is None:
        return 0
    if isinstance(device, str):
        index: Any = device.partition(":")[2] or 0
    elif isinstance(device, int):
        index = device
    else:  # a torch.device: index None is the current one
        index = getattr(device, "index", None) or 0
    index = max(int(index), 0)  # torch reads a negative index as the current device
    assert isinstance(index, int)
    count = device_count()
    if not 0 <= index < count:
        raise AssertionError(f"Invalid device id {index}: this build compiles for {count} architecture(s) and has no "
                             "GPU")
    return index


def get_device_properties(device: Any = None) -> BuildTargetDevice:
    return BuildTargetDevice(*architectures()[_index(device)])


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return architectures()[_index(device)]


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


#: The functions of ``torch.cuda`` this build answers.
REPLACED = {"is_available": is_available, "device_count": device_count,
            "get_device_properties": get_device_properties, "get_device_capability": get_device_capability,
            "get_device_name": get_device_name}


def patch(module: ModuleType) -> None:
    """Replace those functions of an executed ``torch.cuda``; the real ones stay at ``__wrapped__``."""
    for name, replacement in REPLACED.items():
        real = getattr(module, name, None)
        if real is not None and real is not replacement:
            replacement.__wrapped__ = real  # type: ignore[attr-defined]
            setattr(module, name, replacement)


class CudaAvailableFinder:
    """A meta path finder that finds nothing itself: for ``torch.cuda`` it asks the finders after it and wraps the
    loader's ``exec_module`` so that :func:`patch` runs on the module once its code ran (torch's own code of
    ``torch/cuda/__init__.py`` first, as it is, then the replacements)."""

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


def chain(ran: list[str]) -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` that this chain has not run (``ran``: their files): the one
    Python would have imported without the farm's folder. A copy of the farm's own, run here, only adds its file
    to ``ran`` and goes on."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    done = {os.path.realpath(os.path.dirname(path)) for path in ran}
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) not in done]
    spec = PathFinder.find_spec(__name__, rest)
    if spec is None or spec.loader is None:
        return
    if spec.origin:
        ran.append(spec.origin)
    module = module_from_spec(spec)
    spec.loader.exec_module(module)


def main() -> None:
    ran: list[str] | None = getattr(sys, MARK, None)
    if ran is None:  # the first farm copy on the path: the one that installs
        ran = [os.path.abspath(__file__)]
        setattr(sys, MARK, ran)
        install()
    chain(ran)


main()
