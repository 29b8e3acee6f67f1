"""What a free-threaded target (``3.13t``) changes in a cibuildwheel run (the container route, Windows).

* cibuildwheel 4 dropped CPython 3.13 free-threading (its selector ``cp313t`` is refused), so a ``3.13t`` target
  runs cibuildwheel 3.x from a lock of its own (ci/requirements/cibw313t.in) with the ``cpython-freethreading``
  group enabled; every other target keeps the farm's own cibuildwheel (4.x builds ``cp314t`` by default).
* The container's test command runs the project's smoke command and the origin check with ``PYTHON_GIL=0`` (the
  GIL forced off, as a free-threaded user's interpreter would run them), then the GIL probe under the interpreter's
  default, whose line is in cibuildwheel's output (ci/testing/gil_probe.py says why twice). On Windows the farm's
  own import test runs after the build (windows/build.py), without the probe yet.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ci import toolenv
from ci.testing import gil_probe
from ci.universe import project_commands
from ci.universe.targets import Target

#: The lock of the cibuildwheel that builds CPython 3.13t, and the group it must enable for it.
LOCK = "cibw313t"
ENABLE = "cpython-freethreading"


def cibuildwheel_python(python: str | None) -> Path:
    """The interpreter whose cibuildwheel builds the image Python ``python``."""
    return toolenv.farm_python(LOCK) if python == "3.13t" else Path(sys.executable)


def enable_env(python: str) -> dict[str, str]:
    return {"CIBW_ENABLE": ENABLE} if python == "3.13t" else {}


def symbols_python(target: Target) -> str:
    """The interpreter of the symbol check in the image: the image's own (``python``), but a free-threaded target's
    (its exports are the C API the wheel links: ``PyMutex_Lock`` is 3.13's; the image installs the farm's tools in
    it too, docker/Dockerfile)."""
    if not target.free_threaded:
        return "python"
    tag = "cp" + target.python.removesuffix("t").replace(".", "")
    return f"/opt/python/{tag}-{tag}t/bin/python"


def test_commands(target: Target, smoke: str) -> tuple[str, str]:
    """The smoke command and the origin check of ``target``'s test command (the probe after the check)."""
    origin = project_commands.origin_check_line(target.project.import_name)
    if not target.free_threaded:
        return smoke, origin
    return f"PYTHON_GIL=0 {smoke}", f"PYTHON_GIL=0 {origin} && {gil_probe.shell_line(target.project.import_name)}"
