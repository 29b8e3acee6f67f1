"""The commands about builder images: ``shell`` (a shell in a cell's image), ``base-image`` (bootstrap a Debian
base without a registry) and ``images`` (build every cell's image and report sizes and layers)."""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console
from rich.table import Table

from ci import options
from ci.universe import matrix

console = Console() if sys.stdout.isatty() else Console(width=200)


def cmd_shell(args: argparse.Namespace) -> int:
    from ci.linux import images, shell

    config = options.load_project(args)
    cell = matrix.resolve(args.cuda)
    spec = images.spec_for(cell, args.base_image)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return shell.run_shell(spec, config.root, command)


def cmd_base_image(args: argparse.Namespace) -> int:
    from ci.linux import images

    tag = images.bootstrap_base(args.suite, args.mirror, force=args.force)
    console.print(f"base image {tag} ({images.image_size(tag) / 2**20:.0f} MiB)\n"
                  f"point the cells at it: export FARM_BASE_IMAGE={images.BASE_REPO}")
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    from ci.linux import image_contents, images

    table = Table(title="builder images")
    for col in ("cell", "tag", "size", "build time"):
        table.add_column(col)
    tags: list[str] = []
    for cell in matrix.cells(args.cells or None):
        started = time.monotonic()
        if not args.cells and cell.toolkit.kind == "nvidia-repo":
            reason = images.probe_url(matrix.nvidia_repo_file(images.host_arch()), images.host_ca_bundle())
            if reason:  # every cell, by default: those this machine can build (cu124 stands in for cu128)
                console.print(f"[yellow]skipped {cell.name}[/]: {matrix.unreachable_toolkit(cell)[0]} ({reason})")
                continue
        spec = images.spec_for(matrix.validate(cell), args.base_image)
        tag = images.ensure_image(spec, rebuild=args.rebuild)
        size = f"{images.image_size(tag) / 2**20:.0f} MiB"
        table.add_row(cell.name, tag, size, f"{time.monotonic() - started:.1f} s")
        tags.append(tag)
    console.print(table)
    for tag in tags:  # what each layer costs: the jobs' disk needs (docs/releasing.md, "Disk") come from these
        image_contents.report_layers(tag, console)
    return 0
