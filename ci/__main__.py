"""Command line of the farm: ``python -m ci <command>``: parse, resolve the settings, check, run the command.

The commands are ``ci/commands/<verb>.py``, listed once in ``ci/commands/__init__.py``; the grammar and the
resolution are ``ci/cli.py``. Every nox session ends up here; the commands also work by hand. Every user-facing
failure ends with one line ``error: <what> (<value>): <how to fix>`` on stderr (with the progress and the tools'
output; stdout holds only results) and the exit code of its kind (``ci/errors.py``); ``--traceback`` or
``FARM_DEBUG=1`` shows the Python traceback as well. ``--show-settings`` (before or after the command's name) prints
the settings the command would run with, and exits.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from ci import cli, errors, proc, settings
from ci.log import log


def _last_line(line: str) -> None:
    """The one error line, on stderr after the tools' output and the details: stdout holds only results (a
    ``--json`` document stays parseable, or empty, whatever happens)."""
    log.error(line)


def _write_status(code: int) -> None:
    """For noxfile.py: the exit code, so the session can end with the farm's last line and code."""
    path = settings.value("FARM_STATUS_FILE")
    if path:
        Path(path).write_text(str(code))


def _show(resolved: settings.Settings) -> None:
    """``--show-settings``: the settings are the result asked for (stdout), one ``NAME = value (source)`` a line."""
    for line in resolved.lines():
        log.result(line)


def main(argv: list[str] | None = None) -> int:
    code = _main(sys.argv[1:] if argv is None else argv)
    _write_status(code)
    return code


def _main(argv: list[str]) -> int:
    proc.install_signal_handlers()
    leading = argv[:next((i for i, a in enumerate(argv) if a not in cli.GLOBAL_FLAGS), len(argv))]
    if "--traceback" in leading:
        # The process's own environment: errors.debug_enabled here, and every child process the farm starts.
        os.environ["FARM_DEBUG"] = "1"
    try:
        if cli.only_global_flags(argv) and "--show-settings" in argv:  # no command: the environment's settings
            _show(settings.resolve(os.environ))
            return 0
        opts, given = cli.read(argv)
        if "--traceback" in given:
            os.environ["FARM_DEBUG"] = "1"
        settings.install(opts.settings)  # for the modules below that read a setting through settings.current()
        log.command_name = opts.command
        if "--show-settings" in given:
            _show(opts.settings)
            return 0
        if errors.debug_enabled(os.environ):
            for line in opts.settings.lines():
                log.info(line)
        cli.validate(opts)
        return int(cli.COMMANDS[opts.command].run(opts))
    except errors.FarmError as exc:
        if errors.debug_enabled(os.environ):
            log.details(traceback.format_exc())  # through the logger: it masks secrets
        if exc.details:
            log.details(exc.details)
        _last_line(exc.line())
        return exc.exit_code
    except errors.Interrupted as exc:
        log.progress.print(f"[bold red]interrupted[/] (signal {exc.signum}): child processes stopped, partial "
                           "outputs removed; nothing was written to the wheelhouse", markup=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return errors.EXIT_SIGINT
    except ModuleNotFoundError as exc:
        if errors.debug_enabled(os.environ):
            log.details(traceback.format_exc())  # through the logger: it masks secrets
        _last_line(f"a tool the farm needs is not installed ({exc.name}): run the farm through nox, or pip install "
                  "--require-hashes -r ci/requirements/farm.txt")
        return errors.EXIT_MISSING
    except Exception as exc:
        if errors.debug_enabled(os.environ):
            log.details(traceback.format_exc())  # through the logger: it masks secrets
        _last_line(f"internal error in the farm ({type(exc).__name__}: {exc}): rerun with --traceback (or "
                  "FARM_DEBUG=1) and report it")
        return 70
    finally:
        settings.install(None)


if __name__ == "__main__":
    sys.exit(main())
