"""``matrix``: the project's targets (torch x Python x CUDA), a table or ``--json``."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from ci.commands.command import Command, Traits, selection_args
from ci.options import Options

if TYPE_CHECKING:
    from ci.universe import project, targets


@dataclasses.dataclass(frozen=True)
class Args:
    os: str = "all"
    json: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    parser.add_argument("--os", choices=("linux", "windows", "all"), default="all")
    parser.add_argument("--json", action="store_true")


def targets_of_oses(opts: Options[Any], os_choice: str, config: project.ProjectConfig) -> list[targets.Target]:
    """The selected targets (all of the project's without a selection) of every OS ``--os`` names."""
    from ci.universe import targets
    from ci.universe.selection import select

    chosen: list[targets.Target] = []
    for os_name in config.oses if os_choice == "all" else (os_choice,):
        sel = opts.selection
        chosen += select(config, sel, os_name) if not sel.empty else targets.platform_targets(config, os_name)
    return chosen


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.linux import routes
    from ci.log import log

    config = options.load_project(opts)
    chosen = targets_of_oses(opts, opts.args.os, config)
    if opts.args.json:
        log.json(routes.matrix_json(config, chosen))
    else:
        log.result(routes.matrix_table(config, chosen))
    return 0


COMMAND = Command("matrix", "the project's targets (torch x Python x CUDA)", configure, Args, run, Traits(selects=True))
