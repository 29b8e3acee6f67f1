"""The files a project's build backend reads, found without running anything.

* setuptools (``setuptools.build_meta``, a legacy ``setup.py``, or an in-tree backend around them): ``setup.py``,
  ``setup.cfg`` and ``pyproject.toml``; when ``setup.py`` runs CMake itself (a ``CMakeBuild`` command class), the
  CMake files reachable from the top ``CMakeLists.txt`` too;
* CMake backends (scikit-build-core, py-build-cmake): ``pyproject.toml`` and the ``CMakeLists.txt`` files reachable
  from the top one (``cmake.source-dir``) through ``add_subdirectory`` and ``include``.

An ``examples/`` or ``tests/`` tree that no ``add_subdirectory`` names is not the build's; one named inside an
``if()`` block (``if(BUILD_EXAMPLES)``) is reached only when that option is on: :attr:`BuildFile.conditional`.
Vendored folders (``third_party/``, ...) are left out even when reached: their targets compile with their own
settings, not the extension's. Readers: ``standard`` (the C++ standard a build asks for) and ``preflight`` (whether
a submodule that is not checked out is one the build reads).

:func:`compiled_sources`: the C, C++ and CUDA files the build compiles, as these files name them, and the
project's headers those include (``preflight``: a stable-ABI project's sources hold no classic extension's header).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ci.universe.build_files import CMAKE_BACKENDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - nox brings tomli on 3.10
    import tomli as tomllib

#: Folders that hold build output or vendored code (whose own settings are not the extension's).
SKIPPED = frozenset({"build", "dist", "third_party", "third-party", "thirdparty", "3rdparty", "external", "extern",
                     "vendor", "node_modules", "wheelhouse", "__pycache__"})
#: ``pyproject.toml`` tables a backend reads (the rest is other tools' configuration: pytest, ruff, ...).
BACKEND_TABLES = ("build-system", "project", "tool.setuptools", "tool.scikit-build", "tool.py-build-cmake",
                  "tool.distutils")


@dataclasses.dataclass(frozen=True)
class BuildFile:
    """One file the backend reads: its path, as shown to the user (relative to the project), and whether it is
    reached only through an ``if()`` block of a CMake file."""

    path: Path
    shown: str
    conditional: bool = False

    def text(self) -> str:
        """What the backend reads of the file: all of it, but of ``pyproject.toml`` only its own tables (other
        lines are blank, so line numbers hold); "" when it cannot be read."""
        try:
            text = self.path.read_text(errors="replace")
        except OSError:
            return ""
        return backend_tables(text) if self.path.name == "pyproject.toml" else text


@dataclasses.dataclass(frozen=True)
class Command:
    """One CMake command: its name (lower case), arguments (quotes removed) and line."""

    name: str
    args: tuple[str, ...]
    line: int


def backend_tables(text: str) -> str:
    """``pyproject.toml``'s lines in the backend's tables (:data:`BACKEND_TABLES`), others blank."""
    table, kept = "", []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            table = stripped.strip("[] ")
        key = stripped.split("=", 1)[0].strip()
        full = f"{table}.{key}" if table else key
        keep = not stripped.startswith(("[", "#")) and full.startswith(BACKEND_TABLES)
        kept.append(line if keep else "")
    return "\n".join(kept)


def read_pyproject(root: Path) -> dict[str, Any]:
    try:
        with (root / "pyproject.toml").open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def uses_cmake_backend(root: Path, pyproject: dict[str, Any] | None = None) -> bool:
    backend = _get(pyproject if pyproject is not None else read_pyproject(root), "build-system", "build-backend")
    return isinstance(backend, str) and backend.split(".")[0].split(":")[0] in CMAKE_BACKENDS


def cmake_source_dir(root: Path, pyproject: dict[str, Any]) -> Path:
    source = _get(pyproject, "tool", "scikit-build", "cmake", "source-dir")
    return root / source if isinstance(source, str) else root


def build_files(root: Path) -> list[BuildFile]:
    """The files the project's build backend reads, in a stable order (configuration first, then CMake files)."""
    pyproject = read_pyproject(root)
    found = [BuildFile(root / name, name) for name in ("setup.py", "setup.cfg", "pyproject.toml")
             if (root / name).is_file()]
    if uses_cmake_backend(root, pyproject):
        found = [f for f in found if f.shown == "pyproject.toml"]
        return found + cmake_files(root, cmake_source_dir(root, pyproject))
    try:
        setup = (root / "setup.py").read_text(errors="replace")
    except OSError:
        setup = ""
    if re.search(r"\bcmake\b", setup, re.IGNORECASE):  # a setup.py that runs CMake on the project's top file
        found += cmake_files(root, root)
    return found


