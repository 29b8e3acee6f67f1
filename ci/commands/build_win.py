"""``build-win``: targets built on this Windows host (vcvars64, CUDA toolkit, cibuildwheel, delvewheel, PE audit)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ci.commands.command import Command, Traits, output_args, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    toolset: str | None = None
    dll_path: tuple[str, ...] = ()
    refresh_vcvars: bool = False
    no_smoke: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    from windows import cli as windows_cli

    selection_args(parser)
    output_args(parser)
    windows_cli.add_build_arguments(parser)


def check(opts: Options[Any]) -> None:
    """Windows builds run on Windows only: said at once, before anything is installed."""
    from windows import cli as windows_cli

    windows_cli.check_host()


def run(opts: Options[Args]) -> int:
    from ci import options
    from windows import cli as windows_cli

    a = opts.args
    return windows_cli.build_win(options.resolve(opts, os_name="windows"), opts.wheelhouse, opts.build_dir,
                                 toolset=opts.settings.get("FARM_MSVC_TOOLSET"), dll_paths=a.dll_path,
                                 refresh_vcvars=a.refresh_vcvars, max_jobs=opts.max_jobs, smoke=not a.no_smoke)


COMMAND = Command("build-win", "build targets on this Windows host (vcvars64, CUDA toolkit, cibuildwheel, "
                  "delvewheel, PE audit)", configure, Args, run,
                  Traits(compiles=True, selects=True, os="windows"), check=check, session=False)
