"""The floor plan's limits (docs/contributing.md, "Design goals") as tests: tests/structure.py measures ci/ and
windows/ from their files, and each limit is asserted on its own, listing everything that breaks it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Functions over the limit while work on their modules is under way elsewhere (empty: none). The test fails while a
#: name here no longer needs to be (it is within the limit, or gone), so the set cannot outlive its reason.
PENDING: frozenset[str] = frozenset()


def _load_structure() -> ModuleType:
    spec = importlib.util.spec_from_file_location("farm_structure", ROOT / "tests" / "structure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


structure = _load_structure()


@pytest.fixture(scope="module")
def plan() -> Any:
    return structure.measure(ROOT)


def test_no_import_cycle(plan: Any) -> None:
    assert not plan.cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in plan.cycles)


def test_floors(plan: Any) -> None:
    assert 0 < plan.floors <= structure.MAX_FLOORS, (
        f"{plan.floors} floors (the longest import chain), more than {structure.MAX_FLOORS}")


def test_no_reexport(plan: Any) -> None:
    assert not plan.reexports, "re-exports (import the name from the module that defines it): " + ", ".join(
        plan.reexports)


def test_ci_top_level(plan: Any) -> None:
    assert plan.top_level <= structure.MAX_TOP_LEVEL, (
        f"{plan.top_level} modules at ci/'s top, more than {structure.MAX_TOP_LEVEL}: put the new one in a package")


def test_function_sizes(plan: Any) -> None:
    over = [f"{f.name} ({f.lines} lines)" for f in plan.long_functions if f.name not in PENDING]
    assert not over, (f"functions over {structure.MAX_FUNCTION_LINES} lines (split where a responsibility "
                      "separates): " + ", ".join(over))


def test_the_pending_functions_still_need_to_be_pending(plan: Any) -> None:
    long = {f.name for f in plan.long_functions}
    done = sorted(PENDING - long)
    assert not done, f"within {structure.MAX_FUNCTION_LINES} lines now (or gone): remove them from PENDING: {done}"


def test_module_sizes(plan: Any) -> None:
    big = [f"{name} ({lines} lines)" for name, lines in plan.big_modules]
    assert not big, (f"modules over {structure.MAX_MODULE_LINES} lines (make each a package by responsibility): "
                     + ", ".join(big))


def test_the_measure_sees_the_whole_plan(plan: Any) -> None:
    """The measure reads every module of ci/ and windows/ (a scan that found nothing would pass every limit)."""
    files = {p for top in structure.PACKAGES for p in (ROOT / top).rglob("*.py")}
    assert set(plan.modules.values()) == files
    assert "ci.cli" in plan.modules and "windows.toolkit" in plan.modules
    assert plan.edges["ci.cli"], "ci.cli imports farm modules: the edges are read"


def test_each_limit_is_measured_on_a_tree_that_breaks_it(tmp_path: Path) -> None:
    """A small tree with a cycle, a re-export, a long function and a big module: each is named (so the limits
    above can fail)."""
    (tmp_path / "ci").mkdir()
    (tmp_path / "windows").mkdir()
    (tmp_path / "ci" / "__init__.py").write_text("")
    (tmp_path / "windows" / "__init__.py").write_text("")
    (tmp_path / "ci" / "a.py").write_text("from ci import b\n")
    (tmp_path / "ci" / "b.py").write_text("from ci.a import x as x\n")
    body = "".join(f"    x{i} = {i}\n" for i in range(structure.MAX_FUNCTION_LINES))
    (tmp_path / "windows" / "long.py").write_text(f"def long() -> None:\n{body}")
    (tmp_path / "windows" / "big.py").write_text("x = 1\n" * (structure.MAX_MODULE_LINES + 1))
    broken = "\n".join(structure.broken(structure.measure(tmp_path)))
    assert "import cycle: ci.a -> ci.b" in broken
    assert "re-export ci.b: ci.a.x" in broken
    assert f"windows.long.long is {structure.MAX_FUNCTION_LINES + 1} lines" in broken
    assert f"windows.big is {structure.MAX_MODULE_LINES + 1} lines" in broken
