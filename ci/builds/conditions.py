"""What a build file's conditions say for one target, read without running the file: ``True``, ``False``, or
``None`` (not known without running it).

Understood in ``setup.py`` (Python): comparisons of torch's version (``torch.__version__``, ``Version(...)``/
``parse(...)`` of it, a name assigned from it such as ``TORCH_VERSION`` or ``TORCH_MAJOR``/``TORCH_MINOR``, a
tuple of those) with a literal (``(2, 12)``, ``"2.12"``, ``Version("2.12")``), the platform (``sys.platform``,
``os.name``, ``platform.system()``, ``IS_WINDOWS = ...``), ``not``, ``and``, ``or``. In CMake: ``Torch_VERSION``
with ``VERSION_LESS``/``VERSION_GREATER_EQUAL``/..., ``WIN32``/``MSVC``/``UNIX``/``APPLE``, and ``NOT
CMAKE_CXX_STANDARD``/``NOT DEFINED CMAKE_CXX_STANDARD`` (true: the farm defines no standard; false when the
project's own ``pyproject.toml`` defines one for CMake). Anything else is ``None``: the caller warns rather than
guesses.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import re
from collections.abc import Callable, Sequence

#: Python comparison operators on version tuples.
_Compare = Callable[[tuple[int, ...], tuple[int, ...]], bool]
_OPS: dict[type[ast.cmpop], _Compare] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
    ast.NotEq: operator.ne}
#: CMake's version comparisons.
_CMAKE_OPS: dict[str, _Compare] = {
    "VERSION_LESS": operator.lt, "VERSION_LESS_EQUAL": operator.le, "VERSION_GREATER": operator.gt,
    "VERSION_GREATER_EQUAL": operator.ge, "VERSION_EQUAL": operator.eq}
_VERSION_CALLS = ("Version", "parse", "parse_version", "LooseVersion", "StrictVersion")


@dataclasses.dataclass(frozen=True)
class Facts:
    """What a target's build knows that a build file may ask: torch's version and the platform."""

    torch: tuple[int, ...]
    windows: bool = False
    #: Names the project's pyproject.toml defines for CMake (``cmake.define``, ``-D`` in ``cmake.args``).
    cmake_defines: frozenset[str] = frozenset()

    @classmethod
    def of(cls, torch: str, os_name: str, cmake_defines: frozenset[str] = frozenset()) -> Facts:
        return cls(tuple(int(p) for p in re.findall(r"\d+", torch.split("+")[0])[:3]), os_name == "windows",
                   cmake_defines)


def _literal(node: ast.expr) -> tuple[int, ...] | None:
    """A version written as a literal: ``(2, 12)``, ``"2.12"``, ``2``, ``Version("2.12")``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return (node.value,)
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\d+(\.\d+)*", node.value):
        return tuple(int(p) for p in node.value.split("."))
    if isinstance(node, ast.Tuple) and node.elts:
        values = tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is int)
        return values if len(values) == len(node.elts) else None
    if isinstance(node, ast.Call) and _callee(node) in _VERSION_CALLS and len(node.args) == 1:
        return _literal(node.args[0])
    return None


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _cut(version: tuple[int, ...], length: int) -> tuple[int, ...]:
    return (version + (0,) * length)[:length]


