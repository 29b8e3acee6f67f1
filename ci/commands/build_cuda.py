"""``build-cuda``: targets built by cibuildwheel in their cell's builder image."""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from ci.commands.command import Command, Traits, check_ca_bundle, output_args, selection_args
from ci.errors import UsageError
from ci.options import Options

if TYPE_CHECKING:
    from ci.universe.targets import Target


@dataclasses.dataclass(frozen=True)
class Args:
    cell: str | None = None
    base_image: str | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cell", nargs="?", help="same as --cuda")
    selection_args(parser)
    output_args(parser)
    parser.add_argument("--deadline", metavar="WHEN", help="stop starting compiles so as to end by then: 5h30m, 90m, "
                        "23:30 (FARM_DEADLINE); the same command resumes")
    parser.add_argument("--base-image", help="base image (default: FARM_BASE_IMAGE or the cell's)")


def finish(ns: argparse.Namespace) -> None:
    """The positional cell is --cuda."""
    if ns.cell:
        if ns.cuda and ns.cuda != ns.cell:
            raise UsageError("two CUDA versions were given", f"{ns.cell} and --cuda {ns.cuda}", "give one")
        ns.cuda = ns.cell


def container_build(opts: Options[Any], chosen: tuple[Target, ...], base_image: str | None) -> int:
    """Each target in its cell's builder image (build-cuda, reproduce --container)."""
    from ci.builds import report, tail
    from ci.linux import container, images
    from ci.log import log
    from ci.universe.targets import platforms

    project = chosen[0].project
    outputs = tail.Outputs.resolve(project.root, opts.wheelhouse, opts.build_dir, project.normalized_name)
    for target in chosen:
        if target.cross:
            raise UsageError(f"{target.id} is for {target.arch}, and a builder image runs this machine's "
                             f"{platforms.host_arch()} code", target.id,
                             f"cross-compile it on the host (build --arch {target.arch} --target "
                             f"{target.id}), or build it in its container on an {target.arch} machine")
    for target in chosen:
        spec = images.spec_for(target.cell, base_image)
        started = time.monotonic()
        tag = images.ensure_image(spec)
        log.result(f"image {tag} ready in {time.monotonic() - started:.1f} s")
        job = container.ContainerBuild(target=target, spec=spec, image=tag, outputs=outputs, max_jobs=opts.max_jobs)
        rep = container.build_in_container(job)
        report.print_report(rep)
    return 0


def run(opts: Options[Args]) -> int:
    from ci import options

    chosen = options.resolve(opts)
    if str(opts.selection.cuda or "").strip().isdigit():
        # A major (build-cuda-12) asks for that major's release cell: here, its stand-in where the release cell's
        # toolkit cannot be reached. A named cell (12.8) is built as asked, or refused with one line.
        from ci.linux import buildall

        chosen = buildall.local_equivalents(chosen)
    return container_build(opts, chosen, opts.args.base_image)


COMMAND = Command("build-cuda", "build targets with cibuildwheel in their cell's builder image", configure, Args,
                  run, Traits(compiles=True, default_cuda="13", selects=True), check=check_ca_bundle, finish=finish)
