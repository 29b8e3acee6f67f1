"""CMake's CUDA compiler and architectures on every route: the nvcc of ci/nvcc/shim.py's folder (the nvcc wrapper
in front of the toolkit's nvcc) and the farm's list as CMake writes it.

CMake runs ``CMAKE_CUDA_COMPILER``, never ``PYTORCH_NVCC``: ``CUDACXX`` names it where a project enables CUDA without
naming a compiler, and in a CMake build ``-DCMAKE_CUDA_COMPILER`` appended to ``CMAKE_ARGS`` (scikit-build-core
splits it as a shell does) names it where a project would take ``$ENV{CUDA_HOME}/bin/nvcc``. ``CUDAARCHS``
initialises ``CMAKE_CUDA_ARCHITECTURES`` to the farm's list (torch's CMake package sets it OFF and adds
``TORCH_CUDA_ARCH_LIST``'s flags itself). A CMake build keeps the real ``CUDA_HOME``: CMake takes the toolkit's
library folders from under it, and their paths reach the library's bytes. What the caller or the project's
build-env names (a compiler, architectures, a toolkit) stays theirs.

Each route renders these for the paths its build sees: ``ci/linux/host.py`` (host, cross, develop),
``ci/linux/container.py`` (the folder made in the container before the build) and ``windows/cibw.py``
(``bin\\nvcc.exe``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import PureWindowsPath

from ci.builds import arch_flags
from ci.nvcc import wrapper
from ci.toolchain import envs
from ci.universe.targets import Target

#: Build requirements of CMake builds.
CMAKE_BUILDS = ("cmake", "scikit-build", "scikit-build-core", "py-build-cmake", "meson-python")
#: The variables a caller or a project may set that this module would otherwise set or add to.
ASKED = ("CUDAARCHS", "CUDACXX", "CMAKE_ARGS")


def is_cmake_build(target: Target) -> bool:
    """Whether the project builds with CMake (:data:`CMAKE_BUILDS` among its build requirements)."""
    return any(envs.requirement_name(r) in CMAKE_BUILDS for r in target.project.build_requires)


def asked(requested: Mapping[str, str], caller: Mapping[str, str]) -> dict[str, str]:
    """What the build asks for of :data:`ASKED`: the project's build-env (in ``requested``), else the caller's
    (where the caller's environment reaches the build: the host routes, cibuildwheel's steps on Windows)."""
    return {name: requested.get(name) or caller.get(name) or "" for name in ASKED}


def architectures(target: Target, asked_for: Mapping[str, str]) -> dict[str, str]:
    """``CUDAARCHS``: the list torch compiles for (:func:`arch_flags.arch_list_of`) as CMake writes it, unless the
    build names its own. Nothing in a CPU build."""
    if target.cpu or asked_for.get("CUDAARCHS"):
        return {}
    return {"CUDAARCHS": wrapper.cmake_architectures(arch_flags.arch_list_of(target))}


def compiler(nvcc: str, asked_for: Mapping[str, str], cmake: bool, *, windows: bool = False) -> dict[str, str]:
    """``CUDACXX``: ``nvcc`` (the shim's, as the build sees it), and in a CMake build (``cmake``)
    ``-DCMAKE_CUDA_COMPILER`` after the build's own ``CMAKE_ARGS``; nothing where the build names a compiler.
    ``windows``: the ``-D`` value with forward slashes (a backslash in a CMake string is an escape)."""
    if asked_for.get("CUDACXX") or "CMAKE_CUDA_COMPILER" in asked_for.get("CMAKE_ARGS", ""):
        return {}
    env = {"CUDACXX": nvcc}
    if cmake:
        own = asked_for.get("CMAKE_ARGS", "").strip()
        path = PureWindowsPath(nvcc).as_posix() if windows else nvcc
        env["CMAKE_ARGS"] = f"{own} {shlex.quote(f'-DCMAKE_CUDA_COMPILER={path}')}".strip()
    return env


def front_env(target: Target, folder: str, nvcc: str, asked_for: Mapping[str, str], *,
              windows: bool = False) -> dict[str, str]:
    """A route's variables for the shim's ``folder`` whose compiler is ``nvcc`` (both as the build sees them):
    ``CUDA_HOME`` naming the folder but in a CMake build (setuptools without ninja runs ``CUDA_HOME/bin/nvcc``),
    CMake's compiler (:func:`compiler`) and architectures (:func:`architectures`)."""
    cmake = is_cmake_build(target)
    return ({} if cmake else {"CUDA_HOME": folder}) | compiler(nvcc, asked_for, cmake, windows=windows) | \
        architectures(target, asked_for)
