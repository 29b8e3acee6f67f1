"""Command-line hooks of the Windows half (``python -m ci build-win`` and ``python -m ci jit``).

Standard library only: ``ci/cli.py`` (and so ``noxfile.py``) imports this module before any environment exists.
"""

from __future__ import annotations

import argparse
import sys

from ci.errors import MissingRequirement


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m ci build-win`` beyond the shared selection and output options."""
    parser.add_argument("--toolset",
                        help="MSVC toolset to activate (14.44; default FARM_MSVC_TOOLSET, else the cell's)")
    parser.add_argument("--dll-path", action="append", default=[], metavar="DIR",
                        help="a folder with DLLs the wheel needs that delvewheel should vendor; repeatable")
    parser.add_argument("--refresh-vcvars", action="store_true",
                        help="run vcvarsall.bat again instead of using the cached environment")
    parser.add_argument("--no-smoke", action="store_true", help="skip the import test of the repaired wheel")


def add_jit_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m ci jit``."""
    parser.add_argument("--cuda", default="13", help="CUDA toolkit of the environment (version, name or major)")
    parser.add_argument("--toolset", help="MSVC toolset to activate on Windows (14.44; default FARM_MSVC_TOOLSET, "
                        "else the cell's)")
    parser.add_argument("--print-env", action="store_true",
                        help="print the environment as shell lines (set/export) instead of running a command")
    parser.add_argument("--refresh-vcvars", action="store_true", help="run vcvarsall.bat again (Windows)")
    # Not "command": that is the sub-command's own dest in ci/cli.py.
    parser.add_argument("jit_command", metavar="command", nargs=argparse.REMAINDER,
                        help="the command to run (after --)")


def check_host() -> None:
    """Windows builds run on Windows only: say so at once, before anything is installed."""
    if sys.platform != "win32":
        raise MissingRequirement("Windows builds need a Windows host with Visual Studio", sys.platform,
                                 "run this on Windows (or in the GitHub Actions release workflow)")

