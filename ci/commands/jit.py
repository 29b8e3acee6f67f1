"""``jit -- COMMAND``: a command run where ``torch.utils.cpp_extension.load()`` finds the compiler and the farm's
CUDA toolkit (vcvars64 on Windows)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command
from ci.commands.toolkit import check_cuda
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    cuda: str = "13"
    toolset: str | None = None
    print_env: bool = False
    refresh_vcvars: bool = False
    jit_command: tuple[str, ...] = ()


def configure(parser: argparse.ArgumentParser) -> None:
    from windows import cli as windows_cli

    windows_cli.add_jit_arguments(parser)


def run(opts: Options[Args]) -> int:
    from windows import jit

    a = opts.args
    return jit.main(a.cuda, list(a.jit_command), toolset=opts.settings.get("FARM_MSVC_TOOLSET"),
                    print_env=a.print_env, refresh=a.refresh_vcvars)


COMMAND = Command("jit", "run a command in an environment where torch.utils.cpp_extension.load() finds the compiler "
                  "and the farm's CUDA toolkit (vcvars64 on Windows)", configure, Args, run, check=check_cuda)
