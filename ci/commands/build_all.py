"""``build-all``: every Linux target of the project, each in its container (aarch64 cross-compiled on the host)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command, Traits, check_ca_bundle, output_args, positive_int, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    base_image: str | None = None
    jobs: int = 1
    missing: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    output_args(parser)
    parser.add_argument("--base-image",
                        help="the base image of the builder images (default: FARM_BASE_IMAGE, else the cell's)")
    parser.add_argument("--jobs", type=positive_int, default=1, help="targets built at once (default 1)")
    parser.add_argument("--missing", action="store_true",
                        help="only the targets the wheelhouse has no wheel of (a stopped run continues where it "
                        "stopped)")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.builds import tail
    from ci.linux import buildall
    from ci.log import log
    from ci.release import coverage
    from ci.universe import targets
    from ci.universe.selection import select

    config = options.load_project(opts)
    sel = opts.selection
    chosen = select(config, sel) if not sel.empty else targets.platform_targets(config, "linux")
    chosen = buildall.local_equivalents(chosen)
    outputs = tail.Outputs.resolve(config.root, opts.wheelhouse, opts.build_dir, config.normalized_name)
    if opts.args.missing:
        outputs.check_writable()
        chosen = coverage.read(outputs.wheelhouse, chosen).missing
        if not chosen:
            log.result(f"every target has its wheel in {outputs.wheelhouse}: nothing to build")
            return 0
    return buildall.build_all(chosen, outputs, jobs=opts.args.jobs, base_image=opts.args.base_image,
                              max_jobs=opts.max_jobs)


COMMAND = Command("build-all", "every Linux target of the project, in containers", configure, Args, run,
                  Traits(compiles=True, selects=True), check=check_ca_bundle)
