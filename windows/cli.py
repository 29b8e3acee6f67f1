"""Command-line hooks of the Windows half (``python -m ci build-win`` and ``python -m ci jit``).

Standard library only: ``ci/cli.py`` (and so ``noxfile.py``) imports this module before any environment exists.
"""

from __future__ import annotations

import argparse
import sys

from ci.errors import MissingRequirement


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m ci build-win`` beyond the shared selection and output options."""


def add_jit_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m ci jit``."""
    parser.add_argument("--cuda", default="13", help="CUDA toolkit of the environment (version, name or major)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after --)")


def check_host() -> None:
    """Windows builds run on Windows only: say so at once, before anything is installed."""
    if sys.platform != "win32":
        raise MissingRequirement("Windows builds need a Windows host with Visual Studio", sys.platform,
                                 "run this on Windows (or in the GitHub Actions release workflow)")


def cmd_build_win(args: argparse.Namespace) -> int:
    check_host()
    raise MissingRequirement("not implemented yet", "build-win", "see windows/README.md")


def cmd_jit(args: argparse.Namespace) -> int:
    raise MissingRequirement("not implemented yet", "jit", "see windows/README.md")
