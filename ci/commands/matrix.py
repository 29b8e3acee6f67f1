"""``matrix``: the project's targets (torch x Python x CUDA), one line each, with the GPU architectures a build of
each compiles for and where that list comes from; ``--wide`` adds the compiler, toolkit, route and glibc of each,
``--json`` everything as data.

The architectures are the build's own: the selection's ``--arch-list`` / ``TORCH_CUDA_ARCH_LIST`` applied to each
target as ``build`` applies it (``ci/universe/selection.py``), then the list torch is given
(``ci/builds/arch_flags.py`` ``arch_list_of``).
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ci.commands.command import Command, Traits, selection_args
from ci.options import Options

if TYPE_CHECKING:
    from ci.universe import project, targets

#: The width the default table is made to fit (a target id of a short project name included).
WIDTH = 100


@dataclasses.dataclass(frozen=True)
class Args:
    os: str = "all"
    json: bool = False
    wide: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    selection_args(parser)
    parser.add_argument("--os", choices=("linux", "windows", "all"), default="all",
                        help="the platform whose targets to list")
    parser.add_argument("--json", action="store_true",
                        help="everything about each target (and the farm's cells) as one JSON document")
    parser.add_argument("--wide", action="store_true",
                        help="add each target's compiler, CUDA toolkit, route (how it is built here and on GitHub) and "
                        "glibc floor")


def targets_of_oses(opts: Options[Any], os_choice: str, config: project.ProjectConfig) -> list[targets.Target]:
    """The selected targets (all of the project's without a selection) of every OS ``--os`` names, with the
    selection's architectures applied as a build applies them."""
    from ci.universe import targets
    from ci.universe.selection import select, with_arch_list

    chosen: list[targets.Target] = []
    for os_name in config.oses if os_choice == "all" else (os_choice,):
        sel = opts.selection  # select() applies the architectures itself; every target of the OS: here
        chosen += select(config, sel, os_name) if not sel.empty else \
            [with_arch_list(t, sel) for t in targets.platform_targets(config, os_name)]
    return chosen


def arch_source(opts: Options[Any], target: targets.Target) -> str:
    """Where the list a build of ``target`` gives torch comes from, in words."""
    from ci.linux import routes

    if "TORCH_CUDA_ARCH_LIST" in target.project.build_env:
        return "build-env TORCH_CUDA_ARCH_LIST of [tool.cuda-ext-farm]"
    sel = opts.selection
    if sel.arch_list_from == "TORCH_CUDA_ARCH_LIST":
        return f"TORCH_CUDA_ARCH_LIST={sel.arch_list}, from the environment"
    if sel.arch_list:
        return f"--arch-list {sel.arch_list}"
    return routes.archs_source(target)


def gpu_archs(target: targets.Target) -> str:
    """The architectures a build compiles for, as torch's list with spaces: ``8.0 9.0 12.0+PTX``."""
    from ci.builds import arch_flags

    return "-" if target.cpu else arch_flags.arch_list_of(target).replace(";", " ")


def compiler(target: targets.Target) -> str:
    """The host compiler of a build: MSVC's toolset (and the _MSC_VER range nvcc accepts), the cross compiler, the
    cell's."""
    cell = target.cell
    if target.os == "windows" and cell.windows is not None:
        return f"MSVC {cell.windows.toolset} ({cell.windows.msc_ver[0]}-{cell.windows.msc_ver[1] - 1})"
    return f"{target.arch}-linux-gnu-g++" if target.cross else cell.host_compiler


def rows(config: project.ProjectConfig, chosen: Sequence[targets.Target], wide: bool) -> list[list[str]]:
    """The table: a header, then a row per target."""
    from ci.linux import routes

    header = ["target", "torch", "Python", "CUDA", "CPU", "GPU architectures"]
    if wide:
        header += ["compiler", "toolkit: here / GitHub", "route: here / GitHub", "glibc: release floor / here"]
    table = [header]
    for t in chosen:
        torch = f"{t.torch_minor}+" if config.abi == "stable" else t.torch_minor
        python = f"{t.oldest_python}+ abi3" if t.abi3 else t.python
        row = [t.id, torch, python, t.cell.cuda, t.arch, gpu_archs(t)]
        if wide:
            found = routes.route(t)
            glibc = "-" if t.os == "windows" else f"{found.release_floor} / {found.local_glibc}"
            row += [compiler(t), f"{found.local_toolkit} / {found.github_toolkit}", f"{found.local} / {found.github}",
                    glibc]
        table.append(row)
    return table


def text(opts: Options[Any], config: project.ProjectConfig, chosen: Sequence[targets.Target], wide: bool) -> str:
    """The table as plain lines (one per target, never wrapped), a title above and where the architectures come
    from below."""
    table = rows(config, chosen, wide)
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [f"{config.name}: {len(chosen)} targets ({config.abi} ABI, {config.python_abi})", ""]
    lines += [" ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    sources: dict[str, int] = {}
    for t in chosen:
        if not t.cpu:
            source = arch_source(opts, t)
            sources[source] = sources.get(source, 0) + 1
    if sources:
        lines += ["", "GPU architectures (SASS; +PTX where the list says so) come from:"]
        for source, count in sources.items():
            lines += textwrap.wrap(f"{source} ({count} target{'s' if count > 1 else ''})", WIDTH,
                                   initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines)


def run(opts: Options[Args]) -> int:
    from ci import options
    from ci.linux import routes
    from ci.log import log

    config = options.load_project(opts)
    chosen = targets_of_oses(opts, opts.args.os, config)
    if opts.args.json:
        data = routes.matrix_json(config, chosen)
        for entry, target in zip(data["targets"], chosen, strict=True):  # type: ignore[call-overload]
            entry["arch_list"], entry["archs_source"] = gpu_archs(target).replace(" ", ";"), arch_source(opts, target)
        log.json(data)
    else:
        log.result(text(opts, config, chosen, opts.args.wide))
    return 0


COMMAND = Command("matrix", "the project's targets (torch x Python x CUDA), with the GPU architectures each builds",
                  configure, Args, run, Traits(selects=True))
