"""``build``: the host build of one target (or ``--all``): wheel, repair, audit -> ``wheelhouse/<target>/``."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command, Traits, output_args, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    cpu: bool = False
    all: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    output_args(parser)
    parser.add_argument("--cpu", action="store_true", help="build without CUDA (no toolkit; a CPU-only wheel)")
    parser.add_argument("--all", action="store_true", help="every host-buildable target of the project, not just one")
    parser.add_argument("--deadline", metavar="WHEN", help="stop starting compiles so as to end by then: 5h30m, 90m, "
                        "23:30 (FARM_DEADLINE); the same command resumes")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.builds import report, tail
    from ci.linux import host
    from ci.log import log

    chosen = options.resolve(opts)
    if opts.args.all:
        chosen = tuple(t for t in chosen if t.cell.toolkit.kind == "pypi")
    project = chosen[0].project
    outputs = tail.Outputs.resolve(project.root, opts.wheelhouse, opts.build_dir, project.normalized_name)
    for target in chosen:
        if opts.args.cpu:
            target = dataclasses.replace(target, cpu=True)
        rep = host.build(target, outputs, max_jobs=opts.max_jobs)
        report.print_report(rep)
        log.result(f"[green]wheel written to[/] {outputs.target_dir(target) / rep.wheel}", markup=True)
    return 0


COMMAND = Command("build", "host build: wheel, repair, audit -> wheelhouse/<target>/", configure, Args, run,
                  Traits(compiles=True, default_target=True, one_target=True, selects=True))
