"""Every refusal that needs only the project's source, made before any download, toolkit, build environment,
image or compile: :func:`preflight`, the first call of every build (host, container, ``build-all``, Windows).

* **A build that can compile something** (:func:`check_backend`): a folder with no ``setup.py`` whose build backend
  is setuptools (named, or by default: ``[build-system]`` names none) with no ``[tool.setuptools] ext-modules``, or
  one that writes pure-Python wheels only (flit), stops the build in one line; it would write a wheel with no
  compiled library. An in-tree backend (``backend-path``), a CMake or another backend is left to build: a wheel
  that then holds no library is named after the build, before its repair (``failure/pure.py``).
* **A stable-ABI project's sources** (:func:`check_stable`): ``abi = "stable"`` with a source the build compiles
  (``backend_files.compiled_sources``) that includes pybind11 or ``torch/extension.h`` stops the build in one line:
  such code is bound to one torch and one CPython, which a stable-ABI wheel is not. An include under a
  preprocessor condition (``#ifndef MYEXT_STABLE``) is a warning.
* **Links** (``project_source.read_tree``): a symbolic link to an absolute path or out of the project stops the
  build in one line naming it; in-tree links are made again in the build's copy. One whose target git ignores (so
  the copy does not hold it) is a warning.
* **Submodules**, decided once: a submodule whose folder is empty (a clone without ``--recursive``) stops the build
  when the build uses it, that is when a file the build backend reads names its folder (``include_dirs``,
  ``add_subdirectory``) or a source file of the project includes a header under it (``#include <glm/glm.hpp>`` for
  ``third_party/glm``), unless every header the build includes from it is on the build's include path elsewhere
  (``#include <pybind11/pybind11.h>``: torch's headers carry pybind11; a CUDA build's toolkit carries CCCL's cub
  and thrust) and no build file compiles from it (``add_subdirectory``, a source under it): then it is a warning.
  Any other (a documentation theme, a benchmark's data) is a warning and the build goes on without it. Should a
  compile still miss a header under it, the failure names the submodule (``failure`` ``header``).
* **The C++ standard** (``standard.check``): an older pin than the target torch's on every path of the build.
* **Architecture gates** (``ci/universe/arch_gates/``): each use of ``__CUDA_ARCH__`` in the sources the build
  compiles that the farm cannot read as a comparison with a number is a warning naming its file and line (the SASS
  kept beside torch's list follows the gates it reads), unless the project names its architectures itself.
* The project's keys were validated when the project was read (``ci/universe/project/validation.py``), before any
  target.

Nothing here installs, downloads or writes: a refusal costs the time to list the project's files (seconds on a cold
cache; ``tests/integration/test_preflight_cold.py`` prints it).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from ci import settings
from ci.builds import backend_files, project_source, standard
from ci.errors import UsageError
from ci.log import log
from ci.universe.arch_gates import sources
from ci.universe.targets import Target
from ci.universe.tomlvalues import TABLE

#: Files whose ``#include`` lines say which headers the project's own code needs.
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl")
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
#: Warnings already given in this process (build-all and ``--all`` run the preflight once per target).
_WARNED: set[tuple[str, str]] = set()


def preflight(target: Target) -> None:
    """Refuse, in one line and before anything is installed, a target whose source alone says it cannot build."""
    root = target.project.root
    tree = project_source.read_tree(root)
    check_backend(root, tree.files, target.project.import_name)
    for link, written in tree.links.items():
        if not _holds(tree, _resolved(link, written)):
            _warn_once(root, link, f"the link {link} -> {written} points to what git ignores, so the build's copy "
                       "of the project does not hold it: the link is made in the copy, and dangles there")
    check_submodules(root, tree, cpu=target.cpu)
    standard.check(target)
    if target.project.abi == "stable":
        check_stable(root, tree.files)
    if not target.cpu and not target.project.cuda_archs:
        check_gates(root)


#: Build backends that write pure-Python wheels only.
PURE_BACKENDS = ("flit_core", "flit")
#: A call that compiles C++ when the package is imported (a JIT-only project: ``cuda-ext-farm jit`` runs it).
JIT_LOAD = re.compile(r"cpp_extension\.load(?:_inline)?\s*\(|"
                      r"^[ \t]*from[ \t]+torch\.utils\.cpp_extension[ \t]+import[^\n]*\bload(?:_inline)?\b",
                      re.MULTILINE)


def check_backend(root: Path, files: Sequence[str], import_name: str) -> None:
    """Refuse a folder whose build cannot compile anything (the module's rules): without a setup.py, setuptools
    builds a pure-Python wheel from pyproject.toml alone, and flit never compiles."""
    if (root / "setup.py").is_file():
        return
    pyproject = backend_files.read_pyproject(root)
    system = pyproject.get("build-system")
    system = system if isinstance(system, dict) else {}
    backend = system.get("build-backend")
    top = backend.split(".")[0].split(":")[0] if isinstance(backend, str) else None
    if system.get("backend-path"):
        return
    if top in (None, "setuptools"):
        tool = pyproject.get("tool")
        setuptools = tool.get("setuptools") if isinstance(tool, dict) else None
        if isinstance(setuptools, dict) and setuptools.get("ext-modules"):
            return
        value = "no setup.py, and pyproject.toml names no build backend" if top is None else \
            f"no setup.py, and the build backend {backend} has no [tool.setuptools] ext-modules"
    elif top in PURE_BACKENDS:
        value = f"the build backend {backend} writes pure-Python wheels only"
    else:
        return
    fix = (f'add a setup.py that compiles it: setup(ext_modules=[CUDAExtension("{import_name}._C", ["csrc/ops.cu"])], '
           'cmdclass={"build_ext": BuildExtension}) with torch.utils.cpp_extension; or build with CMake '
           '(build-backend = "scikit_build_core.build" and a CMakeLists.txt)')
    jit = _jit_loader(root, files)
    if jit is not None:
        fix += (f"; a project that compiles when it is imported (torch.utils.cpp_extension.load in {jit}) has no "
                f"wheel to build: run its commands with `{settings.entry('jit', '-- COMMAND')}`")
    raise UsageError("nothing in the project folder compiles an extension", value, fix)


def _jit_loader(root: Path, files: Sequence[str]) -> str | None:
    """The first Python file of the project that compiles with ``torch.utils.cpp_extension.load``, if one does."""
    for name in [f for f in files if f.endswith(".py")][:500]:
        try:
            text = (root / name).read_text(errors="replace")[:200_000]
        except OSError:
            continue
        if JIT_LOAD.search(text):
            return name
    return None


#: Headers of a classic extension: pybind11, and torch's C++ API for Python modules built on it.
CLASSIC_HEADER = re.compile(r"pybind11/.*|torch/(?:extension|python)\.h")


@dataclasses.dataclass(frozen=True)
class Include:
    """An ``#include`` line: its file, line and header, and whether it is under a preprocessor condition."""

    path: str
    line: int
    header: str
    conditional: bool

    def __str__(self) -> str:
        return f"{self.path} line {self.line}: #include <{self.header}>"


def check_stable(root: Path, files: Sequence[str]) -> None:
    """Refuse a stable-ABI project whose compiled sources include a classic extension's header; warn about one
    included under a preprocessor condition (a project that builds either way)."""
    found = [i for name in backend_files.compiled_sources(root, files) for i in includes(root, name)
             if CLASSIC_HEADER.fullmatch(i.header)]
    plain = [i for i in found if not i.conditional]
    if plain:
        more = f"; and {len(plain) - 1} more" if len(plain) > 1 else ""
        raise UsageError(
            'abi = "stable" but a source the build compiles includes a classic extension\'s header',
            f"{plain[0]}{more}",
            "a stable-ABI wheel serves every torch from one build, and pybind11 or torch/extension.h code is bound to "
            f'one torch and one CPython: set abi = "classic" in [tool.{TABLE}] (a wheel per torch and Python), or '
            "port the sources to torch's stable ABI headers (torch/csrc/stable/library.h: STABLE_TORCH_LIBRARY; "
            "torch/csrc/stable/tensor.h)")
    if found:
        _warn_once(root, "classic headers", (
            f'abi = "stable", and {found[0]} is under a preprocessor condition: a build where that condition holds '
            "compiles a classic extension, which a stable-ABI wheel cannot hold (the audit refuses its symbols)"))


_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)[ \t]*(.*)$")


