"""A build that compiled nothing: its wheel holds no compiled library (a pure-Python wheel), and the environment
variables the project's ``setup.py`` decides its ``ext_modules`` from.

A real and common shape: the extension is built only when a variable of the project's own is set, so a build
without it succeeds and writes a ``py3-none-any`` wheel, which no repair tool can repair::

    ext_modules = []
    if os.environ.get("MYEXT_BUILD_CUDA") == "1":
        ext_modules = [CUDAExtension("myext._C", ["csrc/ops.cu"])]
    setup(name="myext", ext_modules=ext_modules, cmdclass={"build_ext": BuildExtension})

:func:`check_wheel` (the build tail, before the repair) and :func:`stopped` (the output of cibuildwheel, which stops
at such a wheel before its repair) name it, with the variables that decide ``ext_modules`` (:func:`deciding`), read
with ``ast`` as the download advice reads its switches (``download``): an ``if`` (or ``x if c else y``) whose branch
sets, extends or returns the extension list, or calls ``setup(ext_modules=...)``, and the variables its condition
reads: directly, through a name the script assigns from them (``BUILD = os.getenv("X") == "1"``) or through a
function of the script that reads them (``_flag("X")`` for a helper that reads its argument, ``want_cuda()``).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

from ci.builds.failure.causes import TABLE, Cause, Found
from ci.builds.failure.download import Switch, compared_with, read_name
from ci.errors import UsageError

#: A compiled library in a wheel: an extension module or a shared library (Linux, Windows, macOS).
LIBRARY = re.compile(r"\.(?:so(?:\.\d+)*|pyd|dll|dylib)$")
#: cibuildwheel's words for a pure wheel (it stops before the repair), and auditwheel's.
STOPPED = re.compile(r"Build failed because a pure Python wheel was generated|"
                     r"This does not look like a platform wheel")
WHAT = "the build wrote a pure-Python wheel with no compiled library"
EXT = "ext_modules"
#: Names of a variable that leaves the extension out when set: never given as the value to set.
SKIPS = re.compile(r"SKIP|(?:^|_)NO_|DISABLE|WITHOUT|PURE|NO_?EXT", re.IGNORECASE)


def libraries(wheel: Path) -> list[str] | None:
    """The compiled libraries in ``wheel``; None when it is no zip archive (the repair then says so)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return [n for n in zf.namelist() if LIBRARY.search(n)]
    except (OSError, zipfile.BadZipFile):
        return None


def check_wheel(wheel: Path, root: Path, *, cpu: bool) -> None:
    """Refuse a built wheel with no compiled library, before its repair, naming what in ``root`` decided it."""
    if libraries(wheel) == []:
        raise UsageError(WHAT, wheel.name, advice(_script(root), cpu=cpu) + "; nothing was written to the wheelhouse")


def stopped(output: str, build_script: str, *, cpu: bool) -> Found | None:
    """cibuildwheel's (or auditwheel's) refusal of a pure wheel in a build's output, as a cause of that failure."""
    every = list(STOPPED.finditer(output))
    if not every:
        return None
    found = every[-1]
    return Found(found.start(), Cause(WHAT, found.group(0), advice(build_script or None, cpu=cpu)))


def _script(root: Path) -> str | None:
    try:
        return (root / "setup.py").read_text(errors="replace")
    except OSError:
        return None


def advice(script: str | None, *, cpu: bool) -> str:
    """What to do: set the variable ``setup.py`` decides ``ext_modules`` from (``cpu-env`` for a CPU build)."""
    key = "cpu-env" if cpu else "build-env"
    if script is None:
        return ("the project's build backend compiled nothing: give it the extension to compile (a setup.py whose "
                "setup() gets ext_modules=[CUDAExtension(...)] from torch.utils.cpp_extension, or a CMakeLists.txt "
                "that builds a module)")
    decided = deciding(script)
    if not decided:
        return ("setup.py gave setup() no ext_modules in this build: pass ext_modules=[CUDAExtension(...)] "
                "(torch.utils.cpp_extension) on the path the build takes with the farm's variables (FORCE_CUDA=1, "
                f"no GPU) or set the variables it needs in {key} of {TABLE}")
    names = ", ".join(d.switch.name + ("" if d.switch.literal is None else f' (compared with "{d.switch.literal}")')
                      for d in decided)
    example = next((d.switch for d in decided if d.builds and not SKIPS.search(d.switch.name)), None)
    shown = f" ({key} = {{ {example.name} = \"{example.on()}\" }})" if example is not None else ""
    return (f"setup.py decides ext_modules from {names}: set the value that builds the extension in {key} of "
            f"{TABLE}{shown}, then build again")


