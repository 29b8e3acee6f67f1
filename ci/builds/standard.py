"""The C++ standard a build compiles as: each torch release's own (``TorchRelease.cxx``: 20 from torch 2.12), and a
project flag that pins an older one, refused before anything is installed or compiled.

torch's ``cpp_extension`` passes the standard its headers are written for (``-std=c++17`` up to 2.11,
``-std=c++20`` from 2.12, ``/std:c++20`` on Windows); the farm passes none of its own. A project that adds its own
``-std=c++17`` (in ``extra_compile_args``, nvcc flags, ``CMAKE_CXX_STANDARD 17``, ``cxx_std_17``) overrides it: the
compiler's last ``-std`` wins, and against torch 2.12+ the build may fail in torch's headers.

:func:`check` reads only the files the build backend uses (``backend_files``: ``setup.py`` for setuptools, the
``CMakeLists.txt`` files reachable from the top one for CMake backends, the backend's ``pyproject.toml`` tables;
never an ``examples/`` or ``tests/`` tree no ``add_subdirectory`` names, nor a vendored folder) and follows their
conditions for the target (``conditions``): ``"-std=c++20" if torch_version >= (2, 12) else "-std=c++17"`` pins
C++20 for torch 2.13 and C++17 for 2.11, both fine. An older pin on every path stops the build in one line naming
the flag and the file; one under a condition the farm cannot read (``if HAS_CXX20``, ``if(BUILD_EXAMPLES)``) is a
warning, and a build that then fails in torch's headers is named as such (``failure``). A pin at or above the
target's standard is the project's choice and is left alone. A flag a person reads is no pin: in a message
(``print``, ``raise``, ``log.warning``, CMake's ``message()``), in a sentence (``"needs -std=c++17"``), in a
comment or a docstring. ``cxx-standard-check = false`` (project key) turns the check off.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from ci.builds import backend_files, conditions
from ci.errors import UsageError
from ci.log import log
from ci.universe import matrix
from ci.universe.targets import Target

#: The project key that turns the check off.
KEY = "cxx-standard-check"
#: The draft names compilers accept for a standard.
_DRAFTS = {"0x": 11, "1y": 14, "1z": 17, "2a": 20, "2b": 23, "2c": 26}
_VERSION = r"(\d\d|0x|1y|1z|2a|2b|2c)"
_PATTERNS = (
    re.compile(r"(?<![\w-])--?std[=\s]+(?:c|gnu)\+\+" + _VERSION + r"\b"),  # gcc, clang, nvcc
    re.compile(r"/std:c\+\+(\d\d|latest)\b"),  # MSVC
    re.compile(r"(?:\b|(?<=-D))CMAKE_(?:CXX|CUDA)_STANDARD[\s=:\"]+(\d\d)\b"),  # set(...) or -D...=17
    re.compile(r"(?<![\w-])(?:CXX|CUDA)_STANDARD[\s=]+(\d\d)\b"),  # set_target_properties(... CXX_STANDARD 17)
    re.compile(r"\b(?:cxx|cuda)_std_(\d\d)\b"),  # target_compile_features
)


@dataclasses.dataclass(frozen=True)
class Pin:
    """One place where the project names a C++ standard; ``condition``: the condition it depends on that the
    farm cannot read (None: it applies on every path of the target's build)."""

    path: str
    line: int
    flag: str
    std: int
    condition: str | None = None

    def __str__(self) -> str:
        return f"{self.flag} in {self.path} line {self.line}"


@dataclasses.dataclass(frozen=True)
class _Branch:
    """An enclosing ``if``: its condition, which branch the pin is in, and the other branch's nodes."""

    test: ast.expr
    taken: bool
    other: Sequence[ast.AST]


def _std(value: str) -> int:
    if value == "latest":
        return 99
    return _DRAFTS.get(value) or int(value)


#: Calls whose arguments are messages to a person, not flags (``print("needs -std=c++17")``, ``log.warning``).
MESSAGE_CALLS = frozenset({"print", "warn", "warning", "info", "debug", "error", "exception", "critical", "fatal",
                           "exit", "abort", "announce", "echo"})
#: A word of prose beside a flag (``needs``, ``Requires:``), not a flag or a flag's value (``-x cu``).
_PROSE = re.compile(r"[A-Za-z]?[a-z]+[,.:;!?]*")


def _in_prose(text: str, start: int, end: int) -> bool:
    """Whether the flag at ``text[start:end]`` sits in a sentence (``"needs -std=c++17"``, ``"-std=c++17 is
    required"``): a word of prose right before it (one that is no flag's value) or right after it."""
    before = text[:start].split()
    after = text[end:].split()
    if after and _PROSE.fullmatch(after[0]):
        return True
    return bool(before) and _PROSE.fullmatch(before[-1]) is not None and not (
        len(before) > 1 and before[-2].startswith(("-", "/")))


def _pins_in(text: str, shown: str, line: int, condition: str | None = None) -> Iterator[Pin]:
    for index, pattern in enumerate(_PATTERNS):
        for m in pattern.finditer(text):
            if index < 2 and _in_prose(text, m.start(), m.end()):  # a flag named in a message passes nothing
                continue
            yield Pin(shown, line, m.group(0).strip(), _std(m.group(1)), condition)


def python_pins(text: str, shown: str, facts: conditions.Facts | None) -> list[Pin] | None:
    """The pins of a Python build script: its string literals that are not docstrings or compared values, on the
    paths the target's build takes; None when it does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    reader = conditions.PythonConditions(tree, facts) if facts is not None else None
    found: list[Pin] = []

    def visit(node: ast.AST, branches: tuple[_Branch, ...]) -> None:
        if isinstance(node, (ast.If, ast.IfExp)):
            body: list[ast.AST] = list(node.body) if isinstance(node.body, list) else [node.body]
            orelse: list[ast.AST] = list(node.orelse) if isinstance(node.orelse, list) else [node.orelse]
            for child in body:
                visit(child, (*branches, _Branch(node.test, True, orelse)))
            for child in orelse:
                visit(child, (*branches, _Branch(node.test, False, body)))
        elif isinstance(node, ast.Compare) or _message(node):  # tests a flag, or tells a person about one
            return
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            for pin in _pins_in(node.value, shown, node.lineno):
                condition = _python_condition(branches, reader, pin.std)
                if condition is not None:
                    found.append(dataclasses.replace(pin, condition=condition or None))
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, branches)

    visit(tree, ())
    return sorted(found, key=lambda pin: pin.line)


def _message(node: ast.AST) -> bool:
    """A statement or call that speaks to a person: ``raise``, ``assert``, ``print(...)``,
    ``log.warning(...)``, ``sys.exit(...)``, ``sys.stderr.write(...)``."""
    if isinstance(node, (ast.Raise, ast.Assert)):
        return True
    if not isinstance(node, ast.Call):
        return False
    name = ast.unparse(node.func)
    return name.rsplit(".", 1)[-1] in MESSAGE_CALLS or name in ("sys.stderr.write", "sys.stdout.write")


def _python_condition(branches: tuple[_Branch, ...], reader: conditions.PythonConditions | None,
                      std: int) -> str | None:
    """None: a branch the target's build does not take; ``""``: every enclosing condition holds; else the
    text of the innermost one the farm cannot read, unless its other branch pins a standard as old or older (then
    the pin's age applies either way: ``"/std:c++17" if IS_MSVC else "-std=c++17"``)."""
    unknown: _Branch | None = None
    for branch in branches:
        value = reader.truth(branch.test) if reader is not None else None
        if value is None:
            unknown = branch
        elif value != branch.taken:
            return None
    if unknown is None:
        return ""
    other = [pin.std for n in unknown.other for c in ast.walk(n) if isinstance(c, ast.Constant)
             and isinstance(c.value, str) for pin in _pins_in(c.value, "", 0)]
    if other and max(other) <= std:
        return ""
    return ("" if unknown.taken else "not ") + ast.unparse(unknown.test)[:80]


@dataclasses.dataclass
class _OpenIf:
    """A CMake ``if()`` block being read: the value of the branch we are in (None: unknown), whether an earlier
    branch was taken or unknown, the block's first condition and the branch's, as a user reads them."""

    value: bool | None
    taken: bool
    unknown: bool
    head: str
    text: str

    def enter(self, value: bool | None, condition: str | None) -> None:
        """The next ``elseif`` (its ``value`` and ``condition``) or ``else`` (``condition`` None)."""
        if self.taken:
            value = False
        elif condition is None:  # else(): taken when every earlier branch was known false
            value = None if self.unknown else True
        self.taken, self.unknown = self.taken or value is True, self.unknown or value is None
        self.value = value
        self.text = f"elseif({condition})" if condition is not None else f"the else() of {self.head}"


def cmake_pins(text: str, shown: str, facts: conditions.Facts | None, reached_if: bool = False) -> list[Pin]:
    """The pins of a CMake file on the paths the target's configure takes (``if``/``elseif``/``else`` followed
    where the condition is understood); ``reached_if``: the file itself is added inside an ``if()`` block."""
    found: list[Pin] = []
    stack: list[_OpenIf] = []
    for command in backend_files.commands(text):
        value = conditions.cmake_truth(command.args, facts) if facts and command.name in ("if", "elseif") \
            else None
        if command.name == "if":
            head = f"if({' '.join(command.args)})"
            stack.append(_OpenIf(value, value is True, value is None, head, head))
        elif command.name in ("elseif", "else") and stack:
            stack[-1].enter(value, " ".join(command.args) if command.name == "elseif" else None)
        elif command.name == "endif" and stack:
            stack.pop()
        elif command.name != "message" and not any(frame.value is False for frame in stack):
            unknown = [frame.text for frame in stack if frame.value is None]
            condition = unknown[-1] if unknown else "the if() that adds this file" if reached_if else None
            found.extend(_pins_in(" ".join((command.name, *command.args)), shown, command.line, condition))
    return found


def scan_text(text: str, path: Path, shown: str, facts: conditions.Facts | None = None) -> list[Pin]:
    """Every standard one build file names on the target's paths (``facts``: the target's; None: every condition
    is unknown)."""
    if path.suffix == ".py":
        pins = python_pins(text, shown, facts)
        if pins is not None:
            return pins
    if path.name == "CMakeLists.txt" or path.suffix == ".cmake":
        return cmake_pins(text, shown, facts)
    lines = enumerate(text.splitlines(), 1)
    return sorted((pin for number, line in lines if not line.lstrip().startswith(("#", ";"))
                   for pin in _pins_in(_uncommented(line), shown, number)), key=lambda p: p.line)


def _uncommented(line: str) -> str:
    """A line less its trailing ``# comment`` (TOML, Python read as text), quotes respected."""
    quote = ""
    for i, char in enumerate(line):
        if quote and char == quote:
            quote = ""
        elif not quote and char in "\"'":
            quote = char
        elif not quote and char == "#":
            return line[:i]
    return line


def scan(root: Path, facts: conditions.Facts | None = None) -> list[Pin]:
    """Every C++ standard the files the project's build backend reads name."""
    found: list[Pin] = []
    for file in backend_files.build_files(root):
        text = file.text()
        if file.path.name == "CMakeLists.txt" or file.path.suffix == ".cmake":
            found += cmake_pins(text, file.shown, facts, file.conditional)
        else:
            found += scan_text(text, file.path, file.shown, facts)
    return found


def facts_for(target: Target) -> conditions.Facts:
    pyproject = backend_files.read_pyproject(target.project.root)
    skbuild = str(pyproject.get("tool", {}).get("scikit-build", {})) if isinstance(pyproject.get("tool"), dict) \
        else ""
    defines = frozenset(re.findall(r"CMAKE_(?:CXX|CUDA)_STANDARD", skbuild))
    return conditions.Facts.of(target.torch, target.os, defines)


def older_pins(root: Path, cxx: int, facts: conditions.Facts | None = None) -> list[Pin]:
    """The project's pins of a standard older than C++``cxx`` (those under conditions the farm cannot read too:
    their ``condition`` says which)."""
    return [pin for pin in scan(root, facts) if pin.std < cxx]


def check(target: Target) -> None:
    """Refuse, in one line and before the build, a project that pins an older C++ standard than the target's
    torch needs on every path of its build; warn about one that does so under a condition the farm cannot read."""
    if not target.project.cxx_standard_check:
        return
    release = matrix.get_torch(target.torch)
    older = older_pins(target.project.root, target.cxx, facts_for(target))
    for pin in (p for p in older if p.condition):
        log.warn(f"{target.project.name} passes {pin} when {pin.condition} (a condition the farm cannot read "
                 f"before the build), and torch {release.minor}'s headers need C++{release.cxx}: if the build "
                 f"fails in torch's headers, that flag is why ({KEY} = false in [tool.cuda-ext-farm] silences this)")
    refused = [p for p in older if not p.condition]
    if not refused:
        return
    pin = refused[0]
    more = f" (and {len(refused) - 1} more: {', '.join(map(str, refused[1:]))})" if len(refused) > 1 else ""
    raise UsageError(
        f"{target.project.name} pins C++{pin.std} with {pin}{more}, but torch {release.minor}'s headers need "
        f"C++{release.cxx}", target.id,
        f"drop the flag (torch's cpp_extension passes -std=c++{release.cxx} itself) or raise it to C++{release.cxx}; "
        f"or leave torch {release.minor} out of [tool.cuda-ext-farm] torch; {KEY} = false there builds it as it is")