def includes(root: Path, name: str) -> list[Include]:
    """The ``#include`` lines of a file, each marked when it is inside an ``#if``/``#ifdef`` block other than an
    include guard (``#ifndef X_H`` followed by ``#define X_H``)."""
    try:
        lines = (root / name).read_text(errors="replace")[:500_000].splitlines()
    except OSError:
        return []
    directives = [(n, m.group(1), m.group(2).strip()) for n, text in enumerate(lines, 1)
                  if (m := _DIRECTIVE.match(text)) is not None]
    found: list[Include] = []
    stack: list[bool] = []  # per open block: whether it is a condition (not an include guard)
    for i, (number, directive, rest) in enumerate(directives):
        if directive in ("if", "ifdef", "ifndef"):
            guarded = re.fullmatch(r"(?:!\s*defined\s*\(?\s*)?(\w+)\s*\)?", rest) if directive != "ifdef" else None
            following = directives[i + 1] if i + 1 < len(directives) else None
            stack.append(not (guarded and following and following[1] == "define" and
                              following[2].split()[:1] == [guarded.group(1)]))
        elif directive == "endif" and stack:
            stack.pop()
        elif directive == "include" and (header := re.match(r'[<"]([^>"]+)[>"]', rest)) is not None:
            found.append(Include(name, number, header.group(1), any(stack)))
    return found


