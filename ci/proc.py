"""Running external commands: every command is logged before it runs.

The log line is a shell-quoted command line (with the environment variables that
differ from the caller's) so a failed build can be replayed by hand.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

console = Console(stderr=True, highlight=False)


class CommandError(RuntimeError):
    """An external command failed; carries its exit status."""

    def __init__(self, cmd: Sequence[str], returncode: int, hint: str = "") -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        msg = f"command failed with exit status {returncode}: {shlex.join(self.cmd)}"
        if hint:
            msg += f"\n{hint}"
        super().__init__(msg)


def format_command(cmd: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """A replayable shell line: ``cd DIR && VAR=value ... cmd args``."""
    parts: list[str] = []
    if cwd is not None:
        parts.append(f"cd {shlex.quote(str(cwd))} &&")
    if env:
        changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
        parts.extend(f"{k}={shlex.quote(v)}" for k, v in sorted(changed.items()))
    parts.append(shlex.join([str(c) for c in cmd]))
    return " ".join(parts)


def run(
    cmd: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = False,
    check: bool = True,
    hint: str = "",
) -> subprocess.CompletedProcess[str]:
    """Log and run ``cmd`` (an argument list, never a shell string)."""
    args = [str(c) for c in cmd]
    console.print(f"[bold cyan]$[/] {format_command(args, env, cwd)}", soft_wrap=True)
    full_env = None if env is None else {**os.environ, **env}
    result = subprocess.run(
        args,
        env=full_env,
        cwd=cwd,
        text=True,
        capture_output=capture,
    )
    if check and result.returncode != 0:
        if capture:
            console.print(result.stdout + result.stderr, markup=False)
        raise CommandError(args, result.returncode, hint)
    return result
