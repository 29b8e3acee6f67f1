"""What importing a free-threaded wheel's package does to the GIL, in the import test of a ``cp313t`` target.

The import test of a free-threaded target runs the project's commands with ``PYTHON_GIL=0`` (the GIL forced off, so
they run as a free-threaded user's would and a race shows up as one), then this probe, which imports the package
once more under the interpreter's own default and reports ``sys._is_gil_enabled()`` after the import. Why twice:
``PYTHON_GIL=0`` overrides what a module declares, so under it the GIL is off after any import and the answer
would say nothing; under the default, a module without ``Py_mod_gil`` turns the GIL back on (with a RuntimeWarning
that names it), and the probe names those modules. The audit's ``gil:<module>`` check says the same statically
(ci/audit/gil.py).

Standard library only: the probe runs in the test environment's interpreter, host or container.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

#: The environment of the project's commands in a free-threaded target's import test.
FORCED_OFF = {"PYTHON_GIL": "0"}

#: Imports the package under the interpreter's default GIL mode and prints one JSON line: whether the interpreter is
#: free-threaded, the GIL before and after the import, the modules the interpreter turned it back on for.
PROBE = """\
import importlib, json, re, sys, sysconfig, warnings
name = sys.argv[1]
before = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    importlib.import_module(name)
after = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
modules = [m.group(1) for w in caught for m in [re.search(r"to load module '([^']+)'", str(w.message))] if m]
print("farm-gil-probe: " + json.dumps({"module": name, "free_threaded": bool(sysconfig.get_config_var(
    "Py_GIL_DISABLED")), "before": before, "after": after, "enabled_by": modules}))
"""
MARKER = "farm-gil-probe: "


@dataclasses.dataclass(frozen=True)
class GilReport:
    module: str
    free_threaded: bool
    before: bool
    after: bool
    enabled_by: tuple[str, ...]

    @property
    def stayed_disabled(self) -> bool:
        return self.free_threaded and not self.before and not self.after

    def line(self) -> str:
        """The build's line about it."""
        if not self.free_threaded:
            return f"GIL: {self.module} was imported by a GIL build of CPython (not free-threaded): nothing to say"
        if self.stayed_disabled:
            return (f"GIL: stayed disabled after importing {self.module} (sys._is_gil_enabled() False; the project's "
                    "commands ran with PYTHON_GIL=0)")
        by = f" by {', '.join(self.enabled_by)}" if self.enabled_by else ""
        return (f"GIL: re-enabled{by} when {self.module} was imported (sys._is_gil_enabled() True): a module without "
                "Py_mod_gil (the audit's gil: warning says what to add); the project's commands ran with PYTHON_GIL=0")


def command(python: Path | str, import_name: str) -> list[str]:
    """The probe as an argument list (``PYTHON_GIL`` must not be set in its environment)."""
    return [str(python), "-c", PROBE, import_name]


def shell_line(import_name: str) -> str:
    """The probe as a shell line for cibuildwheel's test command (``python``: the test venv's), with
    ``PYTHON_GIL`` unset whatever the test environment sets."""
    return "env -u PYTHON_GIL " + shlex.join(["python", "-c", PROBE, import_name])


def parse(output: str) -> GilReport | None:
    """The report in a command's output (the last probe line), None where there is none."""
    lines = [line.split(MARKER, 1)[1] for line in output.splitlines() if MARKER in line]
    if not lines:
        return None
    data = json.loads(lines[-1])
    return GilReport(str(data["module"]), bool(data["free_threaded"]), bool(data["before"]), bool(data["after"]),
                     tuple(str(m) for m in data["enabled_by"]))