def check_gates(root: Path) -> None:
    """Warn about each use of the GPU architecture in the compiled sources that ``arch_gates`` cannot read: the
    architectures a build keeps SASS for follow the gates it reads, so one it cannot is said, never dropped."""
    unread = sources.read_project(root).unread
    if not unread:
        return
    places = "; ".join(u.text() for u in unread[:5]) + (f"; and {len(unread) - 5} more" if len(unread) > 5 else "")
    _warn_once(root, "architecture gates", (
        f"the farm cannot read {len(unread)} use(s) of the GPU architecture in the sources the build compiles: "
        f"{places}. The SASS a build keeps beside torch's list (and for each GPU generation of an older CUDA major) "
        "follows the gates it reads (__CUDA_ARCH__ >= 890 keeps 8.9), so a GPU may run another architecture's side "
        "of these: compare __CUDA_ARCH__ (or NV_PROVIDES_SM_xx) with a number or a macro of one, or name the "
        "architectures in cuda-archs or extra-cuda-archs of [tool.cuda-ext-farm]"))


def check_submodules(root: Path, tree: project_source.SourceTree, *, cpu: bool = False) -> None:
    """Refuse an empty submodule the build uses (:func:`submodule_use` finds where) unless the build's include path
    holds every header the build would take from it elsewhere (:func:`provided`); warn about any other."""
    for sub in tree.empty_submodules:
        use = submodule_use(root, sub, tree.files)
        if use.where is None:
            _warn_once(root, sub, f"the git submodule {sub} is not checked out (its folder is empty); no file the "
                       "build reads names it, so the build goes on without it (if a compile misses a header under "
                       "it, the error says so; `git submodule update --init --recursive` checks it out)")
            continue
        if use.compiled is not None or not use.includes or \
                any(provided(header, sub, cpu=cpu) is None for _, header in use.includes):
            raise UsageError("a git submodule the build uses is not checked out (its folder is empty)",
                             f"{sub}, named in {use.compiled or use.where}", "run `git submodule update --init "
                             "--recursive` in the project's folder, then build again")
        found = "; ".join(dict.fromkeys(f"<{h}> in {provided(h, sub, cpu=cpu)}" for _, h in use.includes))
        _warn_once(root, sub, f"the git submodule {sub} is not checked out (its folder is empty), though the build "
                   f"names it ({use.where}); every header the build includes from it is on the build's include "
                   f"path elsewhere ({found}), so the build goes on with those (`git submodule update --init "
                   "--recursive` checks it out)")


#: Libraries whose headers the build's include path holds besides the project (``#include <pybind11/...>``): torch's
#: include folder carries pybind11 and fmt; a CUDA build's toolkit CCCL's cub, thrust, libcu++ (``cuda/``) and ``nv``.
TORCH_HEADERS = ("pybind11", "fmt")
TOOLKIT_HEADERS = ("cub", "thrust", "cuda", "nv")


def provided(header: str, sub: str, *, cpu: bool) -> str | None:
    """Where else the build finds ``header``, an include the empty submodule ``sub`` would satisfy: ``"torch's
    headers"``, ``"the CUDA toolkit's headers"``; None where only the submodule has it (a path into it)."""
    top = header.split("/")[0]
    if header.startswith(sub + "/") or "/" not in header:
        return None
    if top in TORCH_HEADERS:
        return "torch's headers"
    return "the CUDA toolkit's headers" if top in TOOLKIT_HEADERS and not cpu else None


@dataclasses.dataclass(frozen=True)
class SubmoduleUse:
    """Where the build names an empty submodule's folder: the first place (None: nowhere), a build file's line that
    compiles from it (``add_subdirectory``, a source under it), and each include of a header it would hold
    (``("csrc/ops.cpp line 2 (#include pybind11/pybind11.h)", "pybind11/pybind11.h")``)."""

    where: str | None
    compiled: str | None
    includes: tuple[tuple[str, str], ...]


