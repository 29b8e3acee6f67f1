"""The installable command, ``cuda-ext-farm``: validate the arguments, then run ``python -m ci`` in the farm's
own hash-pinned tool environment (``ci/toolenv.py``), in the caller's folder.

Validation comes first, so a bad value costs nothing (no environment is made, nothing installed); the user's
environment (pipx's, uv's, a project venv) only ever runs this standard-library-and-packaging launcher. What needs
no tool at all is answered here: ``--help``, ``--version``, ``--show-settings``.

Standard library plus ``packaging`` only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import NoReturn

from ci import cli, errors, settings, toolenv
from ci.universe import project

PROG = "cuda-ext-farm"


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    leading = 0
    while leading < len(args) and args[leading] in cli.GLOBAL_FLAGS:  # the options before the command
        leading += 1
    command = args[leading:]
    try:
        if args and cli.only_global_flags(args) and "--show-settings" in args:
            _show(settings.resolve(os.environ))
        if not command or command[0].startswith("-"):
            cli.build_parser(prog=PROG).parse_args(command)  # --help, --version (or a bad flag: one line)
            raise errors.UsageError("no command given", " ".join(args) or "nothing",
                                    f"run `{PROG} --help` for the commands")
        opts, flags = cli.read(args, prog=PROG, notes=False)
        if "--show-settings" in flags:
            _show(opts.settings)
        cli.validate(opts)
        python = toolenv.farm_python()
    except errors.FarmError as exc:
        print(exc.line(), file=sys.stderr, flush=True)
        raise SystemExit(exc.exit_code) from None
    except subprocess.CalledProcessError as exc:
        print(f"error: installing the farm's tool environment failed (exit status {exc.returncode}): "
              "see pip's output above; check the network or FARM_CACHE_DIR", file=sys.stderr, flush=True)
        raise SystemExit(errors.EXIT_MISSING) from None
    except OSError as exc:  # the cache folder cannot hold the tool environment (read-only, below a file, full)
        where = exc.filename or toolenv.cache_root()
        print(f"error: the farm's cache folder is not writable ({where}): {exc.strerror or exc}; point FARM_CACHE_DIR "
              "at a writable folder", file=sys.stderr, flush=True)
        raise SystemExit(errors.EXIT_MISSING) from None
    # Only the farm's code on the path: the tool environment's own site-packages hold the rest.
    env = {**os.environ, "PYTHONPATH": str(project.FARM_ROOT), "FARM_PROG": PROG}
    # The user's PATH as they had it: doctor looks for their `python` there, never the tool environment's.
    env.setdefault("FARM_CALLER_PATH", os.environ.get("PATH", ""))
    if "PYTHONPATH" in os.environ:  # the user's own, for the commands `jit` runs in their environment
        env["FARM_CALLER_PYTHONPATH"] = os.environ["PYTHONPATH"]
    argv_child = [str(python), "-m", "ci", *args]
    if os.name == "nt":  # pragma: no cover - exec does not replace the process on Windows
        raise SystemExit(subprocess.run(argv_child, env=env).returncode)
    os.execve(argv_child[0], argv_child, env)


def _show(resolved: settings.Settings) -> NoReturn:
    """``--show-settings``: the settings the command would run with, on stdout; nothing is made or run."""
    for line in resolved.lines():
        print(line)
    raise SystemExit(0)


if __name__ == "__main__":
    main()
