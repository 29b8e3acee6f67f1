"""``bench-builds``: cold, warm and one-file build times of the host and container builds; with ``--memory``, the
project built under memory limits, naive settings against the farm's admission (ci/linux/memorybench.py); with
``--admission-pairs``, what the admission costs a light build (ci/linux/admissionbench.py)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command, Traits, project_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    kind: tuple[str, ...] = ()
    touch: str | None = None
    out: str | None = None
    memory: tuple[str, ...] = ()
    admission_pairs: int | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    project_args(parser)
    parser.add_argument("--kind", action="append", default=[],
                        help="host, aarch64 (the host's cross build of the release target), or a CUDA cell for its "
                        "container build (13, 12, 13.2); repeatable (default: host, 13, 12)")
    parser.add_argument("--touch", help="the file the one-file rebuild changes (default: the smallest .cu)")
    parser.add_argument("--memory", action="append", default=[],
                        help="instead of the timings: build on this machine under this memory limit (2.5g, 8g), "
                        "naive settings and the farm's admission, each in a memory cgroup; repeatable")
    parser.add_argument("--admission-pairs", type=int, metavar="N",
                        help="instead of the timings: N pairs of cold host builds with the compile admission on and "
                        "off, alternated (what the admission costs a light build)")
    parser.add_argument("--out", help="results folder (default: FARM_BENCH_RESULTS, else <project>/bench-results)")


def run(opts: Options[Args]) -> int:
    from ci import options, settings
    from ci.linux import buildbench
    from ci.universe import matrix

    config = options.load_project(opts)
    pairs = opts.args.admission_pairs
    if pairs is not None:
        from ci.errors import UsageError
        from ci.linux import admissionbench

        if pairs < 1 or opts.args.memory:
            raise UsageError("--admission-pairs takes a whole number from 1, without --memory", pairs,
                             "give --admission-pairs 4, or --memory alone")
        out = settings.path_option(opts.args.out, "FARM_BENCH_RESULTS", config.root / "bench-results")
        admissionbench.bench(config, pairs, out)
        return 0
    if opts.args.memory:
        from ci.linux import memorybench

        limits = [memorybench.parse_limit(v) for v in opts.args.memory]
        out = settings.path_option(opts.args.out, "FARM_BENCH_RESULTS", config.root / "bench-results")
        memorybench.bench(config, limits, out)
        return 0
    kinds = list(opts.args.kind) or ["host", "13", "12"]
    for kind in kinds:
        if kind not in ("host", "aarch64"):
            matrix.get_cell(kind)
    out = settings.path_option(opts.args.out, "FARM_BENCH_RESULTS", config.root / "bench-results")
    buildbench.bench(config, kinds, opts.args.touch, out)
    return 0


COMMAND = Command("bench-builds", "cold, warm and one-file build times of the host and container builds", configure,
                  Args, run, Traits(compiles=True, project=True, output_paths=("out",)))
