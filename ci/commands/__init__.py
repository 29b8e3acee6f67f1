"""The farm's commands: one module per verb, listed once in :data:`COMMANDS`.

Each module declares its parser (``configure``), its arguments (a frozen ``Args`` dataclass), its traits (what the
entry checks before it runs: ``ci/commands/command.py``) and ``run(options) -> int``, and ends with its ``COMMAND``.
``ci/cli.py`` builds ``python -m ci``'s parser from this table, ``noxfile.py`` its pass-through sessions, and
``docs/commands.md`` is generated from it. Nothing below the entry imports this package.

Standard library only at import time (the command modules import what they run with inside ``run``).
"""

from __future__ import annotations

from ci.commands import (
    audit,
    base_image,
    bench_builds,
    build,
    build_all,
    build_cuda,
    build_win,
    coverage,
    develop,
    doctor,
    images,
    jit,
    lock,
    matrix,
    release,
    reproduce,
    run,
    shell,
    test,
    test_gpu,
    toolkit,
    torch_archs,
    workflows,
)
from ci.commands.command import Command

#: Every command, in the order ``--help`` lists them.
COMMANDS: dict[str, Command] = {c.name: c for c in (
    matrix.COMMAND, build.COMMAND, develop.COMMAND, audit.COMMAND, build_cuda.COMMAND, build_all.COMMAND,
    coverage.COMMAND, doctor.COMMAND, shell.COMMAND, test_gpu.COMMAND, test.COMMAND, run.COMMAND, build_win.COMMAND,
    jit.COMMAND, release.COMMAND, workflows.COMMAND, reproduce.COMMAND, bench_builds.COMMAND, torch_archs.COMMAND,
    lock.COMMAND, base_image.COMMAND, images.COMMAND, toolkit.COMMAND,
)}


def markdown() -> str:
    """``docs/commands.md``: every command, its help, its traits and its nox session."""
    lines = ["# Commands", "",
             "<!-- generated from ci/commands/ by tests/unit/commands/test_table.py (FARM_WRITE_DOCS=1 rewrites it); "
             "do not edit -->", "",
             "`python -m ci <command>` (`cuda-ext-farm <command>`); `--help` after a command lists its options. "
             "Settings shared by every command: [settings.md](settings.md).", "",
             "| command | what it does | compiles (MAX_JOBS) | nox session |", "| --- | --- | --- | --- |"]
    for command in COMMANDS.values():
        session = f"`nox -s {command.name}`" if command.session else "-"
        lines.append(f"| `{command.name}` | {command.help} | {'yes' if command.traits.compiles else ''} | "
                     f"{session} |")
    return "\n".join(lines) + "\n"
