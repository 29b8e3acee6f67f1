"""``build-win``: targets built on this Windows host (vcvars64, CUDA toolkit, cibuildwheel, delvewheel, PE audit)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

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


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.builds import report, tail
    from ci.log import log
    from windows import build, vswhere

    a = opts.args
    chosen = options.resolve(opts, os_name="windows")
    project = chosen[0].project
    outputs = tail.Outputs.resolve(project.root, opts.wheelhouse, opts.build_dir, project.normalized_name)
    build_options = build.Options(toolset=opts.settings.get("FARM_MSVC_TOOLSET"),
                                  dll_paths=tuple(Path(p).resolve() for p in a.dll_path),
                                  refresh_vcvars=a.refresh_vcvars, max_jobs=opts.max_jobs, smoke=not a.no_smoke)
    found = vswhere.discover()
    for target in chosen:
        rep = build.build_target(target, outputs, found, build_options)
        report.print_report(rep)
        log.result(f"[green]wheel written to[/] {outputs.target_dir(target) / rep.wheel}", markup=True)
    return 0


COMMAND = Command("build-win", "build targets on this Windows host (vcvars64, CUDA toolkit, cibuildwheel, "
                  "delvewheel, PE audit)", configure, Args, run,
                  Traits(compiles=True, selects=True, os="windows"), session=False)
