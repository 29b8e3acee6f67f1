"""Which files a project compiles, the macros they define, and the gates and unread uses of the architecture in
them (the package's face says what a gate is and why the farm reads them).

Standard library only (``ci/universe/targets/`` uses it, and ``noxfile.py`` imports that).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ci.universe.arch_gates import Gate, Reading, Unread, code
from ci.universe.arch_gates.code import Define, Parsed, Token

SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx",
                             ".inl", ".inc", ".ipp", ".tpp"})
#: Folders never read: build outputs and environments (hidden folders are skipped too).
SKIPPED = frozenset({"build", "dist", "wheelhouse", "node_modules", "__pycache__", "site-packages", "_skbuild"})
#: A folder with one of these is a project of its own.
PROJECT_FILES = ("pyproject.toml", "setup.py")


# --- macros --------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Macros:
    """The project's macros that involve the architecture (expanded where they are used), and the others that are
    object-like (read as numbers when an expression needs them: ``#define SM_ADA 890``)."""

    arch: dict[str, Define]
    plain: dict[str, list[Define]]
    _numbers: dict[str, int | None] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, defines: Iterable[Define]) -> Macros:
        every: dict[str, list[Define]] = {}
        for d in defines:
            if not code.is_arch(d.name) and code.QUERY.fullmatch(d.name) is None:
                every.setdefault(d.name, []).append(d)
        arch: dict[str, Define] = {}
        changed = True
        while changed:  # a macro is the architecture's when its body names it or another such macro
            changed = False
            for name, options in every.items():
                found = name not in arch and next((d for d in options if any(
                    t[0] == "i" and (code.is_arch(t[1]) or t[1] in arch or code.QUERY_PART.match(t[1]))
                    for t in d.body)), None)
                if found:
                    arch[name], changed = found, True
        return cls(arch, {n: [d for d in o if d.params is None] for n, o in every.items() if n not in arch})

    @functools.cached_property
    def names(self) -> re.Pattern[str]:
        """The names code must hold to be read: the architecture's, CCCL's queries and the macros of them."""
        words = [*code.ARCH_NAMES, *code.SPECIFIC, *sorted(self.arch, key=len, reverse=True)]
        return re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + "|" + code.QUERY_PART.pattern + r")\b")

    def number(self, name: str, seen: frozenset[str]) -> int | None:
        """The value of an object-like macro that is a number; None when it is not one, or two different ones."""
        if name in seen or name not in self.plain:
            return None
        if name not in self._numbers:
            values = {v for d in self.plain[name] if (v := _constant(list(d.body), self, seen | {name})) is not None}
            self._numbers[name] = values.pop() if len(values) == 1 else None
        return self._numbers[name]


def _constant(tokens: list[Token], macros: Macros, seen: frozenset[str]) -> int | None:
    value = code.evaluate(tokens, macros, seen)
    if value is None or value[1]:
        return None
    try:
        return value[0](0)
    except ZeroDivisionError:
        return None


def _args(tokens: Sequence[Token], i: int) -> tuple[list[list[Token]], int] | None:
    """The arguments of a call whose ``(`` is at ``i``, and the index after its ``)``."""
    args: list[list[Token]] = [[]]
    depth = 0
    for j in range(i, len(tokens)):
        text = tokens[j][1] if tokens[j][0] == "o" else ""
        if text == "(":
            depth += 1
            if depth == 1:
                continue
        elif text == ")":
            depth -= 1
            if depth == 0:
                return ([] if args == [[]] else args), j + 1
        elif text == "," and depth == 1:
            args.append([])
            continue
        args[-1].append(tokens[j])
    return None


def _substitute(d: Define, args: list[list[Token]], line: int, group: int) -> list[Token]:
    params = dict(zip(d.params or (), args, strict=False))
    if d.params and d.params[-1] == "...":
        params["__VA_ARGS__"] = [t for a in args[len(d.params) - 1:] for t in (*a, ("o", ",", line, group))][:-1]
    out: list[Token] = []
    body = list(d.body)
    i = 0
    while i < len(body):
        kind, text = body[i][0], body[i][1]
        if text == "#" and kind == "o" and i + 1 < len(body):  # stringized: no gate in a string
            out.append(("n", "0", line, group))
            i += 2
            continue
        if text == "##" and out and i + 1 < len(body):  # pasted: NV_PROVIDES_SM_ ## 90
            nxt = params.get(body[i + 1][1], [body[i + 1]])
            joined = out.pop()[1] + (nxt[0][1] if nxt else "")
            out.append(("n" if joined.isdigit() else "i", joined, line, group))
            out += [(k, t, line, group) for k, t, _, _ in nxt[1:]]
            i += 2
            continue
        out += [(k, t, line, group) for k, t, _, _ in params.get(text, [body[i]])] if kind == "i" \
            else [(kind, text, line, group)]
        i += 1
    return out