def used_by_build(root: Path, sub: str, files: tuple[str, ...] = ()) -> str | None:
    """Where the build names the submodule folder ``sub``: ``setup.py line 9``, ``csrc/ops.cpp line 2`` (a header
    under it, ``#include <glm/glm.hpp>`` for ``third_party/glm``); None when nothing the build reads does."""
    return submodule_use(root, sub, files).where


def submodule_use(root: Path, sub: str, files: tuple[str, ...] = ()) -> SubmoduleUse:
    parts = tuple(sub.split("/"))
    named: list[str] = []
    compiled: str | None = None
    for file in backend_files.build_files(root):
        text = file.text()
        kind = "python" if file.path.suffix == ".py" else "cmake" if file.path.name == "CMakeLists.txt" or \
            file.path.suffix == ".cmake" else "text"
        line = _names_folder(text, parts, kind=kind)
        if line is not None:
            named.append(f"{file.shown} line {line}")
            if compiled is None and _compiles(text, parts, kind):
                compiled = named[-1]
    includes: list[tuple[str, str]] = []
    for name in files:
        if not name.endswith(SOURCE_SUFFIXES) or name.startswith(sub + "/"):
            continue
        try:
            text = (root / name).read_text(errors="replace")[:500_000]
        except OSError:
            continue
        for match in _INCLUDE.finditer(text):
            header = match.group(1).replace("\\", "/")
            if header.startswith(sub + "/") or (header.split("/")[0] == parts[-1] and "/" in header):
                includes.append((f"{name} line {text.count(chr(10), 0, match.start()) + 1} (#include {header})",
                                 header))
    where = named[0] if named else includes[0][0] if includes else None
    return SubmoduleUse(where, compiled, tuple(includes))


#: CMake commands that compile what a folder holds, rather than adding it to the include path.
COMPILING = frozenset({"add_subdirectory", "include", "add_library", "add_executable", "target_sources",
                       "fetchcontent_declare", "externalproject_add", "set_source_files_properties"})


def _compiles(text: str, parts: tuple[str, ...], kind: str) -> bool:
    """Whether a build file compiles from the folder (a CMake project under it, a source file under it), rather
    than adding it to the include path (``include_dirs``, ``include_directories``)."""
    path = "/".join(parts)
    if kind == "cmake":
        return any(c.name in COMPILING and any(path in a for a in c.args) for c in backend_files.commands(text))
    joined = r"[/\\]+".join(map(re.escape, parts))
    return re.search(r"(?<![\w.-])" + joined + r"[/\\][^'\"\n]*\.(?:c|cc|cpp|cxx|cu)\b", text) is not None


def _names_folder(text: str, parts: tuple[str, ...], *, kind: str) -> int | None:
    """The line where a build file's ``text`` names the folder: its path written out (``third_party/glm``, either
    slash; a one-part name only as a path into it, ``glm/``), in a Python file its parts as consecutive string
    literals (``HERE / "third_party" / "glm"``, ``os.path.join("third_party", "glm")``), in a CMake file as an
    argument (``add_subdirectory(glm)``, ``${CMAKE_CURRENT_SOURCE_DIR}/third_party/glm``)."""
    joined = r"[/\\]+".join(map(re.escape, parts))
    tail = r"[/\\]" if len(parts) == 1 else r"(?:[/\\]|(?![\w.-]))"
    found = re.search(r"(?<![\w.-])" + joined + tail, text)
    if found is not None:
        return text.count("\n", 0, found.start()) + 1
    if kind == "cmake":
        path = "/".join(parts)
        return next((c.line for c in backend_files.commands(text)
                     if any(a == path or a.endswith("/" + path) for a in c.args)), None)
    if kind != "python":
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    strings = sorted((n.lineno, n.col_offset, n.value) for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str))
    values = [s[2] for s in strings]
    for i in range(len(values) - len(parts) + 1):
        if tuple(values[i:i + len(parts)]) == parts:
            return strings[i][0]
    return None


def _resolved(link: str, written: str) -> str:
    """The link's target relative to the project root (``csrc/include -> ../third_party/x/include`` gives
    ``third_party/x/include``)."""
    parts: list[str] = link.split("/")[:-1]
    for part in written.replace("\\", "/").split("/"):
        if part == "..":
            parts = parts[:-1]
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def _holds(tree: project_source.SourceTree, name: str) -> bool:
    """Whether the copy holds ``name``: a file, a link or a folder with a file in it."""
    return name in tree.links or name in tree.files or any(f.startswith(name + "/") for f in tree.files)


def _warn_once(root: Path, what: str, text: str) -> None:
    if (str(root), what) not in _WARNED:
        _WARNED.add((str(root), what))
        log.warn(text)