@dataclasses.dataclass(frozen=True)
class Decision:
    """A variable a condition around ``ext_modules`` reads, and whether the extensions are built when it reads as on
    (``if os.environ.get("X") == "1": ext_modules = [...]``: yes; ``if not os.environ.get("X"): return []``: yes;
    ``if os.environ.get("SKIP_X"): ext_modules = []``: no). Read from an expression alone, ``builds`` says whether
    the expression holds when the variable is on (it is not under a ``not``)."""

    switch: Switch
    builds: bool


def deciding(script: str) -> list[Decision]:
    """The environment variables the conditions around ``ext_modules`` read, in the order the script reads them."""
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return []
    reads = Reads(tree)
    names, functions, tests = ext_holders(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            function = reads.function_of(node)
            body, orelse = (_builds(node.body, names, functions, function),
                            _builds(node.orelse, names, functions, function))
            if body is not None or orelse is not None:
                tests.append((node.test, body if body is not None else not orelse))
    found: dict[str, Decision] = {}
    for test, builds in sorted(tests, key=lambda t: (t[0].lineno, t[0].col_offset)):
        for decision in reads.of(test):
            decision = dataclasses.replace(decision, builds=decision.builds == builds)
            known = found.get(decision.switch.name)
            if known is None or (known.switch.literal is None and decision.switch.literal is not None):
                found[decision.switch.name] = decision
    return list(found.values())


def ext_holders(tree: ast.Module) -> tuple[set[str], set[str], list[tuple[ast.expr, bool]]]:
    """The names that hold the extension list, the functions that return it, and the conditions inside those values
    (``[...] if BUILD else []``; with whether the extensions are built when the condition holds): from
    ``setup(ext_modules=...)`` (or a ``{"ext_modules": ...}`` dict) back through the assignments of the names and
    the returns of the functions."""
    names, functions = {EXT}, set()
    tests: list[tuple[ast.expr, bool]] = []
    queue = [n.value for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == EXT]
    queue += [v for n in ast.walk(tree) if isinstance(n, ast.Dict)
              for k, v in zip(n.keys, n.values, strict=True) if isinstance(k, ast.Constant) and k.value == EXT]
    seen: set[int] = set()
    while queue:
        value = queue.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        for part in _direct(value):
            if isinstance(part, ast.IfExp):
                tests.append((part.test, not _empty(part.body)))
            elif isinstance(part, ast.Name):
                names.add(part.id)
            elif isinstance(part, ast.Call) and isinstance(part.func, ast.Name):
                functions.add(part.func.id)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None and any(
                    _is_ext(t, names) for t in _targets(node)):
                queue.append(node.value)
            elif isinstance(node, ast.FunctionDef) and node.name in functions:
                queue += [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
    return names, functions, tests


def _direct(value: ast.expr) -> Iterator[ast.expr]:
    """The parts of an expression that are the list itself (a name, a call of a function, a branch of a condition, an
    element spread into it), not the arguments of an extension (``CUDAExtension(name, sources)``)."""
    yield value
    children: list[ast.expr] = []
    if isinstance(value, ast.IfExp):
        children = [value.body, value.orelse]
    elif isinstance(value, ast.BinOp):
        children = [value.left, value.right]
    elif isinstance(value, ast.BoolOp):
        children = list(value.values)
    elif isinstance(value, (ast.List, ast.Tuple)):
        children = [e for e in value.elts if isinstance(e, ast.Starred)]
    elif isinstance(value, ast.Starred):
        children = [value.value]
    for child in children:
        yield from _direct(child)


def _targets(node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def _is_ext(target: ast.expr, names: set[str]) -> bool:
    """Whether an assignment's target is the extension list: a name that holds it, or ``kwargs["ext_modules"]``."""
    if isinstance(target, ast.Name):
        return target.id in names
    return isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and target.slice.value == EXT


def _empty(value: ast.expr | None) -> bool:
    """Whether a value is no extension at all: ``[]``, ``()``, ``None``, ``list()``."""
    return value is None or (isinstance(value, (ast.List, ast.Tuple, ast.Set)) and not value.elts) or (
        isinstance(value, ast.Constant) and value.value is None) or (
        isinstance(value, ast.Call) and ast.unparse(value.func) in ("list", "tuple") and not value.args)


def _builds(branch: list[ast.stmt], names: set[str], functions: set[str], function: str | None) -> bool | None:
    """What a branch does to the extension list: True when it sets, extends or returns one with extensions (or calls
    ``setup`` with it), False when it sets or returns an empty one (``return []`` in a function that returns the
    list), None when it does not touch it."""
    found: bool | None = None
    for node in (n for stmt in branch for n in ast.walk(stmt)):
        value: ast.expr | None
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
                _is_ext(t, names) for t in _targets(node)):
            value = node.value
        elif isinstance(node, ast.Call) and any(k.arg == EXT for k in node.keywords):
            value = next(k.value for k in node.keywords if k.arg == EXT)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(
                node.func.value, ast.Name) and node.func.value.id in names and node.func.attr in (
                "append", "extend", "insert"):
            value = node.args[-1] if node.args else None
        elif isinstance(node, ast.Return) and function in functions:
            value = node.value
        else:
            continue
        found = found or not _empty(value)
    return found


#: How a script names the environment mapping.
ENVIRON = ("os.environ", "environ")


def _key(node: ast.AST) -> ast.expr | None:
    """The key expression of an environment read (``os.environ.get(KEY)``, ``os.getenv(KEY)``, ``os.environ[KEY]``)."""
    if isinstance(node, ast.Call) and node.args and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "get" and ast.unparse(node.func.value)
             in ENVIRON) or ast.unparse(node.func) in ("os.getenv", "getenv")):
        return node.args[0]
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ENVIRON:
        return node.slice
    return None


