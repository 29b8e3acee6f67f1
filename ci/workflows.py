"""The GitHub Actions workflows, rendered from the matrix and the project configuration
(``nox -s workflows`` writes them; a test fails when they drift from the matrix).

The argument hook is standard library only (``ci/cli.py`` imports it before any environment exists).
"""

from __future__ import annotations

import argparse

from ci.errors import MissingRequirement


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="fail when the committed workflows differ")


def cmd_workflows(args: argparse.Namespace) -> int:
    raise MissingRequirement("not implemented yet", "workflows", "see README 'Releasing'")