# --- CMake files -------------------------------------------------------------------------------------------------

_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"|\[(=*)\[(.*?)\]\2\]|([^\s()"#]+|[()])', re.DOTALL)


def commands(text: str) -> Iterator[Command]:
    """The commands of a CMake file (``name(args)``), comments left out. A hand-written reader because no
    maintained Python library parses CMake's language; it knows quoted, bracket and unquoted arguments, nested
    parentheses and line and bracket comments, which is all the callers need."""
    text = re.sub(r"#\[(=*)\[.*?\]\1\]", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)
    head = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(", re.MULTILINE)
    pos = 0
    while (match := head.search(text, pos)) is not None:
        line = text.count("\n", 0, match.start()) + 1
        args: list[str] = []
        depth, i = 1, match.end()
        while depth and i < len(text):
            if text[i] == "#":  # a line comment inside the arguments
                i = text.find("\n", i) if "\n" in text[i:] else len(text)
                continue
            if text[i].isspace():
                i += 1
                continue
            arg = _ARG.match(text, i)
            if arg is None:
                i += 1
                continue
            value = arg.group(1) if arg.group(1) is not None else arg.group(3) if arg.group(3) is not None \
                else arg.group(4)
            if arg.group(4) == "(":
                depth += 1
            elif arg.group(4) == ")":
                depth -= 1
            if depth:
                args.append(value)
            i = arg.end()
        yield Command(match.group(1).lower(), tuple(args), line)
        pos = i


def _expand(value: str, here: Path, top: Path) -> Path | None:
    """A path argument with CMake's directory variables filled in, relative to ``here``; None when it names
    another variable (its value is not known without running CMake)."""
    known = {"CMAKE_CURRENT_SOURCE_DIR": here, "CMAKE_CURRENT_LIST_DIR": here, "PROJECT_SOURCE_DIR": top,
             "CMAKE_SOURCE_DIR": top}
    for name, folder in known.items():
        value = value.replace("${" + name + "}", str(folder))
    if "${" in value or "$<" in value:
        return None
    path = Path(value)
    return path if path.is_absolute() else here / path


def _inside(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` (posix) when it lies inside it and outside vendored folders, else None."""
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    parts = rel.parts[:-1]
    if any(p in SKIPPED or p.startswith(".") for p in parts):
        return None
    return rel.as_posix()


def cmake_files(root: Path, top: Path) -> list[BuildFile]:
    """The CMake files reachable from ``top``'s CMakeLists.txt: itself, ``add_subdirectory`` folders' and
    ``include``d files (``.cmake`` paths, or modules found on the ``CMAKE_MODULE_PATH`` folders the files add)."""
    found: dict[str, BuildFile] = {}
    module_path: list[Path] = []
    queue = [(top / "CMakeLists.txt", False)]
    while queue:
        path, conditional = queue.pop(0)
        shown = _inside(path, root)
        if shown is None or not path.is_file() or (shown in found and (conditional or not found[shown].conditional)):
            continue
        found[shown] = BuildFile(path, shown, conditional)
        here, depth = path.parent, 0
        for command in commands(path.read_text(errors="replace")):
            depth += {"if": 1, "endif": -1}.get(command.name, 0)
            inner = conditional or depth > 0
            if command.name == "add_subdirectory" and command.args:
                folder = _expand(command.args[0], here, top)
                if folder is not None:
                    queue.append((folder / "CMakeLists.txt", inner))
            elif command.name == "include" and command.args:
                queue += [(p, inner) for p in _included(command.args[0], here, top, module_path)]
            elif command.name in ("list", "set") and "CMAKE_MODULE_PATH" in command.args[:2]:
                values = command.args[2:] if command.name == "list" else command.args[1:]
                module_path += [p for p in (_expand(v, here, top) for v in values if "CMAKE_MODULE_PATH" not in v)
                                if p is not None]
    return sorted(found.values(), key=lambda f: (f.shown.count("/"), f.shown))


def _included(name: str, here: Path, top: Path, module_path: list[Path]) -> list[Path]:
    if name.endswith(".cmake") or "/" in name or "${" in name:
        path = _expand(name, here, top)
        return [path] if path is not None else []
    return [folder / f"{name}.cmake" for folder in module_path if (folder / f"{name}.cmake").is_file()][:1]


# --- the sources the build compiles --------------------------------------------------------------------------------

#: Files a compiler is given; headers are reached through their ``#include`` lines.
COMPILED = (".c", ".cc", ".cpp", ".cxx", ".cu")
SOURCES = (*COMPILED, ".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl")
#: Folders whose sources a build compiles only when a build file names them.
NOT_BUILT = frozenset({"tests", "test", "examples", "example", "benchmarks", "benchmark", "bench", "docs", "doc"})
_WORD = re.compile(r"[\w./${}*+-]+")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.MULTILINE)


def compiled_sources(root: Path, files: Sequence[str]) -> list[str]:
    """The project's C, C++ and CUDA files the build compiles (``files``: the project's, relative to ``root``) and
    the project's headers they include, transitively: the sources the build files (:func:`build_files`) name as a
    path, a glob (``csrc/*.cu``) or a folder of them (``os.path.join("csrc", "kernels")``: its sources, below it
    too). When they name none (a list the script computes in a way not read here): every source of the project but
    vendored ones and those under ``tests/``, ``examples/``, ``benchmarks/``, ``docs/``."""
    own = sorted(f for f in files if f.endswith(SOURCES))
    named, folders = _named(root, own)
    if not named:
        named = [f for f in own if f.endswith(COMPILED) and not any(
            part in SKIPPED or part in NOT_BUILT or part.startswith(".") for part in f.split("/")[:-1])]
    present, seen, queue = set(own), set(named), list(named)
    while queue:
        name = queue.pop()
        try:
            text = (root / name).read_text(errors="replace")[:500_000]
        except OSError:
            continue
        here = name.rpartition("/")[0]
        for header in INCLUDE.findall(text):
            found = next((p for base in (here, "", *folders) if (p := _join(base, header)) in present), None)
            if found is not None and found not in seen:
                seen.add(found)
                queue.append(found)
    return sorted(seen)


def _join(base: str, name: str) -> str:
    return os.path.normpath(f"{base}/{name}" if base else name).replace(os.sep, "/")


def _named(root: Path, own: Sequence[str]) -> tuple[list[str], list[str]]:
    """The sources the build files name (a path, a glob, a folder's compiled sources) and the folders they name."""
    present = set(own)
    folders = {f.rsplit("/", i)[0] for f in own for i in range(1, f.count("/") + 1)}
    named: list[str] = []
    named_folders: list[str] = []
    for build in build_files(root):
        here = build.shown.rpartition("/")[0]
        for word in dict.fromkeys(_WORD.findall(build.text())):
            word = re.sub(r"^(?:\$\{\w+\}/)+", "", word).rstrip("/")
            for path in dict.fromkeys((_join(here, word), _join("", word))):
                if "*" in path:
                    pattern = re.compile(re.escape(path).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*"))
                    named += [f for f in own if f.endswith(COMPILED) and pattern.fullmatch(f)]
                elif path in present:
                    named.append(path)
                elif path in folders:
                    named_folders.append(path)
                    named += [f for f in own if f.startswith(path + "/") and f.endswith(COMPILED)]
    return list(dict.fromkeys(named)), list(dict.fromkeys(named_folders))
