"""``shell``: a shell (or one command) in a cell's builder image, the project mounted."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import DEFAULT_CUDA_HELP, Command, Traits, project_args
from ci.commands.toolkit import check_cuda
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    cuda: str = "13"
    base_image: str | None = None
    command: tuple[str, ...] = ()


def configure(parser: argparse.ArgumentParser) -> None:
    project_args(parser)
    parser.add_argument("--cuda", default="13", help=DEFAULT_CUDA_HELP)
    parser.add_argument("--base-image",
                        help="the base image of the builder images (default: FARM_BASE_IMAGE, else the cell's)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run instead of an interactive shell")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.linux import images, shell
    from ci.universe import selection

    config = options.load_project(opts)
    cell = selection.resolve(opts.args.cuda, opts.settings.get("TORCH_CUDA_ARCH_LIST"))
    spec = images.spec_for(cell, opts.args.base_image)
    command = list(opts.args.command)
    command = command[1:] if command[:1] == ["--"] else command
    return shell.run_shell(spec, config.root, command)


COMMAND = Command("shell", "a shell (or one command) in a cell's builder image", configure, Args, run,
                  Traits(project=True), check=check_cuda)
