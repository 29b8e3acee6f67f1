"""``test-gpu``: the GPU test lanes on this machine's GPUs (ci/testing/gpu_lanes.py)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from ci import settings
from ci.commands.command import Command, Traits, no_built_wheel, selection_args, top_prog
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    wheel: str | None = None
    inplace: bool = False
    ptx_wheel: str | None = None
    lanes: str = "default,sanitizer,ptx-jit,multi-gpu,bench"
    quick: bool = False
    out: str | None = None
    system: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--wheel", help="wheel to test (default: the target's wheel in the wheelhouse)")
    src.add_argument("--inplace", action="store_true",
                     help=f"test the in-place build ({top_prog(parser)} develop makes it)")
    parser.add_argument("--wheelhouse", help="where the target's built wheel is looked for (default: "
                        "FARM_WHEELHOUSE, else <project>/wheelhouse)")
    parser.add_argument("--ptx-wheel", help="a wheel with PTX only for an older architecture (ptx-jit lane)")
    parser.add_argument("--lanes", default="default,sanitizer,ptx-jit,multi-gpu,bench",
                        help="the test lanes to run, comma-separated")
    parser.add_argument("--quick", action="store_true",
                        help="set FARM_QUICK=1 for the lanes' commands (the project's tests shorten themselves)")
    parser.add_argument("--out", help="results folder (default: FARM_TEST_RESULTS, else <project>/test-results)")
    parser.add_argument("--system", action="store_true",
                        help="test with the running interpreter and its torch (GPU boxes without network)")


def check(opts: Options[Any]) -> None:
    from ci.testing.lanes import parse_lanes

    parse_lanes(opts.args.lanes)


def run(opts: Options[Args]) -> int:
    import contextlib
    import sys
    import tempfile

    from ci import options
    from ci.builds import tail
    from ci.testing import gpu_lanes, wheel_tests
    from ci.testing.lanes import parse_lanes

    a = opts.args
    (target,) = options.resolve(opts)[:1]
    lanes = parse_lanes(a.lanes)
    outputs = tail.Outputs.resolve(target.project.root, opts.wheelhouse, opts.build_dir,
                                   target.project.normalized_name)
    out = settings.path_option(a.out, "FARM_TEST_RESULTS", target.project.root / "test-results")
    wheel = Path(a.wheel) if a.wheel else (None if a.inplace else tail.find_wheel(outputs, target))
    if wheel is None and not a.inplace:
        raise no_built_wheel(target.id, outputs.target_dir(target))
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="farm-gpu-")))

        def subject_for(path: Path | None, name: str) -> gpu_lanes.Subject:
            if path is None:  # the in-place build, with this interpreter's torch
                return gpu_lanes.Subject(Path(sys.executable), gpu_lanes.inplace_paths(target.project.root),
                                         f"in-place build in {target.project.root}")
            if a.system:
                site = gpu_lanes.install_wheel(path, tmp / name)
                return gpu_lanes.Subject(Path(sys.executable), (str(site),), f"{path} on {sys.executable}", path)
            env = stack.enter_context(wheel_tests.clean_env(target, path, "test", "bench"))
            return gpu_lanes.Subject(env.python, (), f"{path} in a clean environment", path)

        subject = subject_for(wheel, "site")
        ptx = subject_for(Path(a.ptx_wheel), "ptx-site") if a.ptx_wheel else None
        return gpu_lanes.run_gpu_lanes(target, subject, ptx=ptx, lanes=lanes, quick=a.quick, out=out)


COMMAND = Command("test-gpu", "the GPU test lanes on this machine's GPUs", configure, Args, run,
                  Traits(default_target=True, selects=True, input_paths=("wheel", "ptx_wheel"), output_paths=("out",),
                         wheels=("wheel", "ptx_wheel")), check=check)
