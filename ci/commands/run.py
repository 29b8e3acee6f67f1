"""``run NAME [-- ARGS]``: one of the project's configured commands with its wheel, in a clean environment."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands import test
from ci.commands.command import Command, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    name: str
    wheel: str | None = None
    #: everything after `--`, appended to the command (ci/cli.py splits it off before parsing)
    extra: tuple[str, ...] = ()


def configure(parser: argparse.ArgumentParser) -> None:
    from ci.universe import project

    parser.add_argument("name", choices=project.COMMAND_NAMES,
                        help="the command of [tool.cuda-ext-farm.commands] to run")
    selection_args(parser)
    parser.add_argument("--wheel", help="the wheel to install (default: the target's in the wheelhouse)")
    parser.add_argument("--wheelhouse", help="where the target's built wheel is looked for (default: "
                        "FARM_WHEELHOUSE, else <project>/wheelhouse)")
    parser.set_defaults(extra=[])


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.testing import wheel_tests

    (target,) = options.resolve(opts)[:1]
    wheel_tests.configured(target, opts.args.name)
    target, wheel = test.target_and_wheel(opts, opts.args.wheel)
    return wheel_tests.run_command(target, wheel, opts.args.name, list(opts.args.extra))


COMMAND = Command("run", "run one of the project's configured commands with its wheel, in a clean environment "
                  "(bench, test, smoke, ...)", configure, Args, run, test.TRAITS, session=False)
