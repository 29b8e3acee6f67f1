"""``python -m ci jit -- COMMAND``: run a command where ``torch.utils.cpp_extension.load()`` can build.

``load()`` compiles at run time with whatever compiler and toolkit the
process's environment points at. The farm gives the command its own:

* on Windows, the captured vcvars64 environment of the cell's MSVC toolset
  (so ``cl.exe`` is found and ``VSCMD_ARG_TGT_ARCH`` is set: torch then does not
  run its own vcvarsall lookup, which would take the newest toolset), the
  cell's CUDA toolkit (``CUDA_HOME``, ``nvcc`` on PATH, ``lib\\x64\\cudart.lib``)
  and ``DISTUTILS_USE_SDK=1``; ``load()`` itself links ``c10.lib``,
  ``c10_cuda.lib``, ``torch_cuda.lib`` and ``cudart.lib`` from there;
* on Linux, the cell's hermetic toolkit from pinned PyPI wheels
  (``ci.toolchain.toolkit.ensure_toolkit``): ``CUDA_HOME``/``CUDA_PATH`` and its ``bin`` on PATH.

The command is the caller's and runs with the caller's environment: ``python`` is the first one on the
caller's PATH (the user's own environment and torch), never the farm's tool environment; only the toolkit's
variables are added, and what the farm's launchers set for the farm's own process (its code on PYTHONPATH,
``FARM_PROG``) is taken away again. The command's exit status is the farm's.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence

from ci import proc, settings
from ci.errors import MissingRequirement, UsageError
from ci.log import log
from ci.universe import matrix, project, shapes


def command_of(raw: Sequence[str]) -> list[str]:
    """The command after ``--`` (argparse keeps the separator in a REMAINDER)."""
    parts = list(raw)
    if parts[:1] == ["--"]:
        parts = parts[1:]
    if not parts:
        raise UsageError("no command to run", "python -m ci jit",
                         "give one after --: python -m ci jit -- python train.py")
    return parts


def resolve_program(command: Sequence[str], path: str, *, windows: bool) -> list[str]:
    """Find the program on the new PATH: on Windows, CreateProcess searches the parent's PATH, not the child's."""
    if not windows or os.sep in command[0] or "/" in command[0]:
        return list(command)
    found = shutil.which(command[0], path=path)
    return [found or command[0], *command[1:]]


def export_lines(env: Mapping[str, str], *, windows: bool) -> list[str]:
    """Lines a shell can source to get the same environment (``--print-env``)."""
    from windows import environment

    if windows:
        return environment.batch_lines(env)
    return [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]


def linux_env(cell: shapes.Cell) -> dict[str, str]:
    """The hermetic toolkit's environment (installed from the cell's pins on first use)."""
    from ci.toolchain import toolkit

    try:
        return toolkit.ensure_toolkit(cell).env()
    except MissingRequirement as exc:
        raise MissingRequirement(
            exc.what, exc.value,
            "run the command in the cell's container instead: "
            f"{settings.entry('shell', f'--cuda {cell.cuda} -- COMMAND')}, or use "
            "a cell with a PyPI toolkit (--cuda 13)",
        ) from None


def windows_env(cell: shapes.Cell, toolset: str | None, refresh: bool) -> dict[str, str]:  # pragma: no cover
    from windows import environment, msvc, toolkit, vcvars, vswhere

    found = vswhere.discover()
    choice = msvc.choose(cell, found.toolsets, toolset, skipped=found.skipped)
    if choice.note:
        log.note(choice.note)
    tk = toolkit.ensure(cell)
    vc = vcvars.activate(vswhere.InstalledToolset(choice.instance, str(choice.toolset)), refresh=refresh)
    return environment.compose(settings.current().environ, vc, tk.cuda_home)


#: Where the farm's launchers keep the caller's own PYTHONPATH: they point PYTHONPATH at the farm's code for
#: the farm's process (``ci/launch.py``, ``noxfile.py``).
CALLER_PYTHONPATH = "FARM_CALLER_PYTHONPATH"


def _is_farm_root(entry: str) -> bool:
    try:
        return os.path.samefile(entry, project.FARM_ROOT)
    except OSError:
        return False


def caller_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the user's command starts from: ``environ`` less what the farm's launchers set for the
    farm's own process. The farm's code on PYTHONPATH would put its ``ci`` and ``windows`` packages before the
    project's own modules in the user's Python; the caller's PYTHONPATH comes back when a launcher kept it."""
    env = dict(environ)
    env.pop("FARM_PROG", None)
    caller = env.pop(CALLER_PYTHONPATH, None)
    entries = env.get("PYTHONPATH", "").split(os.pathsep)
    kept = [p for p in entries if not (p and _is_farm_root(p))]
    if caller is not None:
        env["PYTHONPATH"] = caller
    elif kept == entries:
        pass
    elif any(kept):
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def run(command: Sequence[str], env: Mapping[str, str], *, windows: bool) -> int:
    """Run the user's command in ``env`` (added to the caller's environment, as the entry resolved it) and return
    its exit status."""
    caller = settings.current().environ
    full = caller_environ({**caller, **env})
    cmd = resolve_program(command, full.get("PATH", ""), windows=windows)
    # proc.run starts a child with this process's environment plus ``env``: what only the farm's process had is
    # left out.
    unset = [k for k in caller if k not in full]
    return proc.run(cmd, env=full, unset=unset, check=False, foreground=True).returncode


def main(cuda: str, command: Sequence[str], *, toolset: str | None = None, print_env: bool = False,
         refresh: bool = False, platform: str = sys.platform) -> int:
    cell = matrix.get_cell(cuda)
    windows = platform == "win32"
    if windows:
        env = windows_env(cell, toolset, refresh)
    else:
        if toolset:
            raise UsageError("--toolset picks an MSVC toolset, which only Windows has", toolset, "drop it on Linux")
        env = linux_env(cell)
    if print_env:
        from windows import environment

        changed = environment.changed(settings.current().environ, env) if windows else env
        for line in export_lines(changed, windows=windows):
            log.result(line)
        return 0
    return run(command_of(command), env, windows=windows)

