"""``doctor``: which wheel of an index fits this machine, and why each other one does not (ci/doctor/)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    index: str | None = None
    env: str | None = None
    python: str | None = None
    json: bool = False
    record: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    from ci.doctor import diagnose

    diagnose.add_arguments(parser)


def run(opts: Options[Args]) -> int:
    from ci.doctor import diagnose

    a = opts.args
    return diagnose.run(a.index, a.env, a.python, a.json, record=a.record)


COMMAND = Command("doctor", "which wheel of an index fits this machine (torch, CUDA, driver, GPUs, glibc, Python), "
                  "and why each other one does not", configure, Args, run)
