"""The options a command receives, resolved once at the entry (``ci/cli.py``): the command's own arguments as a
frozen dataclass, the resolved settings (``ci/settings.py``), the project, the selection of targets and the output
folders, every path absolute.

Below the entry nothing reads ``sys.argv``; the modules that need a resolved value (the targets of a command) take
:class:`Options` or plain values, never an ``argparse.Namespace``. This module imports neither ``ci/cli.py`` nor
``ci/commands``: the command line sits on top of the import graph.

Standard library plus ``packaging`` only (nox brings it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Generic, TypeVar

from ci import settings as farm_settings
from ci.errors import UsageError
from ci.universe import project, shapes, targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select, with_arch_list
from ci.universe.targets import platforms

A = TypeVar("A")


@dataclasses.dataclass(frozen=True)
class Options(Generic[A]):
    """What a command runs with: its arguments (``args``, the command's own dataclass) and what the entry resolved."""

    command: str
    args: A
    settings: farm_settings.Settings
    project: str | None = None
    config: str | None = None
    selection: Selection = dataclasses.field(default_factory=Selection)
    wheelhouse: str | None = None
    build_dir: str | None = None
    max_jobs: int | None = None
    #: an empty selection means the project's default target (build, develop, test, ...)
    default_target: bool = False
    #: of several selected targets, one (the current Python's, else the newest): build without --all, develop
    one_target: bool = False
    #: the CUDA an empty selection means (build-cuda: 13)
    default_cuda: str | None = None


def load_project(opts: Options[Any]) -> project.ProjectConfig:
    return reading.load(opts.project, opts.config)


def selection_from_wheel(name: str, arch_list: str | None) -> Selection:
    """The target a wheel was built for, read from its name: ``+pt2.11.cu130`` (torch and cell), ``+cu124``
    (cell), and the interpreter tag of a per-Python wheel."""
    import re

    from ci import wheelmeta

    parsed = wheelmeta.parse_name(Path(name))
    local = parsed.version.local or ""
    torch = cuda = python = None
    # pt2.11.cu130 (and the older pt211cu130), then the project's own segments (g1a2b3c4 of setuptools-scm).
    m = re.match(r"pt(\d+)\.(\d+)\.(cu\d+|cpu)(\.|$)", local) or re.match(r"pt(\d)(\d+)(cu\d+|cpu)(\.|$)", local)
    if m:
        torch, cuda = f"{m.group(1)}.{m.group(2)}", (m.group(3) if m.group(3) != "cpu" else None)
    elif re.fullmatch(r"cu\d+", local):
        cuda = local
    interpreter, abi, platform = parsed.tags[0].split("-")[:3]
    if abi != "abi3" and interpreter.startswith("cp"):
        python = f"{interpreter[2]}.{interpreter[3:]}"
    arch = "aarch64" if platform.endswith("_aarch64") else None
    return Selection(cuda=cuda, torch=torch, python=python, arch_list=arch_list, arch=arch)


def resolve(opts: Options[Any], *, os_name: str = "linux") -> tuple[targets.Target, ...]:
    """The targets a command acts on; validates project, configuration and selection. The architectures
    (``--arch-list`` / ``TORCH_CUDA_ARCH_LIST``, resolved once in ``opts.selection``) are applied here."""
    config = load_project(opts)
    sel = opts.selection
    if sel.empty and opts.default_target:
        default = targets.default_target(config, os_name, prefer_python=platforms.current_python())
        return (with_arch_list(default, sel),)
    if sel.empty and opts.default_cuda:
        sel = dataclasses.replace(sel, cuda=opts.default_cuda)
    chosen = select(config, sel, os_name)
    if opts.one_target and len(chosen) > 1:
        current = [t for t in chosen if t.python == platforms.current_python()]
        newest = max(chosen, key=lambda t: (shapes.version_key(t.torch), shapes.version_key(t.python)))
        chosen = (current[0] if current else newest,)
    return chosen


def check_toolkit_libraries(chosen: tuple[targets.Target, ...]) -> None:
    """``toolkit-libraries`` the targets' cells cannot add: refused before any toolkit is installed."""
    for target in chosen:
        wanted, known = target.project.toolkit_libraries, target.cell.toolkit.linkable
        unknown = [n for n in wanted if n not in known] if target.cell.toolkit.kind == "pypi" else []
        if unknown:
            raise UsageError(f"[tool.cuda-ext-farm] toolkit-libraries names a library cell {target.cell.name} does "
                             "not pin", unknown[0],
                             f"the libraries the farm can add are {', '.join(sorted(known)) or 'none'}")
