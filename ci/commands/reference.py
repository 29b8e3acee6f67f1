"""The commands as a user reads them: ``--help``'s grouped list (build and test, release, maintenance) and
``docs/commands.md``, every command with every option, both generated from the parsers ``ci/cli.py`` builds.

Standard library only (``ci/cli.py`` builds ``--help`` before any environment exists).
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterable, Mapping

from ci.commands.command import Command

#: The groups ``--help`` lists the commands in, each command in one.
GROUPS: dict[str, tuple[str, ...]] = {
    "build and test": ("matrix", "build", "develop", "test", "run", "audit", "build-cuda", "build-all", "build-win",
                       "shell", "jit", "test-gpu"),
    "release": ("release", "workflows", "coverage", "doctor", "reproduce"),
    "maintenance (for the farm's own upkeep)": ("lock", "adopt-torch", "torch-archs", "images", "base-image",
                                                "toolkit", "bench-builds"),
}
#: Options of every command (before or after its name), left out of each command's own list.
GLOBAL_OPTIONS = ("--traceback", "--show-settings", "--version", "--help")
WIDTH = 100


def epilog(commands: Mapping[str, Command], prog: str) -> str:
    """``--help``'s list of commands, by group, wrapped at :data:`WIDTH` columns."""
    pad = max(len(name) for name in commands) + 4
    lines: list[str] = []
    for group, names in GROUPS.items():
        lines.append(f"{group}:")
        for name in names:
            lines += textwrap.wrap(commands[name].help, WIDTH, initial_indent=f"  {name}".ljust(pad),
                                   subsequent_indent=" " * pad)
        lines.append("")
    lines.append(f"`{prog} COMMAND --help` lists a command's options.")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def _flag(action: argparse.Action) -> str:
    """How the option is written: ``--cuda CUDA``, ``--json``, ``WHEEL``."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    name = ", ".join(action.option_strings)
    if action.nargs == 0:
        return name
    value = action.metavar or action.dest.upper()
    return f"{name} {value}"


def _meaning(action: argparse.Action) -> str:
    text = action.help or ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of: {', '.join(str(c) for c in action.choices)})"
    default = action.default
    if default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0 and "default" not in text:
        text += f" (default: {default})"
    return text.strip()


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The command's own options and arguments, in the order its parser has them (the global ones left out)."""
    return [a for a in parser._actions
            if not set(a.option_strings) & set(GLOBAL_OPTIONS) and a.help != argparse.SUPPRESS]


def markdown(parser: argparse.ArgumentParser, parsers: Mapping[str, argparse.ArgumentParser],
             commands: Mapping[str, Command], verbs: Iterable[str]) -> str:
    """``docs/commands.md``: the global options, then each command (by group) with its usage and every option."""
    lines = ["# Commands", "",
             "<!-- generated from the command parsers (ci/cli.py, ci/commands/) by tests/unit/commands/test_table.py "
             "(FARM_WRITE_DOCS=1 rewrites it); do not edit -->", "",
             "`cuda-ext-farm COMMAND [OPTIONS]`; `cuda-ext-farm COMMAND --help` prints the same list for one command. "
             "Settings shared by every command, and the environment variables behind them: [settings.md](settings.md).",
             "", "Options of `cuda-ext-farm` itself (`--traceback` and `--show-settings` also after a command's name):",
             "", "| option | meaning |", "| --- | --- |"]
    lines += [f"| `{_flag(a)}` | {_cell(_meaning(a))} |" for a in parser._actions
              if set(a.option_strings) & set(GLOBAL_OPTIONS) and a.option_strings != ["-h", "--help"]]
    for group, names in GROUPS.items():
        lines += ["", f"## {group[:1].upper()}{group[1:]}"]
        for name in names:
            sub = parsers[name]
            usage = " ".join(sub.format_usage().split()).removeprefix("usage: ")
            lines += ["", f"### `{name}`", "", _cell(commands[name].help[:1].upper() + commands[name].help[1:]) + ".",
                      "", f"`{usage}`", ""]
            if commands[name].traits.compiles:
                lines += ["It compiles: `--max-jobs` (or `MAX_JOBS`) sets the parallel compile jobs.", ""]
            lines += ["| option | meaning |", "| --- | --- |"]
            lines += [f"| `{_flag(a)}` | {_cell(_meaning(a))} |" for a in options(sub)]
    lines += ["", "## Verbs", "", *verbs, "",
              "The old spellings (`release --dry-run`, `workflows --check`, `workflows --pull-image CELL`, "
              "`workflows --dispatch-plan`, ...) still work for one release and print a note naming the verb."]
    return "\n".join(lines) + "\n"
