"""The release: every Linux target built, audited and import-tested, per-variant PEP 503 indexes, SHA256SUMS
and a manifest in one folder (``nox -s release -- --dry-run`` does what the release workflow does for the Linux
targets, uploading nothing).

The argument hook is standard library only (``ci/cli.py`` imports it before any environment exists).
"""

from __future__ import annotations

import argparse

from ci.errors import MissingRequirement


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="build and check everything; upload nothing")


def cmd_release(args: argparse.Namespace) -> int:
    raise MissingRequirement("not implemented yet", "release", "see README 'Releasing'")
