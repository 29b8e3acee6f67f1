"""The farm's floor plan, measured from its own files (ci/ and windows/): the longest import chain (floors), import
cycles, re-exports (``from ci.x import y as y``), how many modules sit at ci/'s top, the functions over 60 lines and
the modules over the size guide. ``--check`` fails (exit 1) when a limit of docs/contributing.md is broken.

    python tests/structure.py [--check] [--json]

Standard library only: ``nox -s lint`` and CI's lint job run it before any environment of the farm exists, and
tests/unit/test_structure.py holds the same limits. An import inside a function counts as much as one at the top
(it is an arrow of the floor plan all the same).
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ci", "windows")
#: The limits (docs/contributing.md, "Design goals").
MAX_FLOORS = 13
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 450
#: ci/'s own top level: the entry, the settings and the ground floor; everything else lives in a package.
MAX_TOP_LEVEL = 12


class Function(NamedTuple):
    name: str
    lines: int


class Plan(NamedTuple):
    modules: dict[str, Path]
    edges: dict[str, set[str]]
    reexports: list[str]
    cycles: list[list[str]]
    floors: int
    top_level: int
    long_functions: list[Function]
    big_modules: list[tuple[str, int]]


def module_files(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """The farm modules ``name`` imports, and its re-exports (``import x as x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    reexports: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {t for a in node.names if (t := _resolve(a.name, modules))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}", modules) or _resolve(base, modules)
                if target:
                    found.add(target)
                if alias.asname == alias.name and base.split(".")[0] in PACKAGES:
                    reexports.append(f"{name}: {base}.{alias.name}")
    found.discard(name)
    return found, reexports


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan: no recursion limit to raise)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def floors(edges: dict[str, set[str]]) -> int:
    """The longest import chain, in modules (an acyclic graph: cycles are reported first)."""
    depth: dict[str, int] = {}

    def of(node: str) -> int:
        pending = [node]
        while pending:
            current = pending[-1]
            todo = [c for c in edges[current] if c not in depth]
            if todo:
                pending.extend(todo)
                continue
            pending.pop()
            depth[current] = 1 + max((depth[c] for c in edges[current]), default=0)
        return depth[node]

    return max((of(n) for n in edges), default=0)


def long_functions(modules: dict[str, Path]) -> list[Function]:
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(Function(f"{name}.{node.name}", lines))
    return sorted(found, key=lambda f: -f.lines)


def measure(root: Path = ROOT) -> Plan:
    modules = module_files(root)
    edges: dict[str, set[str]] = {}
    reexports: list[str] = []
    for name, path in modules.items():
        edges[name], found = imports(name, path, modules)
        reexports += found
    loops = cycles(edges)
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules.items()}
    return Plan(modules, edges, reexports, loops, -1 if loops else floors(edges),
                len(list((root / "ci").glob("*.py"))), long_functions(modules),
                sorted(((n, s) for n, s in sizes.items() if s > MAX_MODULE_LINES), key=lambda x: -x[1]))


def broken(plan: Plan) -> list[str]:
    """The limits ``plan`` breaks, one line each."""
    found = [f"import cycle: {' -> '.join(c)}" for c in plan.cycles]
    if plan.floors > MAX_FLOORS:
        found.append(f"{plan.floors} floors (the longest import chain), more than {MAX_FLOORS}")
    found += [f"re-export {r}: import the name from the module that defines it" for r in plan.reexports]
    if plan.top_level > MAX_TOP_LEVEL:
        found.append(f"{plan.top_level} modules at ci/'s top, more than {MAX_TOP_LEVEL}: put the new one in a package")
    found += [f"{f.name} is {f.lines} lines, more than {MAX_FUNCTION_LINES}: split it where a responsibility "
              "separates" for f in plan.long_functions]
    found += [f"{n} is {s} lines, more than {MAX_MODULE_LINES}: make it a package by responsibility"
              for n, s in plan.big_modules]
    return found


def summary(plan: Plan) -> str:
    return (f"modules {len(plan.modules)}, floors {plan.floors}, cycles {len(plan.cycles)}, re-exports "
            f"{len(plan.reexports)}, ci/*.py {plan.top_level}, functions over {MAX_FUNCTION_LINES} lines "
            f"{len(plan.long_functions)}, modules over {MAX_MODULE_LINES} lines {len(plan.big_modules)}")


def main(argv: list[str]) -> int:
    plan = measure()
    if "--json" in argv:
        print(json.dumps({"modules": len(plan.modules), "floors": plan.floors, "cycles": plan.cycles,
                          "reexports": plan.reexports, "ci_top_level_py": plan.top_level,
                          "long_functions": [list(f) for f in plan.long_functions],
                          "big_modules": plan.big_modules}, indent=2))
    else:
        print(summary(plan))
    problems = broken(plan)
    for line in problems:
        print(f"  {line}", file=sys.stderr)
    return 1 if problems and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
