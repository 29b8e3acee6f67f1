"""The C++ standard a build compiles as: each torch release's own (``TorchRelease.cxx``: 20 from torch 2.12), and a
project flag that pins an older one, refused before anything is installed or compiled.

torch's ``cpp_extension`` passes the standard its headers are written for (``-std=c++17`` up to 2.11,
``-std=c++20`` from 2.12, ``/std:c++20`` on Windows); the farm passes none of its own. A project that adds its own
``-std=c++17`` (in ``extra_compile_args``, nvcc flags, ``CMAKE_CXX_STANDARD 17``, ``cxx_std_17``) overrides it: the
compiler's last ``-std`` wins, and against torch 2.12+ the build fails deep in torch's headers. ``check`` reads the
project's build configuration (``setup.py``, ``setup.cfg``, ``pyproject.toml``, every ``CMakeLists.txt`` and
``*.cmake`` outside build and vendored folders) for such pins and fails with one line naming the flag and the file.
A pin at or above the target's standard (``-std=c++20``, ``-std=c++23``) is the project's choice and is left alone.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

from ci.errors import UsageError
from ci.universe import matrix
from ci.universe.targets import Target

#: Files whose text configures the build (CMake's anywhere below the project, except in SKIPPED folders).
CONFIG_FILES = ("setup.py", "setup.cfg", "pyproject.toml")
CMAKE_FILES = ("CMakeLists.txt", "*.cmake")
#: Folders that hold build output or vendored code (whose own standard is not the extension's).
SKIPPED = frozenset({"build", "dist", "third_party", "third-party", "thirdparty", "3rdparty", "external", "extern",
                     "vendor", "node_modules", "wheelhouse", "__pycache__"})
#: The draft names compilers accept for a standard.
_DRAFTS = {"0x": 11, "1y": 14, "1z": 17, "2a": 20, "2b": 23, "2c": 26}
_VERSION = r"(\d\d|0x|1y|1z|2a|2b|2c)"
_PATTERNS = (
    re.compile(r"(?<![\w-])--?std[=\s]+(?:c|gnu)\+\+" + _VERSION + r"\b"),  # gcc, clang, nvcc
    re.compile(r"/std:c\+\+(\d\d|latest)\b"),  # MSVC
    re.compile(r"(?:\b|(?<=-D))CMAKE_(?:CXX|CUDA)_STANDARD[\s=:\"]+(\d\d)\b"),  # set(...) or -D...=17
    re.compile(r"\b(?:cxx|cuda)_std_(\d\d)\b"),  # target_compile_features
)


@dataclasses.dataclass(frozen=True)
class Pin:
    """One place where the project names a C++ standard."""

    path: str
    line: int
    flag: str
    std: int

    def __str__(self) -> str:
        return f"{self.flag} in {self.path} line {self.line}"


def _std(value: str) -> int:
    if value == "latest":
        return 99
    return _DRAFTS.get(value) or int(value)


def _lines(text: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of what can pin a standard: a Python file's string literals that are not docstrings (a
    flag is a string in ``setup.py``; its comments and docstrings may name flags freely), another file's lines that
    are not comments."""
    if path.suffix == ".py":
        try:
            tree = ast.parse(text)
        except SyntaxError:
            tree = None
        if tree is not None:
            prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                    yield node.lineno, node.value
            return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.lstrip().startswith("#"):
            yield number, line


def config_files(root: Path) -> Iterator[Path]:
    """The project's build configuration files, in a stable order."""
    for name in CONFIG_FILES:
        if (root / name).is_file():
            yield root / name
    for pattern in CMAKE_FILES:
        for path in sorted(root.rglob(pattern)):
            parts = path.relative_to(root).parts[:-1]
            if path.is_file() and not any(p in SKIPPED or p.startswith(".") for p in parts):
                yield path


def scan_text(text: str, path: Path, shown: str) -> list[Pin]:
    """Every standard the text of one file names."""
    found = []
    for number, line in _lines(text, path):
        for pattern in _PATTERNS:
            for m in pattern.finditer(line):
                found.append(Pin(shown, number, m.group(0).strip(), _std(m.group(1))))
    return sorted(found, key=lambda pin: pin.line)


def scan(root: Path) -> list[Pin]:
    """Every C++ standard the project's build configuration names."""
    found: list[Pin] = []
    for path in config_files(root):
        found += scan_text(path.read_text(errors="replace"), path, path.relative_to(root).as_posix())
    return found


def older_pins(root: Path, cxx: int) -> list[Pin]:
    """The project's pins of a standard older than C++``cxx``."""
    return [pin for pin in scan(root) if pin.std < cxx]


def check(target: Target) -> None:
    """Refuse, in one line and before the build, a project that pins an older C++ standard than the target's
    torch needs."""
    release = matrix.get_torch(target.torch)
    older = older_pins(target.project.root, target.cxx)
    if not older:
        return
    pin = older[0]
    more = f" (and {len(older) - 1} more: {', '.join(map(str, older[1:]))})" if len(older) > 1 else ""
    raise UsageError(
        f"{target.project.name} pins C++{pin.std} with {pin}{more}, but torch {release.minor}'s headers need "
        f"C++{release.cxx}", target.id,
        f"drop the flag (torch's cpp_extension passes -std=c++{release.cxx} itself) or raise it to C++{release.cxx}; "
        f"or leave torch {release.minor} out of [tool.cuda-ext-farm] torch")
