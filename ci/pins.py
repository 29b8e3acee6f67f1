"""Hash-pinned requirements: what the farm installs is locked to the bytes, not only the version.

Every ``ci/requirements/<name>.in`` is compiled to ``<name>.txt`` with a SHA-256 for every file of
every pinned version (``uv pip compile --universal --generate-hashes``), and every install the farm
makes reads a ``.txt`` with ``pip install --require-hashes``: a file that changed on an index breaks
the build loudly instead of changing the wheel silently.

The CUDA toolkit locks (``toolkit-<cell>``) and the cuobjdump lock are written from the matrix, the one
source of truth for those pins; ``nox -s lock`` regenerates everything and a test fails when a lock no
longer matches its source.

Locks:

* ``farm``, ``test``, ``lint``: the farm's own tools and its test/lint sessions;
* ``build``: the build tools of every build environment (the target's torch comes on top);
* ``image``: the tools installed into every builder image;
* ``ccache``: the compiler cache used when none is on PATH;
* ``toolkit-<cell>``: the CUDA toolkit wheels of a PyPI cell (with its library headers);
* ``cuobjdump``: the audit's fatbinary reader.
"""

from __future__ import annotations

import re
from pathlib import Path

from ci import matrix, proc
from ci.errors import MissingRequirement, UsageError

REQUIREMENTS = Path(__file__).resolve().parent / "requirements"
HAND_WRITTEN = ("farm", "test", "lint", "build", "image", "ccache")


def lock_path(name: str) -> Path:
    return REQUIREMENTS / f"{name}.txt"


def toolkit_lock(cell: matrix.Cell) -> str:
    return f"toolkit-{cell.name}"


def headers_lock(cell: matrix.Cell) -> str:
    return f"headers-{cell.name}"


def generated_inputs() -> dict[str, list[str]]:
    """The ``.in`` files the matrix writes: each PyPI cell's toolkit and library headers, and cuobjdump."""
    inputs: dict[str, list[str]] = {}
    for cell in matrix.CELLS:
        if cell.toolkit.kind != "pypi":
            continue
        inputs[toolkit_lock(cell)] = list(cell.toolkit.packages)
        if cell.toolkit.library_headers:
            inputs[headers_lock(cell)] = list(cell.toolkit.library_headers)
    inputs["cuobjdump"] = [matrix.CUOBJDUMP_REQUIREMENT]
    return inputs


def pinned_in(lock: Path) -> dict[str, str]:
    """``name -> version`` of every requirement a lock pins (names normalised)."""
    found: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if m:
            found[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return found


def unhashed(lock: Path) -> list[str]:
    """Requirements of ``lock`` that carry no ``--hash`` (an install with --require-hashes would refuse them)."""
    text = lock.read_text().replace("\\\n", " ")
    return [line.split()[0] for line in text.splitlines()
            if re.match(r"^[A-Za-z0-9]", line) and "--hash=sha256:" not in line]


def requirement_args(name: str) -> list[str]:
    """pip arguments that install lock ``name`` exactly (hashes required, nothing resolved again)."""
    path = lock_path(name)
    if not path.is_file():
        raise UsageError("no lock file for these requirements", path, "run `nox -s lock` and commit the result")
    return ["--require-hashes", "--no-deps", "-r", str(path)]


def compile_lock(name: str, uv: str, *, no_deps: bool) -> Path:
    source = REQUIREMENTS / f"{name}.in"
    out = lock_path(name)
    cmd = [uv, "pip", "compile", "--quiet", "--universal", "--generate-hashes", "--no-header",
           *(["--no-deps"] if no_deps else []), str(source.name), "-o", str(out.name)]
    proc.run(cmd, cwd=REQUIREMENTS, what=f"locking {name} failed", hint="uv's message is above")
    return out


def write_locks(uv: str | None) -> list[Path]:
    """Write the generated ``.in`` files and compile every lock (``nox -s lock``)."""
    if uv is None:
        raise MissingRequirement("uv is needed to compile the locks", "uv", "pip install uv (nox -s lock does)")
    written = []
    for name, reqs in generated_inputs().items():
        (REQUIREMENTS / f"{name}.in").write_text(
            "# Written by `nox -s lock` from ci/matrix.py (the pins live there); do not edit.\n"
            + "\n".join(reqs) + "\n")
        written.append(compile_lock(name, uv, no_deps=True))
    for name in HAND_WRITTEN:
        written.append(compile_lock(name, uv, no_deps=False))
    return written
