"""``audit``: a wheel audited against a target (symbols against ``--torch-env``)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ci.commands.command import Command, Traits, selection_args
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    wheel: str
    cpu: bool = False
    torch_env: str | None = None
    json: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheel", help="the wheel file to audit")
    selection_args(parser)
    parser.add_argument("--cpu", action="store_true", help="audit as a CPU-only wheel")
    parser.add_argument("--torch-env", help="a Python environment holding the torch to resolve symbols against")
    parser.add_argument("--json", action="store_true", help="the audit's report as JSON")


def _torch_label(python: Path) -> str:
    """``torch X.Y.Z`` of the environment of ``python`` (its folder is two levels up), read from its files."""
    from ci import errors
    from ci.toolchain import envs

    try:
        return f"torch {envs.torch_metadata(envs.PythonEnv(python.parent.parent))['version']}"
    except errors.FarmError:
        return f"the torch of {python}"


def run(opts: Options[Args]) -> int:
    from ci import errors, options, toolenv
    from ci.audit import symbols, wheel_audit
    from ci.log import log
    from ci.toolchain import toolkit

    a = opts.args
    wheel = Path(a.wheel)
    (target,) = options.resolve(opts)[:1]
    if a.cpu:
        target = dataclasses.replace(target, cpu=True)
    cuobjdump = None if a.cpu else toolkit.ensure_cuobjdump()
    search = None
    torch_label = None
    if a.torch_env:
        python = Path(a.torch_env)
        python = python / "bin" / "python" if python.is_dir() else python
        if not python.is_file():
            raise errors.UsageError("--torch-env is neither a Python interpreter nor an environment folder",
                                    a.torch_env, "pass the environment's folder or its bin/python")
        search = symbols.environment_search(python, toolenv.cache_root() / "symbols")
        torch_label = _torch_label(python)
    result = wheel_audit.audit_wheel(wheel, target, cuobjdump, search=search, cuda=not a.cpu, torch_label=torch_label)
    for check in result.checks:
        mark = ("[yellow]WARN[/]" if check.warn else "[green]ok[/]") if check.ok else "[red]FAIL[/]"
        log.result(f"{mark} {check.name}: {check.detail}", markup=True)
    if a.json:
        log.json([dataclasses.asdict(c) for c in result.checks])
    wheel_audit.raise_for_failures(result)
    return 0


COMMAND = Command("audit", "audit a wheel against a target", configure, Args, run,
                  Traits(default_target=True, selects=True, input_paths=("wheel", "torch_env"), wheels=("wheel",),
                         labels=(("wheel", "the wheel"),)))
