"""One error type for every user-facing failure of the farm.

Every check raises :class:`FarmError` (or a subclass, which only picks the exit
code). The command line catches it once and prints, as its last line::

    error: <what> (<the value>): <how to fix>

Longer context (the list of failed audit checks, the tail of a compiler log) goes
in ``details`` and is printed *before* that line. A Python traceback appears only
with ``--traceback`` or ``FARM_DEBUG=1``.

Exit codes (documented in the README):

====  ==================================================================
1     a build step or external command failed (compiler, pip, docker)
2     bad input: an argument, the project configuration, an environment
      variable or a file the farm was given
3     this machine lacks something the command needs (a tool, a Docker
      engine, a GPU, a Windows host, a writable folder)
4     the wheel audit failed
130   interrupted by SIGINT; 143: terminated by SIGTERM
====  ==================================================================

This module uses only the standard library: ``noxfile.py`` imports it before any
virtual environment exists.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

EXIT_COMMAND = 1
EXIT_USAGE = 2
EXIT_MISSING = 3
EXIT_AUDIT = 4
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class FarmError(Exception):
    """A failure the user can act on: what went wrong, the value involved, how to fix it."""

    exit_code = EXIT_USAGE

    def __init__(self, what: str, value: object, fix: str, *, details: str = "", exit_code: int | None = None) -> None:
        self.what = what
        self.value = value
        self.fix = fix
        self.details = details
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__(self.line())

    def line(self) -> str:
        return f"error: {self.what} ({self.value}): {self.fix}"


class UsageError(FarmError):
    """Bad input: an argument, a configuration key, an environment variable, a file."""

    exit_code = EXIT_USAGE


class MissingRequirement(FarmError):
    """The machine lacks a tool, an engine, a GPU or a writable folder."""

    exit_code = EXIT_MISSING


class CommandFailed(FarmError):
    """An external command (compiler, pip, docker) failed."""

    exit_code = EXIT_COMMAND


class AuditFailed(FarmError):
    """The wheel audit found problems; ``details`` lists them."""

    exit_code = EXIT_AUDIT


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; raised in the main thread after the children were stopped.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that ``except Exception``
    clean-up code does not swallow it; ``finally`` blocks still run.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by signal {signum}")

    @property
    def exit_code(self) -> int:
        """130 for SIGINT, 143 for SIGTERM (the documented codes), 128 + N for any other signal."""
        known = {int(signal.SIGINT): EXIT_SIGINT, int(signal.SIGTERM): EXIT_SIGTERM}
        return known.get(self.signum, 128 + self.signum)


def debug_enabled(env: Mapping[str, str]) -> bool:
    """``FARM_DEBUG=1`` in ``env`` (the entry's process environment) shows tracebacks (the ``--traceback`` switch
    sets it)."""
    value = env.get("FARM_DEBUG", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def env_path(name: str, env: Mapping[str, str], *, must_exist: bool = True, kind: str = "folder") -> str | None:
    """Read a path from the variable ``name`` of ``env`` (the environment the entry read), validated here.

    Returns None when the variable is unset or empty. ``kind`` is ``folder``,
    ``file`` or ``executable``.
    """
    value = env.get(name, "").strip()
    if not value:
        return None
    if must_exist:
        if kind == "folder":
            ok = os.path.isdir(value)
        elif kind == "file":
            ok = os.path.isfile(value)
        else:
            ok = os.path.isfile(value) and os.access(value, os.X_OK)
        if not ok:
            raise UsageError(
                f"{name} does not point at an existing {kind}", value,
                f"fix or unset {name}",
            )
    return value


class MatrixError(UsageError):
    """A request that the universe cannot satisfy (``ci/universe/matrix.py``, ``ci/universe/archs.py``); the message
    says what to do."""


class TargetError(UsageError):
    """No target of the project matches what was asked for, or the project asks for something the universe lacks
    (``ci/universe/targets/``, ``ci/universe/selection.py``)."""