class Reads:
    """The environment variables an expression reads: directly, through a name the script assigns from them, through
    a helper that reads the variable its argument names (``def _flag(name): return os.environ.get(name, "0")``), or
    through a call of a function of the script that reads them."""

    def __init__(self, tree: ast.Module) -> None:
        self.parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        self.helpers: dict[str, int] = {}
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        for fn in defs:
            params = [a.arg for a in fn.args.args]
            keys = [k.id for k in map(_key, ast.walk(fn)) if isinstance(k, ast.Name) and k.id in params]
            if keys:
                self.helpers[fn.name] = params.index(keys[0])
        self.names: dict[str, list[Decision]] = {}
        self.functions: dict[str, list[Decision]] = {}
        for _ in range(3):  # a name of a name, a function calling a function
            names: dict[str, dict[str, Decision]] = {}
            for node in ast.walk(tree):
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    for target in _targets(node):
                        if isinstance(target, ast.Name):
                            names.setdefault(target.id, {}).update((d.switch.name, d) for d in self.of(node.value))
            self.names = {name: list(found.values()) for name, found in names.items()}
            self.functions = {fn.name: list({d.switch.name: d for stmt in fn.body for d in self.of(stmt)}.values())
                              for fn in defs if fn.name not in self.helpers}

    def function_of(self, node: ast.AST) -> str | None:
        """The function the node is in (None: the module)."""
        parent = self.parents.get(id(node))
        while parent is not None and not isinstance(parent, ast.FunctionDef):
            parent = self.parents.get(id(parent))
        return parent.name if parent is not None else None

    def of(self, root: ast.AST) -> list[Decision]:
        found: list[Decision] = []
        for node in ast.walk(root):
            name = read_name(node)
            if name is None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in self.helpers and len(node.args) > self.helpers[node.func.id]:
                arg = node.args[self.helpers[node.func.id]]
                name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
            if name is not None:
                found.append(Decision(Switch(name, compared_with(node, self.parents)), not self._negated(node, root)))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.names:
                found += [dataclasses.replace(d, builds=d.builds != self._negated(node, root))
                          for d in self.names[node.id]]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions:
                found += [dataclasses.replace(d, builds=d.builds != self._negated(node, root))
                          for d in self.functions[node.func.id]]
        return found

    def _negated(self, node: ast.AST, root: ast.AST) -> bool:
        """Whether ``node`` is under an odd number of ``not`` up to ``root``."""
        negated = False
        parent = self.parents.get(id(node)) if node is not root else None
        while parent is not None:
            negated ^= isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)
            parent = self.parents.get(id(parent)) if parent is not root else None
        return negated
