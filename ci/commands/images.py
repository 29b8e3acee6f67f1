"""``images``: build (or reuse) each cell's builder image, with sizes and layers; ``images pull | push CELL`` move
a builder image between the engine and the repository's registry under its content tag, ``images changed`` lists
the project's cells whose tag the registry lacks (the generated workflows' helpers)."""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from ci.commands.command import Command, check_ca_bundle, project_args
from ci.errors import UsageError
from ci.options import Options

VERBS = ("pull", "push", "changed")


@dataclasses.dataclass(frozen=True)
class Args:
    cells: tuple[str, ...] = ()
    base_image: str | None = None
    rebuild: bool = False
    registry: str | None = None
    verb: str | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cells", nargs="*", metavar="[pull|push|changed] CELL",
                        help="the cells (default: every cell); `pull CELL` / `push CELL`: the cell's builder image "
                        "from / to the registry; `changed`: the project's Linux cells whose image tag the registry "
                        "lacks, as JSON")
    parser.add_argument("--base-image",
                        help="the base image of the builder images (default: FARM_BASE_IMAGE, else the cell's)")
    parser.add_argument("--rebuild", action="store_true", help="build the images again even when their tag exists")
    parser.add_argument("--registry", help="pull/push/changed: the image registry (default: FARM_REGISTRY, else "
                        "ghcr.io/<GITHUB_REPOSITORY in lower case>)")
    project_args(parser)


def finish(ns: argparse.Namespace) -> None:
    ns.verb = None
    if ns.cells and ns.cells[0] in VERBS:
        ns.verb, ns.cells = ns.cells[0], ns.cells[1:]
        wanted = 0 if ns.verb == "changed" else 1
        if len(ns.cells) != wanted:
            raise UsageError(f"images {ns.verb} takes {'no cell' if wanted == 0 else 'one cell'}",
                             " ".join(ns.cells) or "none", f"run `images {ns.verb}" + (" CELL`" if wanted else "`"))


def check(opts: Options[Any]) -> None:
    from ci import options
    from ci.universe import matrix

    if opts.args.verb is None:  # a build: its base image step reads the CA bundle
        check_ca_bundle(opts)
    if opts.args.verb == "changed":
        options.load_project(opts)
    elif opts.args.verb in ("pull", "push"):
        matrix.validate(matrix.get_cell(opts.args.cells[0]))
    elif opts.args.verb is None:
        matrix.cells(list(opts.args.cells) or None)


def run(opts: Options[Args]) -> int:
    from ci.gha import workflows

    a = opts.args
    if a.verb is not None:
        registry = workflows.registry(opts.settings.get("FARM_REGISTRY"), opts.settings.environ)
        if a.verb == "pull":
            return workflows.pull_image(a.cells[0], registry)
        if a.verb == "push":
            return workflows.push_image(a.cells[0], registry)
        from ci import options

        return workflows.changed_cells(options.load_project(opts), registry)
    return build_images(a)


def build_images(a: Args) -> int:
    from rich.table import Table

    from ci.linux import image_contents, images
    from ci.log import log
    from ci.universe import matrix
    from ci.universe.targets import platforms

    table = Table(title="builder images")
    for col in ("cell", "tag", "size", "build time"):
        table.add_column(col)
    tags: list[str] = []
    for cell in matrix.cells(list(a.cells) or None):
        started = time.monotonic()
        if not a.cells and cell.toolkit.kind == "nvidia-repo":
            reason = images.probe_url(matrix.nvidia_repo_file(platforms.host_arch()), images.host_ca_bundle())
            if reason:  # every cell, by default: those this machine can build (cu124 stands in for cu128)
                log.result(f"[yellow]skipped {cell.name}[/]: {matrix.unreachable_toolkit(cell)[0]} ({reason})",
                           markup=True)
                continue
        spec = images.spec_for(matrix.validate(cell), a.base_image)
        tag = images.ensure_image(spec, rebuild=a.rebuild)
        size = f"{images.image_size(tag) / 2**20:.0f} MiB"
        table.add_row(cell.name, tag, size, f"{time.monotonic() - started:.1f} s")
        tags.append(tag)
    log.result(table)
    for tag in tags:  # what each layer costs: the jobs' disk needs (docs/releasing.md, "Disk") come from these
        image_contents.report_layers(tag)
    return 0


COMMAND = Command("images", "build (or reuse) the builder image of each cell; pull, push, changed: the registry",
                  configure, Args, run, check=check, finish=finish)
