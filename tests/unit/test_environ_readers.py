"""Issue 31: ``os.environ`` is read by the settings resolver and where a child process's environment is composed,
nowhere else. Every other module reads a setting through ``ci.settings`` (``value``, ``current().environ``).

The scan: any ``os.environ`` attribute in a module of ci/ or windows/ (the modules tests/structure.py measures).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The modules allowed to touch ``os.environ``, each with its reason.
ALLOWED: dict[str, str] = {
    # the resolver: settings.current() without an entry reads the environment now
    "ci.settings": "the settings resolver",
    # the entry: resolves the command line against the environment; --traceback sets FARM_DEBUG for every child
    "ci.cli": "the entry's parse: resolves the settings from the process environment",
    "ci.__main__": "the entry: --traceback sets FARM_DEBUG=1 in its own environment for every child",
    # the launcher composes the environment of the `python -m ci` it starts (PYTHONPATH, FARM_PROG, the caller's own)
    "ci.launch": "composes the farm process's environment",
    # how to print: GitHub Actions' annotations and step summary (as cibuildwheel does), read before any entry
    "ci.log": "GITHUB_ACTIONS / GITHUB_STEP_SUMMARY decide how to print, before and without an entry",
    # the tool environments are made before any entry (noxfile.py, the launcher), and pip's child env is composed
    "ci.toolenv": "runs before any entry (noxfile, launcher); composes pip's environment",
    # every child process: os.environ plus the caller's additions, less `unset`; PATH with folders first
    "ci.proc": "composes every child's environment (child_environ, path_with) and logs what differs",
    # (the build's own environment is composed from current().environ: ci/builds/environment.py)
    # runs inside the project's build, in front of nvcc: its own environment is all it has
    "ci.nvcc.wrapper": "runs inside the build (in front of nvcc), standard library only: reads its own environment",
    "ci.nvcc.host_front": "runs inside the build (in front of CC and CXX), standard library only: reads its own "
                          "environment",
    # Windows: vcvars and the build read the Windows environment (PATH, VS variables) and compose child envs
    "windows.vcvars": "runs vcvarsall.bat from the caller's environment and captures what it changes",
}


def environ_readers() -> set[str]:
    found = set()
    for top in ("ci", "windows"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, ast.Attribute) and n.attr == "environ" and isinstance(n.value, ast.Name)
                   and n.value.id == "os" for n in ast.walk(tree)):
                found.add(name)
    return found


def test_only_the_resolver_and_child_environments_touch_os_environ() -> None:
    readers = environ_readers()
    unexpected = sorted(readers - set(ALLOWED))
    assert not unexpected, (f"{unexpected} read os.environ: read a setting through ci.settings (value(NAME), "
                            "current().environ), compose a child's environment with ci.proc, or add the module to "
                            "ALLOWED with its reason")
    stale = sorted(set(ALLOWED) - readers)
    assert not stale, f"{stale} no longer touch os.environ: remove them from ALLOWED"
