"""Options resolved once, at the top: the project, the targets, and every path made absolute.

Below the command line nothing reads ``sys.argv``; the modules that need a resolved value (the targets of a
command, a folder from the option/variable/default cascade) import this module, never ``ci/cli.py``, so the
command line sits on top of the import graph.

Standard library plus ``packaging`` only (nox brings it).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ci.errors import UsageError
from ci.universe import project, shapes, targets
from ci.universe.selection import Selection, select


def load_project(args: argparse.Namespace) -> project.ProjectConfig:
    return project.load(getattr(args, "project", None), getattr(args, "config", None))


def selection(args: argparse.Namespace) -> Selection:
    return Selection(
        target_ids=tuple(getattr(args, "target", []) or ()),
        cuda=getattr(args, "cuda", None),
        torch=getattr(args, "torch", None),
        python=getattr(args, "python", None),
        arch_list=getattr(args, "arch_list", None) or os.environ.get("TORCH_CUDA_ARCH_LIST") or None,
        arch=getattr(args, "arch", None),
    )


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


def resolve(args: argparse.Namespace, *, os_name: str = "linux") -> tuple[targets.Target, ...]:
    """The targets a command acts on; validates project, configuration and selection."""
    config = load_project(args)
    sel = selection(args)
    wheel = getattr(args, "wheel", None)
    if sel.empty and wheel and args.subcommand in ("test-gpu", "test", "run", "audit"):
        sel = selection_from_wheel(wheel, sel.arch_list)
    if sel.empty and args.subcommand in ("build", "develop", "test-gpu", "test", "audit", "run", "reproduce") \
            and not getattr(args, "all", False):
        default = targets.default_target(config, os_name, prefer_python=targets.current_python())
        if sel.arch_list:
            default = targets.with_arch_list(default, sel.arch_list)
        return (default,)
    if sel.empty and args.subcommand in ("build-cuda",):
        sel = Selection(cuda="13", arch_list=sel.arch_list)
    chosen = select(config, sel, os_name)
    if args.subcommand in ("build", "develop") and not getattr(args, "all", False) and len(chosen) > 1:
        current = [t for t in chosen if t.python == targets.current_python()]
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


LANES = ("default", "sanitizer", "ptx-jit", "multi-gpu", "bench")


def parse_lanes(value: str) -> list[str]:
    lanes = [lane.strip() for lane in value.split(",") if lane.strip()]
    unknown = sorted(set(lanes) - set(LANES))
    if unknown or not lanes:
        raise UsageError("unknown GPU test lane", ", ".join(unknown) or "none given",
                         f"choose from {', '.join(LANES)}")
    return lanes
