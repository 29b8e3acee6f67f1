"""``lock``: every ci/requirements/*.in compiled into a hash-pinned .txt (needs uv), then checked against the index."""

from __future__ import annotations

from ci.commands.command import Command, NoArguments, no_arguments
from ci.options import Options


def run(opts: Options[NoArguments]) -> int:
    from ci import proc
    from ci.log import log
    from ci.universe import lockcheck, pins
    from ci.universe.lockcheck import pages

    for path in pins.write_locks(proc.which("uv")):
        log.result(f"locked {path.relative_to(pins.REQUIREMENTS.parent.parent)} ({len(pins.pinned_in(path))} pins)")
    # uv resolves for every platform but never asks whether a pinned release has a file for each one: the index does
    # (a Linux-only pin without its marker, a release too new for the oldest CPython served).
    index = pages.Index()
    lockcheck.require(index=index)
    log.result(f"every lock installs from wheels on each CPython and platform it serves ({index.url})")
    return 0


# The lock session installs uv first: it is written in noxfile.py, not passed through.
COMMAND = Command("lock", "compile every ci/requirements/*.in into a hash-pinned .txt (needs uv)", no_arguments,
                  NoArguments, run, session=False)