def expand(tokens: Sequence[Token], macros: Macros, guard: frozenset[str] = frozenset(),
           depth: int = 0) -> list[Token]:
    """``tokens`` with the architecture's macros replaced by their bodies (at the line where they are used); names
    under ``defined`` marked ``d``."""
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        kind, text, line, group = tokens[i]
        if kind == "i" and text == "defined":  # a name under defined() is not expanded
            j = i + 1
            paren = j < len(tokens) and code.is_op(tokens[j], "(")
            j += paren
            if j < len(tokens):
                out.append(("d", tokens[j][1], line, group))
                j += 1
            i = j + (paren and j < len(tokens) and code.is_op(tokens[j], ")"))
            continue
        d = macros.arch.get(text) if kind == "i" and text not in guard and depth < 16 else None
        if d is not None and d.params is None:
            out += expand(_substitute(d, [], line, group), macros, guard | {text}, depth + 1)
            i += 1
            continue
        if d is not None and i + 1 < len(tokens) and tokens[i + 1][1] == "(":
            called = _args(tokens, i + 1)
            if called is not None:
                args = [expand(a, macros, guard, depth + 1) for a in called[0]]
                out += expand(_substitute(d, args, line, group), macros, guard | {text}, depth + 1)
                i = called[1]
                continue
        out.append(tokens[i])
        i += 1
    return out


# --- the files a project compiles ----------------------------------------------------------------------------------

_PARSED: dict[Path, tuple[tuple[int, int], Parsed]] = {}
_READINGS: dict[Path, tuple[tuple[tuple[str, int, int], ...], Reading]] = {}
_BUILD_FILES = ("setup.py", "CMakeLists.txt")
_NAMED = re.compile(r"[\w./${}*+-]+")