class PythonConditions:
    """Conditions of one ``setup.py``, with its module-level assignments (``TORCH_VERSION = ...``) to follow."""

    def __init__(self, tree: ast.Module, facts: Facts) -> None:
        self.facts = facts
        self.names: dict[str, ast.expr] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.names[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.names[node.target.id] = node.value

    def truth(self, node: ast.expr, depth: int = 0) -> bool | None:
        """The condition's value for the target, or None when it cannot be known without running the file."""
        if depth > 8:
            return None
        if isinstance(node, ast.Constant):
            return bool(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.truth(node.operand, depth + 1)
            return None if inner is None else not inner
        if isinstance(node, ast.BoolOp):
            values = [self.truth(v, depth + 1) for v in node.values]
            decisive = isinstance(node.op, ast.Or)  # or: one True decides; and: one False decides
            if decisive in values:
                return decisive
            return None if None in values else not decisive
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.truth(self.names[node.id], depth + 1)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._compare(node.left, node.ops[0], node.comparators[0], depth)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) == 1 \
                and node.func.attr in ("startswith", "endswith"):
            platform = self._platform(node.func.value, depth)
            arg = node.args[0]
            if platform is not None and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return bool(getattr(platform, node.func.attr)(arg.value))
        return None

    def _compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr, depth: int) -> bool | None:
        compare = _OPS.get(type(op))
        mine, theirs = self._version(left, depth), _literal(right)
        if mine is None or theirs is None:
            mine, theirs = _literal(left), self._version(right, depth)
            if mine is not None and theirs is not None:
                return compare(_cut(mine, len(theirs)), theirs) if compare else None
        elif compare is not None:
            return compare(_cut(mine, len(theirs)), theirs)
        platform = self._platform(left, depth)
        if platform is None:
            return None
        if isinstance(right, ast.Constant) and isinstance(right.value, str) and isinstance(op, (ast.Eq, ast.NotEq)):
            return (platform == right.value) == isinstance(op, ast.Eq)
        if isinstance(right, (ast.Tuple, ast.List, ast.Set)) and isinstance(op, (ast.In, ast.NotIn)):
            members = [e.value for e in right.elts if isinstance(e, ast.Constant)]
            return (platform in members) == isinstance(op, ast.In)
        return None

    def _version(self, node: ast.expr, depth: int) -> tuple[int, ...] | None:
        """torch's version (or a part of it: ``TORCH_MAJOR``) when ``node`` denotes it."""
        torch = self.facts.torch
        text = ast.unparse(node)
        if isinstance(node, ast.Call) and _callee(node) in _VERSION_CALLS and len(node.args) == 1:
            return self._version(node.args[0], depth + 1)
        if re.fullmatch(r"torch\.(version\.)?__version__", text):
            return torch
        if isinstance(node, ast.Tuple):
            parts = [self._version(e, depth + 1) for e in node.elts]
            return None if None in parts or not parts else tuple(p for part in parts if part for p in part)
        if not isinstance(node, ast.Name):
            return None
        name, value = node.id.lower(), self.names.get(node.id)
        if value is not None and depth < 8:
            found = self._version(value, depth + 1)
            if found is not None:
                return found  # TORCH_VERSION = Version(torch.__version__)
            if not re.search(r"torch\.(version\.)?__version__", ast.unparse(value)):
                return None  # a name assigned from something else
            # assigned from torch's version in a form not followed (int(torch.__version__.split(".")[0])): the
            # name says which part it holds
        elif name != "torch" and not ("torch" in name and any(w in name for w in ("ver", "major", "minor"))):
            return None
        if "major" in name:
            return torch[:1]
        if "minor" in name:
            return torch[1:2]
        return torch

    def _platform(self, node: ast.expr, depth: int) -> str | None:
        windows = self.facts.windows
        text = ast.unparse(node)
        if text == "sys.platform":
            return "win32" if windows else "linux"
        if text == "os.name":
            return "nt" if windows else "posix"
        if text in ("platform.system()", "platform.system().lower()"):
            system = "Windows" if windows else "Linux"
            return system.lower() if text.endswith("lower()") else system
        if isinstance(node, ast.Name) and node.id in self.names and depth < 8:
            return self._platform(self.names[node.id], depth + 1)
        return None


def cmake_truth(args: Sequence[str], facts: Facts) -> bool | None:
    """An ``if()``'s arguments for the target, or None."""
    words = list(args)
    if words[:1] == ["NOT"]:
        inner = cmake_truth(words[1:], facts)
        return None if inner is None else not inner
    standard = re.fullmatch(r"\$?\{?(CMAKE_(?:CXX|CUDA)_STANDARD)\}?", words[-1]) if words else None
    if standard is not None and words[:-1] in ([], ["DEFINED"]):
        return standard.group(1) in facts.cmake_defines
    if len(words) == 1:
        platform = {"WIN32": facts.windows, "MSVC": facts.windows, "UNIX": not facts.windows, "LINUX":
                    not facts.windows, "APPLE": False}
        return platform.get(words[0])
    if len(words) == 3 and words[1] in _CMAKE_OPS and words[0].strip("${}").lower() == "torch_version" \
            and re.fullmatch(r"\d+(\.\d+)*", words[2]):
        literal = tuple(int(p) for p in words[2].split("."))
        return _CMAKE_OPS[words[1]](_cut(facts.torch, len(literal)), literal)
    return None
