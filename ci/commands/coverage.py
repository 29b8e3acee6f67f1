"""``coverage``: which of the project's targets a wheelhouse or PEP 503 site holds, which are missing."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ci.commands.command import Command, Traits, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    folder: str
    os: str = "all"
    json: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="a wheelhouse (<target-id>/ folders) or a release's PEP 503 site")
    selection_args(parser)
    parser.add_argument("--os", choices=("linux", "windows", "all"), default="all",
                        help="the platform whose targets to look for")
    parser.add_argument("--json", action="store_true", help="the answer as JSON")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.commands.matrix import targets_of_oses
    from ci.log import log
    from ci.release import coverage

    config = options.load_project(opts)
    chosen = targets_of_oses(opts, opts.args.os, config)
    found = coverage.read(Path(opts.args.folder).resolve(), chosen)
    if opts.args.json:
        log.json(found.as_dict())
    else:
        log.result(found.table(config.name))
    return 0


COMMAND = Command("coverage", "which targets a wheelhouse or PEP 503 site holds, which are missing", configure,
                  Args, run, Traits(selects=True))
