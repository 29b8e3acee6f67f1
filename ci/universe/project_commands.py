"""How the project's configured commands run: as argument lists for the interpreter under test, in a new empty
folder, never in the project's folder.

A flat-layout project (the package folder at the project root, as in the PyTorch extension template and most
extension projects) would otherwise import its *source* folder ahead of the installed wheel, and test nothing
that was built. cibuildwheel runs its test command the same way; ``{project}`` names the project's folder.
After a command that imports the package, :func:`origin_check` proves the module came from the environment
(its site-packages, or the folder the wheel was installed to), not from a source tree.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from ci import settings
from ci.universe import project


def expand(command: Sequence[str], *, python: Path | str = sys.executable, project_root: Path,
           out: Path | str = ".", wheel: Path | str = "") -> list[str]:
    """A configured command as an argument list: placeholders filled, ``python``/``pytest`` = the interpreter
    under test (whose torch and package are being tested)."""
    values = {"out": str(out), "wheel": str(wheel), "python": str(python), "project": str(project_root)}
    parts = [project.expand(p, values) for p in command]
    if parts and parts[0] in ("python", "python3", "python.exe", sys.executable):
        parts[0] = str(python)
    elif parts and parts[0] == "pytest":
        parts = [str(python), "-m", "pytest", *parts[1:]]
    return parts


def no_writes_env() -> dict[str, str]:
    """What keeps a configured command from writing into the project it names with ``{project}``: no bytecode
    caches beside its test files, no ``.pytest_cache`` in its folder (the farm writes only ``wheelhouse/``)."""
    addopts = f"{settings.current().environ.get('PYTEST_ADDOPTS', '')} -p no:cacheprovider".strip()
    return {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_ADDOPTS": addopts}


@contextlib.contextmanager
def scratch_folder(prefix: str = "farm-run-") -> Iterator[Path]:
    """The folder a configured command runs in: new and empty, so nothing of the source is importable."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def relative_path_hint(command: Sequence[str], root: Path) -> str:
    """What to write instead when a command names a path of the project relatively (it ran in an empty folder,
    where that path does not exist)."""
    found = [p for p in command[1:] if p and not p.startswith("-") and "{" not in p and not Path(p).is_absolute()
             and (root / p.split("::")[0]).exists()]
    if not found:
        return ""
    return (f"; commands run in an empty folder so the source cannot shadow the wheel: write {{project}}/{found[0]} "
            f"instead of {found[0]}")


#: Finds the module as `import` would and exits non-zero (one line) unless it comes from the environment: the
#: interpreter's site-packages or a folder given after the module name. It locates without running the module
#: (a top-level classic extension loads only after torch); standard library only, for any interpreter.
ORIGIN_CHECK = """\
import importlib.util, os, sys, sysconfig
name, extra = sys.argv[1], sys.argv[2:]
spec = importlib.util.find_spec(name)
if spec is None:
    sys.exit(f"error: {name} is not importable in the environment under test: check [tool.cuda-ext-farm] import-name")
where = os.path.realpath(spec.origin if spec.has_location and spec.origin else
                         next(iter(spec.submodule_search_locations or ["?"])))
allowed = [os.path.realpath(p) for p in {sysconfig.get_paths()[k] for k in ("purelib", "platlib")} | set(extra)]
if not any(where == a or where.startswith(a + os.sep) for a in allowed):
    sys.exit(f"error: {name} would be imported from {where}, not from the installed wheel ({', '.join(allowed)}): "
             "a source folder shadows it; run the tests from another folder and name paths with {project}")
print(f"{name} comes from the installed wheel: {where}")
"""


def origin_check(python: Path | str, import_name: str, *installed: Path | str) -> list[str]:
    """The command that proves ``import_name`` comes from the wheel (``installed``: extra install folders)."""
    return [str(python), "-c", ORIGIN_CHECK, import_name, *map(str, installed)]


def origin_check_line(import_name: str) -> str:
    """:func:`origin_check` as a shell line for cibuildwheel's test command (its ``python`` is the test venv's)."""
    return shlex.join(["python", "-c", ORIGIN_CHECK, import_name])
