"""The ``[tool.cuda-ext-farm]`` table to a :class:`~ci.universe.project.ProjectConfig`: every key validated
once, in one order; an unknown key or a bad value stops with one line naming the key (``tomlvalues`` reads each
value by its type)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from ci.universe import build_files, tomlvalues
from ci.universe.project import (
    BUILD_PLACEHOLDERS,
    COMMAND_NAMES,
    COMMAND_PLACEHOLDERS,
    DEFAULT_BUILD_ENV,
    DEFAULT_FREE_THREADED,
    DEFAULT_MAX_WHEEL_SIZE,
    LINUX_ARCHS,
    OSES,
    SCHEMA_VERSION,
    Commands,
    ProjectConfig,
    PythonAbi,
)
from ci.universe.project.keys import TABLE_KEYS
from ci.universe.tomlvalues import TABLE, ConfigError

#: The keys of the table (declared with their meaning in ``keys``, where docs/options.md comes from).
_KEYS = TABLE_KEYS


def parse(table: Mapping[str, Any], *, root: Path, source: Path, pyproject: Mapping[str, Any]) -> ProjectConfig:
    """Validate ``table`` (the ``[tool.cuda-ext-farm]`` mapping) into a :class:`ProjectConfig`; the keys are
    judged in one order, so a table with several bad values is always refused for the same one."""
    _check_keys(table, source)
    project_table = pyproject.get("project", {}) if isinstance(pyproject.get("project"), dict) else {}
    name, import_name = _names(table, project_table, source)
    abi = tomlvalues.choice(table, "abi", ("classic", "stable"), "classic")
    limited_api_floor = build_files.limited_api_floor(root, pyproject)
    python_abi = _python_abi(table, abi, limited_api_floor)
    torch, torch_spec = tomlvalues.versions(table, "torch", r"\d+\.\d+(\.\d+)?")
    # Any X.Y: a Python no torch release has wheels for (2.7) is refused with the range they cover, by the targets.
    python, python_spec = tomlvalues.versions(table, "python", r"\d+\.\d+t?")
    free_threaded = _free_threaded(table, python)
    requires_python = _requires_python(project_table)
    cuda = tomlvalues.string_list(table, "cuda", ())
    cuda_archs = _arch_list(table, "cuda-archs", "the target torch's own list")
    extra_cuda_archs = _arch_list(table, "extra-cuda-archs", "none added")
    # build-env adds to the default (FORCE_CUDA=1): a project's own variable does not drop it (FORCE_CUDA = "0" does).
    build_env = {**DEFAULT_BUILD_ENV, **tomlvalues.string_table(table, "build-env", {}, BUILD_PLACEHOLDERS)}
    cpu_env = tomlvalues.string_table(table, "cpu-env", {}, BUILD_PLACEHOLDERS)
    debug_env = tomlvalues.string_table(table, "debug-env", {}, BUILD_PLACEHOLDERS)
    cuda_libraries = tomlvalues.string_list(table, "cuda-libraries", ("*",))
    cpu_libraries = tomlvalues.string_list(table, "cpu-libraries", ())
    toolkit_libraries = _toolkit_libraries(table)
    archs = _archs(table)
    commands = _commands(table, import_name)
    return ProjectConfig(
        root=root, source=source, name=name, import_name=import_name, abi=abi, python_abi=python_abi,
        torch=torch, torch_spec=torch_spec, python=python, python_spec=python_spec,
        requires_python=requires_python, cuda=cuda, cuda_archs=cuda_archs, extra_cuda_archs=extra_cuda_archs,
        build_env=build_env,
        cpu_env=cpu_env, debug_env=debug_env, cuda_libraries=cuda_libraries, cpu_libraries=cpu_libraries,
        toolkit_libraries=toolkit_libraries, commands=commands, archs=archs,
        oses=tomlvalues.subset(table, "os", OSES, OSES, required="linux"),
        build_requires=_build_requires(pyproject),
        max_wheel_size=tomlvalues.size(table, "max-wheel-size", DEFAULT_MAX_WHEEL_SIZE),
        strip_debug=tomlvalues.boolean(table, "strip-debug", True),
        compress_fatbin=tomlvalues.boolean(table, "compress-fatbin", True),
        cuda_available_in_build=tomlvalues.boolean(table, "cuda-available-in-build", True),
        cxx_standard_check=tomlvalues.boolean(table, "cxx-standard-check", True),
        variant_wheels=tomlvalues.boolean(table, "variant-wheels", False),
        pypi_cuda_majors=_pypi_cuda_majors(table, abi, cuda_libraries),
        older_majors_sass=tomlvalues.choice(table, "older-majors-sass", ("per-generation", "torch"), "per-generation"),
        arch_flags=tomlvalues.choice(table, "project-arch-flags", ("refuse", "replace", "keep"), "refuse"),
        test_requires=tomlvalues.requirements(table, "test-requires"),
        test_extras=tomlvalues.extras(table, "test-extras"),
        limited_api_floor=limited_api_floor, free_threaded=free_threaded,
    )


def _check_keys(table: Mapping[str, Any], source: Path) -> None:
    """Only the keys this farm knows, in the schema version it reads."""
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown key in [tool.{TABLE}] of {source.name}", unknown[0], _nearest(unknown[0], _KEYS))
    version = table.get("version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ConfigError(f"[tool.{TABLE}] version is not supported", version,
                          f"this farm reads version = {SCHEMA_VERSION}; upgrade the farm or fix the key")


def _nearest(given: str, known: Iterable[str], what: str = "keys") -> str:
    """The fix for an unknown name: the nearest known one, else the known ones."""
    near = difflib.get_close_matches(given, sorted(known), n=1, cutoff=0.6)
    if near:
        return f"did you mean {near[0]}? (or remove it)"
    return f"known {what} are {', '.join(sorted(known))}"


def _arch_list(table: Mapping[str, Any], key: str, default: str) -> str | None:
    """``cuda-archs`` / ``extra-cuda-archs``: a list of architectures; an empty one is a mistake, never the default."""
    value: str | None = tomlvalues.string(table, key, None)
    if value is not None and not value.replace(";", " ").replace(",", " ").strip():
        raise ConfigError(f"[tool.{TABLE}] {key} is empty", repr(value),
                          f'list architectures ({key} = "8.0;9.0+PTX"), or remove the key ({default})')
    return value


def _names(table: Mapping[str, Any], project_table: Mapping[str, Any], source: Path) -> tuple[str, str]:
    """The distribution's name (the table's, else ``[project] name``) and the module its smoke test imports."""
    where = f"[tool.{TABLE}]"
    name = tomlvalues.string(table, "name", project_table.get("name"))
    if not name:
        raise ConfigError(f"the project has no name ({where} name or [project] name)", source,
                          f'add name = "your-package" to {where}')
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name):
        raise ConfigError(f"{where} name is not a valid distribution name", name, "use letters, digits, . _ -")
    import_name = tomlvalues.string(table, "import-name", canonicalize_name(name).replace("-", "_"))
    if not import_name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", import_name):
        raise ConfigError(f"{where} import-name is not a Python module name", import_name, "use a dotted module name")
    return name, import_name


def _python_abi(table: Mapping[str, Any], abi: str, limited_api_floor: str | None) -> PythonAbi:
    """``python-abi``: abi3 for a stable-ABI project, and wherever the build says py_limited_api (the project
    describes itself)."""
    python_abi: PythonAbi = tomlvalues.choice(table, "python-abi", ("per-python", "abi3"),
                                              "abi3" if abi == "stable" or limited_api_floor else "per-python")
    if abi == "stable" and python_abi != "abi3":
        raise ConfigError(f"[tool.{TABLE}] python-abi must be abi3 for a stable-ABI project", python_abi,
                          'remove python-abi or set it to "abi3"')
    return python_abi


def _requires_python(project_table: Mapping[str, Any]) -> SpecifierSet | None:
    """``[project] requires-python`` (None: not declared)."""
    if not isinstance(project_table.get("requires-python"), str):
        return None
    try:
        return SpecifierSet(project_table["requires-python"])
    except InvalidSpecifier:
        raise ConfigError("[project] requires-python is not a version specifier",
                          project_table["requires-python"], 'write it like ">=3.10"') from None


def _free_threaded(table: Mapping[str, Any], python: tuple[str, ...]) -> bool:
    """``free-threaded``: the default's switch; a ``python`` list is exact, so the key set beside one must agree with
    it (a list that names ``3.13t`` under ``free-threaded = false``, or none under ``true``, would be ignored)."""
    on = tomlvalues.boolean(table, "free-threaded", DEFAULT_FREE_THREADED)
    if "free-threaded" not in table or not python:
        return on
    named = [p for p in python if p.endswith("t")]
    if named and not on:
        raise ConfigError(f"[tool.{TABLE}] python names a free-threaded CPython but free-threaded = false",
                          ", ".join(named), "drop those from python, or drop free-threaded = false")
    if on and not named:
        raise ConfigError(f"[tool.{TABLE}] free-threaded = true beside a python list that names no free-threaded "
                          "CPython (a python list is exact)", ", ".join(python),
                          'add the free-threaded ones to python ("3.13t"), or drop python or free-threaded')
    return on


def _toolkit_libraries(table: Mapping[str, Any]) -> tuple[str, ...]:
    """``toolkit-libraries``: CUDA libraries by the name the linker knows them by."""
    toolkit_libraries = tomlvalues.string_list(table, "toolkit-libraries", ())
    bad = [lib for lib in toolkit_libraries if not re.fullmatch(r"[a-z][a-z0-9_]*", lib)]
    if bad:
        raise ConfigError(f"[tool.{TABLE}] toolkit-libraries names a library by something else than its name", bad[0],
                          'write the library as the linker names it, without lib or .so: ["cublas"]')
    return toolkit_libraries


def _archs(table: Mapping[str, Any]) -> tuple[str, ...]:
    """``archs``: some of the Linux CPU architectures the farm builds, at least one."""
    archs = tomlvalues.string_list(table, "archs", LINUX_ARCHS)
    unknown_archs = [a for a in archs if a not in LINUX_ARCHS]
    if unknown_archs or not archs:
        raise ConfigError(f"[tool.{TABLE}] archs names an architecture the farm does not build",
                          unknown_archs[0] if unknown_archs else "[]", f"use some of {', '.join(LINUX_ARCHS)}")
    return archs


def _commands(table: Mapping[str, Any], import_name: str) -> Commands:
    """``[tool.cuda-ext-farm.commands]``; the smoke command defaults to importing the module, gpu-test to test."""
    commands_table = table.get("commands", {})
    if not isinstance(commands_table, dict):
        raise ConfigError(f"[tool.{TABLE}] commands must be a table", type(commands_table).__name__,
                          f"write [tool.{TABLE}.commands] with smoke/test/... keys")
    unknown = sorted(set(commands_table) - set(COMMAND_NAMES))
    if unknown:
        raise ConfigError(f"unknown key in [tool.{TABLE}.commands]", unknown[0],
                          _nearest(unknown[0], COMMAND_NAMES, "commands"))
    parsed = {key: tomlvalues.command(commands_table, key, COMMAND_PLACEHOLDERS) for key in COMMAND_NAMES}
    smoke = parsed["smoke"] or ("python", "-c", f"import {import_name}")
    return Commands(
        smoke=smoke, test=parsed["test"], gpu_test=parsed["gpu-test"] or parsed["test"],
        sanitizer=parsed["sanitizer"], multi_gpu=parsed["multi-gpu"], bench=parsed["bench"],
    )


def _pypi_cuda_majors(table: Mapping[str, Any], abi: str, cuda_libraries: tuple[str, ...]) -> bool:
    """``pypi-cuda-majors``: only a stable-ABI project (one binary per major serves every torch of that major)
    that names its CUDA libraries (they are what is built per major; the rest of the wheel is shared)."""
    on = tomlvalues.boolean(table, "pypi-cuda-majors", False)
    if on and abi != "stable":
        raise ConfigError(f"[tool.{TABLE}] pypi-cuda-majors needs a stable-ABI project", f"abi = {abi!r}",
                          'set abi = "stable" (a classic wheel is bound to one torch, so to one CUDA major) or drop '
                          "pypi-cuda-majors")
    if on and ("cuda-libraries" not in table or cuda_libraries in ((), ("*",))):
        raise ConfigError(f"[tool.{TABLE}] pypi-cuda-majors needs cuda-libraries", "cuda-libraries",
                          'name the libraries that hold CUDA code (cuda-libraries = ["pkg/_C_cuda.*"]); the rest of '
                          "the wheel is shared by every major")
    return on


def _build_requires(pyproject: Mapping[str, Any]) -> tuple[str, ...]:
    from packaging.requirements import InvalidRequirement, Requirement

    requires = pyproject.get("build-system", {}).get("requires", [])
    kept: list[str] = []
    for item in requires if isinstance(requires, list) else []:
        try:
            req = Requirement(str(item))
        except InvalidRequirement:
            raise ConfigError("[build-system] requires has an invalid requirement", item,
                              "fix it (PEP 508 syntax)") from None
        if canonicalize_name(req.name) != "torch":
            kept.append(str(req))
    return tuple(kept)
