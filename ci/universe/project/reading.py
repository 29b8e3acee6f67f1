"""A project's files to its ``[tool.cuda-ext-farm]`` table: ``pyproject.toml`` in the project's folder, or a
separate file (``--config FILE``) holding the same table (or its keys at the top level), for a project you cannot
edit. The table is then validated (``validation``); a CMake project must find torch."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ci.universe import build_files
from ci.universe.project import ProjectConfig
from ci.universe.project.validation import parse
from ci.universe.tomlvalues import TABLE, ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - nox brings tomli on 3.10
    import tomli as tomllib


def load(project: Path | str | None = None, config: Path | str | None = None) -> ProjectConfig:
    """Read and validate the configuration of the project at ``project`` (default: the current folder, as
    cibuildwheel's; the command line has already made a relative path absolute against the caller's folder)."""
    root = Path(project).expanduser() if project else Path.cwd()
    if not root.exists():
        raise ConfigError("project folder does not exist", root, "pass the folder that holds its pyproject.toml")
    if not root.is_dir():
        raise ConfigError("project path is not a folder", root, "pass the folder that holds its pyproject.toml")
    root = root.resolve()
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() and not (root / "setup.py").is_file():
        raise ConfigError(
            "no pyproject.toml or setup.py in the project folder", root,
            "pass the root of a Python extension project (--project DIR)",
        )
    data: dict[str, Any] = _read_toml(pyproject) if pyproject.is_file() else {}
    source = pyproject
    # With --config the project's own pyproject.toml is only read for [project] (name, requires-python).
    table = _farm_table(data, pyproject) if config is None else None
    if config is not None:
        source = Path(config).expanduser().resolve()
        if not source.is_file():
            raise ConfigError("configuration file does not exist", source, "pass an existing TOML file to --config")
        extra = _read_toml(source)
        table = _farm_table(extra, source) if "tool" in extra else extra
        if table is None:
            raise ConfigError(f"the configuration file has no [tool.{TABLE}] table", source,
                              f"write the keys under [tool.{TABLE}], or at the top level of the file")
    if table is None:
        if not pyproject.is_file():
            raise ConfigError(
                "the project has no pyproject.toml", root,
                f"add one with a [tool.{TABLE}] table (at least name = \"...\") or pass --config FILE",
            )
        table = {}
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.{TABLE}] must be a table", type(table).__name__, "write it as a TOML table")
    parsed = parse(table, root=root, source=source, pyproject=data)
    no_torch = build_files.cmake_without_torch(root, data)
    if no_torch is not None:
        backend, top = no_torch
        raise ConfigError(f"the project builds with CMake ({backend}) but its CMakeLists.txt has no "
                          "find_package(Torch)", top, "add find_package(Torch REQUIRED) with "
                          "torch.utils.cmake_prefix_path on CMAKE_PREFIX_PATH (README: a CMake project), then link "
                          "the torch target")
    return parsed


def _farm_table(data: Mapping[str, Any], source: Path) -> Any:
    """The farm's table of a TOML document; a near miss (``[tool.cuda_ext_farm]``) is an error, not silence."""
    tools = data.get("tool", {})
    if not isinstance(tools, dict):
        return None
    if TABLE in tools:
        return tools[TABLE]
    near = difflib.get_close_matches(TABLE, [str(k) for k in tools], n=1, cutoff=0.75)
    near += [k for k in tools if str(k).replace("_", "-").lower() == TABLE and k not in near]
    if near:
        raise ConfigError(f"{source.name} has [tool.{near[0]}], not [tool.{TABLE}]", near[0],
                          f"rename the table to [tool.{TABLE}]")
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("malformed TOML", f"{path}: {exc}", "fix the syntax at that line") from None
    except OSError as exc:
        raise ConfigError("cannot read the configuration", path, f"{exc.strerror}; check its permissions") from None
