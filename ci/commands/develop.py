"""``develop``: the in-place incremental build for editing (ninja, a compiler cache, the visible GPUs)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command, Traits, max_jobs_arg, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    cpu: bool = False
    debug: bool = False
    no_cache: bool = False
    clean: bool = False
    release_archs: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    max_jobs_arg(parser)
    parser.add_argument("--cpu", action="store_true", help="build without CUDA (no toolkit)")
    parser.add_argument("--debug", action="store_true", help="-O0 -g and device debug info (-G)")
    parser.add_argument("--no-cache", action="store_true", help="do not use a compiler cache")
    parser.add_argument("--clean", action="store_true", help="remove the build folder first")
    parser.add_argument("--release-archs", action="store_true",
                        help="build for the release architectures, not just the visible GPUs (or --arch-list)")


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.builds import tail
    from ci.linux import develop
    from ci.log import log

    (target,) = options.resolve(opts)
    if opts.args.cpu:
        target = dataclasses.replace(target, cpu=True)
    outputs = tail.Outputs.resolve(target.project.root, opts.wheelhouse, opts.build_dir,
                                   target.project.normalized_name)
    # The architectures were applied to the target once (ci/options.py); develop only needs to know whether the
    # user chose them on the command line: without --arch-list it builds for the GPUs this machine has.
    explicit = opts.selection.arch_list if opts.settings.source("TORCH_CUDA_ARCH_LIST") == "flag" else None
    a = opts.args
    result = develop.develop(target, outputs, debug=a.debug, max_jobs=opts.max_jobs, use_cache=not a.no_cache,
                             clean=a.clean, arch_list=explicit, release_archs=a.release_archs)
    log.result(f"[green]in-place build done[/] in {result.seconds:.1f} s, {result.compiled} objects compiled, "
               f"archs {result.arch_list or 'cpu'}, compiler cache: {result.launcher or 'none'}", markup=True)
    return 0


COMMAND = Command("develop", "in-place incremental build for editing", configure, Args, run,
                  Traits(compiles=True, default_target=True, one_target=True, selects=True))
