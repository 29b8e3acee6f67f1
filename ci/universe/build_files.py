"""What a project's own build files say, read without running them: whether a CMake build finds torch
(``[build-system]``, ``CMakeLists.txt``), and the abi3 floor its ``bdist_wheel`` options, setup.cfg, setup.py or
scikit-build-core's ``wheel.py-api`` ask for. ``ci/universe/project/`` asks both while it reads the project
(and raises the error: this module imports nothing of the farm)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

#: Build backends that build a CMakeLists.txt (the package of ``[build-system] build-backend``).
CMAKE_BACKENDS = ("scikit_build_core", "py_build_cmake")


def cmake_without_torch(root: Path, pyproject: Mapping[str, Any]) -> tuple[str, Path] | None:
    """The build backend and top ``CMakeLists.txt`` of a project that runs CMake but never finds torch with
    ``find_package(Torch)`` (in its top CMakeLists.txt, or a CMakeLists.txt / .cmake file of a subfolder a few
    levels down); None when the project does not build with CMake or finds torch. Without it the library links no
    torch and the build fails late, or builds something the audit refuses."""
    system = pyproject.get("build-system")
    backend = system.get("build-backend") if isinstance(system, dict) else None
    if not isinstance(backend, str) or backend.split(".")[0].split(":")[0] not in CMAKE_BACKENDS:
        return None
    tool = pyproject.get("tool")
    skbuild = tool.get("scikit-build") if isinstance(tool, dict) else None
    cmake = skbuild.get("cmake") if isinstance(skbuild, dict) else None
    source_dir = cmake.get("source-dir") if isinstance(cmake, dict) else None
    source = root / source_dir if isinstance(source_dir, str) else root
    finds = re.compile(r"\bfind_package\s*\(\s*Torch\b", re.IGNORECASE)
    for folder, dirs, names in os.walk(source):
        depth = len(Path(folder).relative_to(source).parts)
        dirs[:] = [] if depth >= 3 else [d for d in dirs if not d.startswith((".", "_skbuild")) and d != "build"]
        for name in names:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                try:
                    text = (Path(folder) / name).read_text(errors="replace")
                except OSError:
                    continue
                if finds.search("\n".join(line.split("#")[0] for line in text.splitlines())):
                    return None
    return backend, source / "CMakeLists.txt"


#: ``py_limited_api = "cp39"`` / ``py_limited_api: cp39`` / ``"py_limited_api": "cp39"`` (bdist_wheel's option).
_LIMITED_API = re.compile(r"""py[_-]limited[_-]api['"]?\s*[:=]\s*['"]?cp3(\d+)\b""")


def limited_api_floor(root: Path, pyproject: Mapping[str, Any]) -> str | None:
    """The CPython of ``bdist_wheel``'s ``py_limited_api`` (the ``cpXY`` of an abi3 wheel's tag), read from
    ``[tool.distutils.bdist_wheel]``, setup.cfg or setup.py without running anything; None when none says it."""
    tool = pyproject.get("tool")
    distutils = tool.get("distutils") if isinstance(tool, dict) else None
    bdist = distutils.get("bdist_wheel") if isinstance(distutils, dict) else None
    texts = [f"py_limited_api = {v!r}" for k, v in (bdist.items() if isinstance(bdist, dict) else ())
             if k.replace("-", "_") == "py_limited_api" and isinstance(v, str)]
    skbuild = tool.get("scikit-build") if isinstance(tool, dict) else None  # scikit-build-core's wheel.py-api
    wheel = skbuild.get("wheel") if isinstance(skbuild, dict) else None
    py_api = wheel.get("py-api") if isinstance(wheel, dict) else None
    if isinstance(py_api, str):
        texts.append(f"py_limited_api = {py_api!r}")
    for name in ("setup.cfg", "setup.py"):
        try:
            texts.append((root / name).read_text(errors="replace"))
        except OSError:
            continue
    for text in texts:
        code = "\n".join(line.split("#")[0] for line in text.splitlines())
        found = _LIMITED_API.search(code)
        if found:
            return f"3.{found.group(1)}"
        # {"py_limited_api": LIMITED_API} with LIMITED_API = "cp39" elsewhere in setup.py
        named = re.search(r"""py_limited_api['"]?\s*[:=]\s*([A-Za-z_]\w*)\b""", code)
        value = re.search(rf"""^\s*{named.group(1)}\s*=\s*['"]cp3(\d+)['"]""", code, re.MULTILINE) if named else None
        if value:
            return f"3.{value.group(1)}"
    return None


def declared_floor(requires_python: SpecifierSet | None) -> str | None:
    """The oldest CPython minor ``requires-python`` admits, read from its lower bound (``>=3.9`` and ``>3.9``
    give ``3.9``: 3.9.1 is admitted); None when it has no lower bound."""
    bounds: list[tuple[int, int]] = []
    for spec in requires_python or ():
        if spec.operator not in (">=", ">", "~=", "=="):
            continue
        try:
            version = Version(spec.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        bounds.append((version.major, version.minor))
    if not bounds:
        return None
    major, minor = max(bounds)
    return f"{major}.{minor}"
