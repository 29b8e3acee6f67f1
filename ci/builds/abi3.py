"""The abi3 floor a built wheel names, held against the one its target's id names.

A target's id names its abi3 floor (``…-cp39abi3-…``), decided before the build from what the project declares
(``ci/universe/targets/axes.py`` ``abi3_floor``: ``py_limited_api`` of bdist_wheel, else requires-python, else the
target's Python). Everything is keyed by that id before the build runs: the wheelhouse folder, the generated
workflows' jobs and the artifacts they upload, the release plan, ``coverage`` and ``build-all --missing``. A floor
that only the built wheel shows (a ``py_limited_api`` computed in setup.py) therefore does not rename the target
afterwards, which would make each of them miss the wheel: the wheel is kept under its id (every lookup accepts a
``cpXY-abi3`` wheel at or below the target's Python), its report records the floor it really has
(``abi3_floor``), and the build says what to declare so that the id names it from the next build on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ci.universe import shapes
from ci.universe.targets import Target


def built_floor(tags: Iterable[str]) -> str | None:
    """The floor a built wheel's tags name: the lowest ``cpXY`` of its ``cpXY-abi3-<platform>`` tags (``3.9``);
    None when it has no abi3 tag."""
    floors = [f"3.{m.group(1)}" for t in tags if (m := re.fullmatch(r"cp3(\d+)-abi3-\S+", t))]
    return min(floors, key=shapes.version_key) if floors else None


def mismatch(target: Target, tags: Iterable[str]) -> str | None:
    """What to say when an abi3 target's wheel has another floor than its id names (None: they agree)."""
    floor = built_floor(tags) if target.abi3 else None
    if floor is None or floor == target.oldest_python:
        return None
    cp = "cp" + floor.replace(".", "")
    return (f"the wheel is {cp}-abi3 but the target's id names {target.python_tag}: the farm read no floor from the "
            f'project before the build; declare it (requires-python = ">={floor}" in [project], or a literal '
            f'py_limited_api = "{cp}" in [tool.distutils.bdist_wheel], setup.cfg or setup.py) and the id names '
            f"{cp}abi3")
