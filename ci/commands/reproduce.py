"""``reproduce``: one target built twice from two clean clones, the bytes compared."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command, Traits, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    container: bool = False
    base_image: str | None = None
    keep: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    parser.add_argument("--container", action="store_true", help="build in the cell's container (build-cuda)")
    parser.add_argument("--base-image",
                        help="the base image of the builder images (default: FARM_BASE_IMAGE, else the cell's)")
    parser.add_argument("--keep", action="store_true", help="keep the clones and wheels")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.linux import reproduce

    (target,) = options.resolve(opts)[:1]
    container = opts.args.container or target.cell.toolkit.kind != "pypi"
    reproduce.reproduce(target, container=container, base_image=opts.args.base_image, keep=opts.args.keep)
    return 0


COMMAND = Command("reproduce", "build one target twice from two clean clones and compare the bytes", configure, Args,
                  run, Traits(compiles=True, default_target=True, selects=True))