def _parsed(path: Path) -> Parsed | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (stat.st_size, stat.st_mtime_ns)
    cached = _PARSED.get(path)
    if cached is None or cached[0] != key:
        try:
            cached = (key, code.parse(path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            return None
        _PARSED[path] = cached
    return cached[1]


@dataclasses.dataclass(frozen=True)
class Tree:
    """A project's files, as paths relative to its root: its own sources, every file a compile may reach (in its
    folders of projects of their own too), its folders, and its build files (``setup.py``, CMake files)."""

    own: tuple[str, ...]
    every: frozenset[str]
    folders: frozenset[str]
    build: tuple[str, ...]


def walk(root: Path) -> Tree:
    own: list[str] = []
    every: list[str] = []
    folders: list[str] = []
    build: list[str] = []
    vendored_folders: set[str] = set()  # inside a project of its own
    top = str(root)
    for folder, dirs, names in os.walk(top):
        rel = os.path.relpath(folder, top).replace(os.sep, "/")
        prefix = "" if rel == "." else rel + "/"
        vendored = rel in vendored_folders
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED
                         and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg")))
        for d in dirs:
            if vendored or any(os.path.isfile(os.path.join(folder, d, f)) for f in PROJECT_FILES):
                vendored_folders.add(prefix + d)
        folders += [prefix + d for d in dirs]
        for n in sorted(names):
            every.append(prefix + n)
            if not vendored and os.path.splitext(n)[1].lower() in SOURCE_SUFFIXES:
                own.append(prefix + n)
            elif not vendored and (n in _BUILD_FILES or n.endswith(".cmake")):
                build.append(prefix + n)
    return Tree(tuple(own), frozenset(every), frozenset(folders), tuple(build))


def source_files(root: Path) -> list[Path]:
    """The project's own C, C++ and CUDA files (see the module's rules), sorted."""
    return [root / name for name in sorted(walk(root).own)]


def _join(base: str, name: str) -> str:
    return os.path.normpath(f"{base}/{name}").replace(os.sep, "/").removeprefix("./") if base else \
        os.path.normpath(name).replace(os.sep, "/")


def _build_names(root: Path, tree: Tree) -> tuple[list[str], list[str]]:
    """The sources and folders the build files name (``sources=["third_party/x/k.cu"]``, ``include_dirs``)."""
    files: list[str] = []
    folders: list[str] = []
    for name in tree.build:
        try:
            text = (root / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        here = name.rpartition("/")[0]
        for word in dict.fromkeys(_NAMED.findall(text)):
            word = re.sub(r"^(?:\$\{\w+\}/)+", "", word)
            for base in dict.fromkeys((here, "")):
                path = _join(base, word)
                if "*" in word:
                    pattern = re.compile(re.escape(path).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*"))
                    files += [f for f in sorted(tree.every) if pattern.fullmatch(f)
                              and Path(f).suffix.lower() in SOURCE_SUFFIXES]
                elif path in tree.folders:
                    folders.append(path)
                elif path in tree.every and Path(path).suffix.lower() in SOURCE_SUFFIXES:
                    files.append(path)
    return files, folders


def _resolve(name: str, here: str, folders: list[str], tree: Tree, by_name: dict[str, list[str]]) -> list[str]:
    """The project's files an ``#include`` of ``name`` in folder ``here`` reaches: beside the file, under a folder
    the build names or the project's root, else (a name with a folder: ``cutlass/arch/mma.h``) any file of the
    tree whose path ends so."""
    for base in (here, *folders):
        path = _join(base, name)
        if path in tree.every:
            return [path]
    if "/" not in name:
        return []
    return [p for p in by_name.get(name.rsplit("/", 1)[1], ()) if p.endswith("/" + name)]


#: :func:`compiled_files` of each project folder this process read: one command asks for the gates of every target
#: (each cell's thinning), and the project's files do not change under a running command; a file's text is still
#: read again when its time or size changed (``_parsed``).
_COMPILED: dict[Path, list[Path]] = {}


def compiled_files(root: Path) -> list[Path]:
    """The files read (see the module's rules): the project's own sources, those its build files name, and the
    project's headers they include, transitively."""
    if root not in _COMPILED:
        _COMPILED[root] = _compiled_files(root)
    return list(_COMPILED[root])


def _compiled_files(root: Path) -> list[Path]:
    tree = walk(root)
    named, folders = _build_names(root, tree)
    by_name: dict[str, list[str]] = {}
    for path in sorted(tree.every):
        by_name.setdefault(path.rpartition("/")[2], []).append(path)
    queue = sorted(dict.fromkeys([*tree.own, *named]))
    seen = set(queue)
    folders = list(dict.fromkeys([*folders, ""]))
    while queue:
        name = queue.pop(0)
        parsed = _parsed(root / name)
        for _, include in parsed.includes if parsed is not None else ():
            for hit in _resolve(include.replace("\\", "/"), name.rpartition("/")[0], folders, tree, by_name):
                if hit not in seen:
                    seen.add(hit)
                    queue.append(hit)
    return [root / name for name in sorted(seen)]


def read_project(root: Path) -> Reading:
    """The gates and unread uses of every file the project compiles (:func:`compiled_files`)."""
    files = compiled_files(root)
    parsed = {p: q for p in files if (q := _parsed(p)) is not None}
    key = tuple((str(p), *_PARSED[p][0]) for p in parsed)
    cached = _READINGS.get(root)
    if cached is not None and cached[0] == key:
        return cached[1]
    macros = Macros.of(d for q in parsed.values() for d in q.defines)
    seen: dict[Gate, Gate] = {}
    unread: list[Unread] = []
    for path, q in parsed.items():
        tokens = q.tokens(macros.names)
        if not tokens:
            continue
        where = path.relative_to(root).as_posix()
        gates, lines = code.scan(expand(tokens, macros), macros)
        for value, op, macro, line in sorted(gates, key=lambda g: g[3]):
            gate = Gate(value, op, macro, f"{where}:{line}")
            seen.setdefault(gate, gate)
        unread += [Unread(f"{where}:{line}", q.lines[line - 1].strip()[:100]) for line in sorted(set(lines))]
    reading = Reading(tuple(sorted(seen.values())), tuple(unread))
    _READINGS[root] = (key, reading)
    return reading


def gates_in(text: str, where: str = "") -> set[Gate]:
    """The gates of one file's text (its own macros expanded)."""
    parsed = code.parse(text)
    macros = Macros.of(parsed.defines)
    gates, _ = code.scan(expand(parsed.tokens(macros.names), macros), macros)
    first: dict[Gate, Gate] = {}
    for value, op, macro, line in sorted(gates, key=lambda g: g[3]):
        gate = Gate(value, op, macro, f"{where}:{line}" if where else f"line {line}")
        first.setdefault(gate, gate)  # equal gates compare without their place: the first line is kept
    return set(first.values())


def project_gates(root: Path) -> tuple[Gate, ...]:
    """Every distinct gate of the project at ``root``, lowest value first (each at the first place it was seen)."""
    return read_project(root).gates
