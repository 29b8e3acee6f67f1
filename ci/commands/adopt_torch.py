"""``adopt-torch``: the torch releases PyPI has, written into the farm's matrix (``--check``: only compared)."""

from __future__ import annotations

import argparse
import dataclasses

from ci.commands.command import Command
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    check: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="compare the table with PyPI and list each release that is new or differs; exit 1 when "
                        "one does; write nothing")


def run(opts: Options[Args]) -> int:
    from ci.universe import adoption

    return adoption.adopt(opts.args.check)


COMMAND = Command("adopt-torch", "write the TORCH_RELEASES entries of the torch releases PyPI has (CUDA, CPythons, "
                  "aarch64, SASS, C++ standard; a toolkit cell for a new CUDA version) into the farm's matrix, then "
                  "make the locks and workflows again (needs uv)", configure, Args, run)
