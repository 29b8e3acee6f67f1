"""Every nox session the contributors' guide lists (docs/contributing.md, Sessions) exists, and works on a fresh
copy of the checkout.

Cheap sessions run fully; the others run up to their first real step: their own ``--help`` (which goes
through the farm's parser), the first step that needs something a fresh checkout does not have (a built
wheel), or nox's ``--install-only`` for the sessions with a virtualenv of their own. ``tests`` (and the
``compat`` sessions it notifies) is the session this suite runs in: CI runs it on a clean clone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOX = shutil.which("nox") or str(Path(sys.executable).parent / "nox")

#: session -> (nox arguments after the session, exit code, text the output must contain)
FULL = {
    "matrix": (["--", "--json"], 0, '"id": "fusedops-stable-cu130-cp310abi3-linux_x86_64"'),
    "workflows": (["--", "check"], 0, "follow the matrix"),
    "build-win-cuda-13": ([], 3, "Windows builds need a Windows host with Visual Studio"),
    "build-win-cuda-12": ([], 3, "Windows builds need a Windows host with Visual Studio"),
    "bench": ([], 2, "error: no built wheel of fusedops-stable-cu130"),
    "compat-floor": ([], 2, "error: no built wheel of the release target"),
}
INSTALL_ONLY = {"lint", "lock"}
#: CI runs tests (and compat); tests-extended is the same test environment with `-m 'docker or extended'`,
#: run by hand.
RUN_BY_CI = {"tests", "compat", "tests-extended"}


def table_sessions() -> set[str]:
    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    section = text.split("\n## Sessions\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`(?:nox -s )?([a-z][a-z0-9-]*)", first_cell))
    return names


def noxfile_sessions() -> set[str]:
    # `--list --json` shows only the default selection; the text listing shows every session.
    out = subprocess.run([NOX, "-f", str(ROOT / "noxfile.py"), "--list"], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    return set(re.findall(r"^[*-] ([a-z][a-z0-9-]*)[( ]", out, flags=re.MULTILINE))


def test_the_sessions_table_lists_every_session_and_only_sessions() -> None:
    listed, defined = table_sessions(), noxfile_sessions()
    assert listed == defined, (f"docs/contributing.md only: {sorted(listed - defined)}; "
                               f"noxfile only: {sorted(defined - listed)}")


#: The commands of the table without a pass-through session of their own name, and what stands in for one.
NO_PASS_THROUGH = {
    "test": "none: `tests` is the farm's own suite; the project's test command runs as `python -m ci test`",
    "run": "bench (`run bench`)",
    "build-win": "build-win-cuda-13, build-win-cuda-12",
    "lock": "lock, written in noxfile.py: it installs uv first",
}


def test_every_command_has_its_session_or_says_why() -> None:
    """The sessions table, nox and the parser cannot drift: the pass-through sessions are the table's, and the table
    says which commands have none."""
    from ci.cli import COMMANDS, build_parser

    defined = noxfile_sessions()
    without = {name for name, command in COMMANDS.items() if not command.session}
    assert without == set(NO_PASS_THROUGH)
    assert {name for name in COMMANDS if name not in without} <= defined
    parser_commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert parser_commands == set(COMMANDS)
    # Each pass-through session's docstring is its command's help (nox -l shows it).
    listing = subprocess.run([NOX, "-f", str(ROOT / "noxfile.py"), "--list"], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    for name, command in COMMANDS.items():
        if command.session:
            assert f"- {name} -> {command.help[:1].upper()}{command.help[1:]}." in listing


def run_nox(copy: Path, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "300", "FARM_NOX_ENVDIR": str(tmp_path / "nox-envs")}
    for variable in ("FARM_PROJECT", "FARM_WHEELHOUSE", "FARM_BUILD_DIR"):
        env.pop(variable, None)
    return subprocess.run([NOX, "-f", str(copy / "noxfile.py"), *args], cwd=copy, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)


