"""What a project's own sources ask of the GPU architecture: every comparison of ``__CUDA_ARCH__`` with a number in its
C, C++ and CUDA files (``#if __CUDA_ARCH__ >= 890``, ``__CUDA_ARCH__ == 750``, ``800 > __CUDA_ARCH__``), of a macro
defined as it (``#define CUDA_ARCH __CUDA_ARCH__``, and any name spelt ``CUDA_ARCH``), and of the arch-specific macros
(``__CUDA_ARCH_SPECIFIC__``, ``__CUDA_ARCH_FAMILY_SPECIFIC__``, defined only in ``9.0a``/``10.0f`` builds).

``older-majors-sass`` (ci/universe/archs.py ``per_generation``) keeps, beside each GPU generation's oldest SASS, the
SASS of every architecture on which one of these comparisons changes its answer: a GPU that runs another
architecture's cubin runs that architecture's side of every ``#if``, so a thinned list would otherwise drop the FP8
path of an Ada GPU (``>= 890``), or run the ``#else`` that traps.

What is read: every file with a C/C++/CUDA suffix under the project's folder, comments removed, except hidden folders,
build outputs (``build``, ``dist``, ``wheelhouse``, virtual environments) and folders that are projects of their own
(a ``pyproject.toml`` or ``setup.py`` of their own: test fixtures inside a project, a vendored package).
Headers of the toolkit and of torch are not the project's: their gates (``cuda_fp8.hpp``'s hardware conversions on
8.9) fall back to portable code, and the docs say so. Each file's gates are cached by its size and time.

Standard library only (``ci/universe/targets/`` uses it, and ``noxfile.py`` imports that).
"""

from __future__ import annotations

import dataclasses
import operator
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx",
                             ".inl", ".inc", ".ipp", ".tpp"})
#: Folders never read: build outputs and environments (hidden folders are skipped too).
SKIPPED = frozenset({"build", "dist", "wheelhouse", "node_modules", "__pycache__", "site-packages", "_skbuild"})
#: A folder with one of these is a project of its own.
PROJECT_FILES = ("pyproject.toml", "setup.py")
#: The macros defined only in an arch-specific (``a``) or family (``f``) build.
SPECIFIC = ("__CUDA_ARCH_SPECIFIC__", "__CUDA_ARCH_FAMILY_SPECIFIC__")

_OPS: dict[str, Callable[[int, int], bool]] = {">=": operator.ge, ">": operator.gt, "<=": operator.le,
                                               "<": operator.lt, "==": operator.eq, "!=": operator.ne}
_MIRROR = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "==", "!=": "!="}
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ALIAS = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+\(?[ \t]*__CUDA_ARCH__[ \t]*\)?[ \t]*$", re.M)
_OP = r"(>=|<=|==|!=|>|<)"
_NUMBER = r"(\d+)[uUlL]*\b"
_NAME_FIRST = re.compile(rf"\b(\w+)\s*{_OP}\s*{_NUMBER}")
_NUMBER_FIRST = re.compile(rf"\b{_NUMBER}\s*{_OP}\s*(\w+)\b")


@dataclasses.dataclass(frozen=True, order=True)
class Gate:
    """One comparison of the architecture macro with a number (``__CUDA_ARCH__ >= 890``), where it was first seen."""

    value: int
    op: str
    #: ``__CUDA_ARCH__`` (or a macro defined as it), or one of ``SPECIFIC``
    macro: str = "__CUDA_ARCH__"
    where: str = dataclasses.field(default="", compare=False)

    @property
    def specific(self) -> bool:
        return self.macro in SPECIFIC

    def holds(self, arch: str) -> bool:
        """Whether code compiled for ``arch`` (``8.9``, ``9.0a``) takes this comparison's true side."""
        base = arch.rstrip("af")
        if self.specific and base == arch:
            return False  # undefined in a plain build: ``#if`` reads it as 0, ``defined()`` is false
        major, minor = base.split(".")
        return _OPS[self.op](int(major) * 100 + int(minor) * 10, self.value)

    def text(self) -> str:
        return f"{self.macro} {self.op} {self.value}"


def behaviour(arch: str, gates: Iterable[Gate]) -> tuple[bool, ...]:
    """The side of each gate code compiled for ``arch`` takes: two architectures with one behaviour run the same
    source paths."""
    return tuple(g.holds(arch) for g in gates)


def _is_arch_macro(name: str, aliases: set[str]) -> str | None:
    """The macro a name compares (``__CUDA_ARCH__`` for itself and its aliases), or None."""
    if name == "__CUDA_ARCH__" or name in aliases or name == "CUDA_ARCH":
        return "__CUDA_ARCH__"
    return name if name in SPECIFIC else None


def gates_in(text: str, where: str = "") -> set[Gate]:
    """The gates of one file's text (its comments removed)."""
    code = _COMMENTS.sub(" ", text)
    if "CUDA_ARCH" not in code:
        return set()
    aliases = set(_ALIAS.findall(code))
    found: list[tuple[int, Gate]] = []
    for pattern, name_at, op_at, number_at in ((_NAME_FIRST, 1, 2, 3), (_NUMBER_FIRST, 3, 2, 1)):
        for m in pattern.finditer(code):
            macro = _is_arch_macro(m.group(name_at), aliases)
            if macro is None:
                continue
            op = m.group(op_at) if name_at == 1 else _MIRROR[m.group(op_at)]
            line = code.count("\n", 0, m.start()) + 1
            found.append((line, Gate(int(m.group(number_at)), op, macro, f"{where}:{line}" if where else
                                     f"line {line}")))
    first: dict[Gate, Gate] = {}
    for _, gate in sorted(found, key=lambda item: item[0]):
        first.setdefault(gate, gate)  # equal gates compare without their place: the first line is kept
    return set(first.values())


_CACHE: dict[Path, tuple[tuple[int, int], frozenset[Gate]]] = {}


def _file_gates(path: Path, where: str) -> frozenset[Gate]:
    stat = path.stat()
    key = (stat.st_size, stat.st_mtime_ns)
    cached = _CACHE.get(path)
    if cached is None or cached[0] != key:
        cached = (key, frozenset(gates_in(path.read_text(encoding="utf-8", errors="replace"), where)))
        _CACHE[path] = cached
    return cached[1]


def source_files(root: Path) -> list[Path]:
    """The project's C, C++ and CUDA files (see the module's rules), sorted."""
    found = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED
                         and not (here / d / "pyvenv.cfg").exists()
                         and not any((here / d / f).is_file() for f in PROJECT_FILES))
        found += [here / n for n in names if Path(n).suffix.lower() in SOURCE_SUFFIXES]
    return sorted(found)


def project_gates(root: Path) -> tuple[Gate, ...]:
    """Every distinct gate of the project at ``root``, lowest value first (each at the first place it was seen)."""
    seen: dict[Gate, Gate] = {}
    for path in source_files(root):
        for gate in _file_gates(path, path.relative_to(root).as_posix()):
            seen.setdefault(gate, gate)
    return tuple(sorted(seen.values()))
