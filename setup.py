"""Build script for the fusedops extension (setuptools + torch's BuildExtension + ninja).

Two shared libraries are built:

* ``fusedops._C``: operator schemas and CPU kernels; an abi3 Python module stub.
* ``fusedops._C_cuda``: the CUDA kernels, in a library of their own so the same
  wheel imports under a CPU-only torch (it is loaded only when torch has CUDA),
  and an abi3 module with the eager fast path's launchers (csrc/cuda/fast_launch.h).

Both use only the LibTorch stable ABI, so one wheel serves every torch >= 2.10
and every CPython >= 3.10 but the free-threaded ones: the limited C API does not
exist there (CPython 3.13t/3.14t), so a free-threaded interpreter builds a
per-Python ``cp313-cp313t`` wheel of the same sources. The farm (``python -m ci build``) drives this file
through environment variables:

``FUSEDOPS_CUDA``        ``auto`` (default), ``1`` (require CUDA) or ``0`` (CPU only)
``FUSEDOPS_DEBUG``       ``1``: ``-O0 -g`` and device debug info (``-G``)
``FUSEDOPS_LINEINFO``    ``1``: ``-lineinfo`` for sanitizer/profiler line numbers
``TORCH_CUDA_ARCH_LIST`` architectures (the farm always sets it; no GPU is probed)
``MAX_JOBS``             parallel compile jobs (ninja)
``FUSEDOPS_BUILD_DIR``   build folder (objects and ninja files)
``FUSEDOPS_GIT_COMMIT``  the commit recorded in ``_build_info.json`` (default: ``git rev-parse HEAD``)
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"

# Stable-ABI target: 2.10 (the encoding of torch/headeronly/version.h).
TORCH_TARGET_VERSION = "0x020a000000000000"
PY_LIMITED_API = "0x030A0000"  # CPython 3.10
#: A free-threaded CPython (3.13t) has no limited API (Python.h refuses Py_LIMITED_API there): its wheel is per-Python.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
LIMITED_API = not FREE_THREADED


def _flag(name: str, default: str = "0") -> str:
    return os.environ.get(name, default).strip().lower()


def _want_cuda() -> bool:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    mode = _flag("FUSEDOPS_CUDA", "auto")
    if mode in ("0", "false", "no"):
        return False
    available = CUDA_HOME is not None and torch.version.cuda is not None
    if mode in ("1", "true", "yes") and not available:
        raise SystemExit(
            "FUSEDOPS_CUDA=1 but no CUDA toolkit or no CUDA build of torch was found "
            f"(CUDA_HOME={CUDA_HOME}, torch.version.cuda={torch.version.cuda}). "
            "Use `nox -s build`, which installs a pinned toolkit, or set CUDA_HOME."
        )
    return available


#: Used when TORCH_CUDA_ARCH_LIST is unset (the farm always sets it): no GPU is probed.
DEFAULT_ARCH_LIST = "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"


def _default_arch_list() -> None:
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCH_LIST)


def _fatbin_compression() -> list[str]:
    """Zstandard (--compress-mode=size) for CUDA 13, LZ4 (-compress-all) for CUDA 12. A Zstandard fatbin loads only
    on a CUDA 12.4 driver (r550) or newer: every CUDA 13 driver is, but fusedops' CUDA 12 build serves torch 2.10,
    whose CUDA 12.8 runs on drivers back to r525 (the r535 of many clusters), as the farm's audit says."""
    import re

    from torch.utils.cpp_extension import CUDA_HOME

    try:
        out = subprocess.run([os.path.join(CUDA_HOME or "", "bin", "nvcc"), "--version"],
                             capture_output=True, text=True, check=True).stdout
        major = int(re.search(r"release (\d+)\.", out).group(1))  # type: ignore[union-attr]
    except (OSError, subprocess.CalledProcessError, AttributeError):
        return ["-Xfatbin=-compress-all"]
    return ["--compress-mode=size"] if major >= 13 else ["-Xfatbin=-compress-all"]


def _git_commit() -> str:
    if os.environ.get("FUSEDOPS_GIT_COMMIT"):
        return os.environ["FUSEDOPS_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def extensions() -> list:
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    debug = _flag("FUSEDOPS_DEBUG") in ("1", "true", "yes")
    lineinfo = _flag("FUSEDOPS_LINEINFO") in ("1", "true", "yes")
    common = [
        "-DTORCH_STABLE_ONLY",
        f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}",
        *([f"-DPy_LIMITED_API={PY_LIMITED_API}"] if LIMITED_API else []),
    ]
    if os.name == "nt":  # cl.exe spells its flags differently (and ignores GCC's with D9002 warnings)
        cxx = ["/std:c++17", *common, *(["/Od", "/Zi"] if debug else ["/O2"])]
    else:
        cxx = ["-std=c++17", *common, *(["-O0", "-g"] if debug else ["-O3", "-g0"])]
    rel = lambda paths: sorted(str(p.relative_to(ROOT)) for p in paths)  # noqa: E731
    exts = [
        CppExtension(
            "fusedops._C",
            rel([CSRC / "ops.cpp", *(CSRC / "cpu").glob("*.cpp")]),
            extra_compile_args={"cxx": cxx},
            py_limited_api=LIMITED_API,
        )
    ]
    if _want_cuda():
        _default_arch_list()
        nvcc = [
            "-std=c++17",
            *common,
            "-DUSE_CUDA",
            *_fatbin_compression(),
            *(["-O0", "-g", "-G"] if debug else ["-O3"]),
            *(["-lineinfo"] if lineinfo and not debug else []),
        ]
        exts.append(
            CUDAExtension(
                "fusedops._C_cuda",
                rel([*(CSRC / "cuda").glob("*.cu"), *(CSRC / "cuda").glob("*.cpp")]),
                extra_compile_args={"cxx": [*cxx, "-DUSE_CUDA"], "nvcc": nvcc},
                py_limited_api=LIMITED_API,
            )
        )
    return exts


def build_ext_class():
    from torch.utils.cpp_extension import BuildExtension

    class BuildExtensionWithInfo(BuildExtension):
        """Records how the binaries were built next to them (``_build_info.json``)."""

        def run(self) -> None:
            super().run()
            import torch

            names = [e.name for e in self.extensions]
            info = {
                "torch_built_against": torch.__version__.split("+")[0],
                "torch_target_version": "2.10",
                "cuda": torch.version.cuda if "fusedops._C_cuda" in names else None,
                "nvcc": os.environ.get("FUSEDOPS_NVCC_VERSION"),
                "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST") if "fusedops._C_cuda" in names else None,
                "debug": _flag("FUSEDOPS_DEBUG") in ("1", "true", "yes"),
                "git_commit": _git_commit(),
            }
            target = Path(self.get_ext_fullpath("fusedops._C")).parent / "_build_info.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(info, indent=2) + "\n")

    return BuildExtensionWithInfo.with_options(use_ninja=True)


#: The commands that compile, and need torch. The others (``sdist``, ``egg_info``, ``dist_info``) only write files:
#: without torch installed they run with no extension (the sdist's sources come from MANIFEST.in), so the sdist is
#: written without the CUDA torch. With torch installed nothing changes.
COMPILING = {"build", "build_ext", "bdist_wheel", "bdist", "bdist_egg", "install", "develop", "editable_wheel"}
WITH_EXTENSIONS = importlib.util.find_spec("torch") is not None or bool(COMPILING & set(sys.argv[1:]))

setup(
    packages=find_packages("package"),
    package_dir={"": "package"},
    ext_modules=extensions() if WITH_EXTENSIONS else [],
    cmdclass={"build_ext": build_ext_class()} if WITH_EXTENSIONS else {},
    options={
        **({"bdist_wheel": {"py_limited_api": "cp310"}} if LIMITED_API else {}),
        # Separate build folders keep release, debug and dev objects apart.
        **({"build": {"build_base": os.environ["FUSEDOPS_BUILD_DIR"]}} if os.environ.get("FUSEDOPS_BUILD_DIR") else {}),
    },
)
