"""How each target is built, here and on GitHub, and the glibc floor each way gives.

A wheel's ``manylinux_2_N`` tag is the newest glibc symbol version it uses (auditwheel reads it off the
binaries), so its floor is at most the glibc of the system it was linked against: the route decides it.

* release (GitHub): every Linux target is built in a ``manylinux_2_28`` container (AlmaLinux 8, glibc 2.28,
  ``gcc-toolset``), x86_64 on ``ubuntu-latest``, aarch64 natively on ``ubuntu-24.04-arm``; the audit holds
  the wheels to ``manylinux_2_28`` (``FARM_GLIBC_FLOOR``, ci/audit/glibc_floor.py).
* here: host, container (Debian base) and cross (aarch64) builds link against a Debian bullseye sysroot
  (glibc 2.31, gcc 10's libstdc++; ci/linux/sysroot.py) under the machine's or image's compiler. With
  ``FARM_SYSROOT=none``: a host build links against this machine's glibc, a container build against its Debian
  base's, a cross build against the cross compiler's own (Debian's ``libc6-dev-arm64-cross``).

Standard library only: ``nox -s matrix`` prints this before any environment exists.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from ci.linux import sysroot
from ci.universe import archs, matrix, shapes
from ci.universe.arch_gates import sources
from ci.universe.project import ProjectConfig
from ci.universe.targets import Target

#: glibc of each Debian suite the farm bootstraps.
DEBIAN_GLIBC = {"bullseye": "2.31", "bookworm": "2.36", "trixie": "2.41"}
GITHUB_RUNNERS = {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}


@dataclasses.dataclass(frozen=True)
class Route:
    #: How this machine builds the target, and the glibc its wheel can need at most.
    local: str
    local_glibc: str
    local_toolkit: str
    #: How the release workflow builds it.
    github: str
    github_toolkit: str
    release_floor: str = matrix.RELEASE_FLOOR

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def linked_glibc(fallback: str) -> str:
    """The glibc local builds link against: the sysroot's (``FARM_SYSROOT``), else ``fallback``."""
    suite = sysroot.suite_from_env()
    return fallback if suite is None else f"{DEBIAN_GLIBC[suite]} ({suite} sysroot)"


def host_glibc() -> str:
    """The glibc a host build links against: the sysroot's, or with ``FARM_SYSROOT=none`` this machine's."""
    found = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    return linked_glibc((found or "glibc ?").split()[-1])


@functools.cache
def cross_glibc(cc: str = "aarch64-linux-gnu-gcc") -> str:
    """The glibc of the aarch64 cross compiler's sysroot (read from its libc.so.6), or ``?``."""
    if shutil.which(cc) is None:
        return "?"
    out = subprocess.run([cc, "-print-file-name=libc.so.6"], capture_output=True, text=True, check=False)
    path = Path(out.stdout.strip())
    if not path.is_file():
        return "?"
    m = re.search(rb"release version (\d+\.\d+)", path.resolve().read_bytes())
    return m.group(1).decode() if m else "?"


def toolkit_text(cell: shapes.Cell) -> str:
    kind = cell.toolkit.kind
    if kind == "pypi":
        nvcc = next((p.split("==")[1] for p in cell.toolkit.packages if p.startswith("nvidia-cuda-nvcc==")), "?")
        return f"PyPI nvcc {nvcc}"
    if kind == "debian":
        return f"Debian {cell.debian_suite} {cell.toolkit.packages[0].split('=')[0]} {cell.cuda}"
    return f"NVIDIA's repository, CUDA {cell.cuda}"


def route(target: Target) -> Route:
    cell = target.cell
    tk = toolkit_text(cell)
    if target.os == "windows":
        where = "windows-2022 runner (MSVC " + (cell.windows.toolset if cell.windows else "?") + ")"
        return Route(local="not here (Windows runner; windows/ rehearses its toolkit step)", local_glibc="-",
                     local_toolkit=cell.windows.toolkit if cell.windows else "-", github=where,
                     github_toolkit=cell.windows.toolkit if cell.windows else "-", release_floor="-")
    github = f"manylinux_2_28_{target.arch} container on {GITHUB_RUNNERS[target.arch]}"
    if target.cross:
        return Route(local=f"cross: x86_64 nvcc + {target.arch}-linux-gnu-g++, import under qemu",
                     local_glibc=linked_glibc(cross_glibc()), local_toolkit=f"{tk} (+ {target.arch} runtime wheels)",
                     github=github, github_toolkit=tk)
    if cell.toolkit.kind == "pypi":
        return Route(local="host build (or its container: build-cuda)", local_glibc=host_glibc(), local_toolkit=tk,
                     github=github, github_toolkit=tk)
    if cell.stand_in_for:
        github = f"not built on GitHub: the local stand-in of {cell.stand_in_for}"
    stand_in = matrix.stand_in_of(cell)
    if stand_in is not None:  # cu128: NVIDIA's repository; where it is unreachable (here) its stand-in builds
        return Route(local=f"stand-in {stand_in.name} where NVIDIA's repository is unreachable (container on a "
                     f"Debian {stand_in.debian_suite} base)", local_glibc=container_glibc(stand_in),
                     local_toolkit=toolkit_text(stand_in), github=github, github_toolkit=tk)
    return Route(local=f"container on a Debian {cell.debian_suite} base", local_glibc=container_glibc(cell),
                 local_toolkit=tk, github=github, github_toolkit=tk)


def container_glibc(cell: shapes.Cell) -> str:
    """The glibc a container build of ``cell`` on its Debian base links against: the sysroot's, except for a cell
    whose toolkit is Debian's own (its headers need the base's glibc headers: ci/linux/container.py uses_sysroot)."""
    base = DEBIAN_GLIBC.get(cell.debian_suite, "?")
    if cell.toolkit.kind == "debian":
        return f"{base} (Debian {cell.debian_suite}: its CUDA headers need that glibc's)"
    return linked_glibc(base)


def archs_source(target: Target) -> str:
    """Where a target's architectures come from: the target torch's own build, with the project's additions or
    the toolkit's limits, or the project's own list."""
    own = matrix.get_torch(target.torch).archs_for(target.arch)
    sass = target.cell.sass_archs
    if target.project.cuda_archs:
        return "the project's cuda-archs"
    label = f"torch {shapes.minor_of(target.torch)}'s"
    if tuple(sass) == tuple(own):
        return label
    if set(sass) > set(own):
        return f"{label} + the project's {' '.join(a for a in sass if a not in own)}"
    dropped = [a for a in own if a not in sass]
    beyond = [a for a in dropped if not archs.buildable(target.cell.cuda, a)]
    fresh = [a for a in dropped if a not in beyond and a in archs.new_in(target.cell.cuda)]
    minors = [a for a in dropped if a not in beyond and a not in fresh]
    ptx = f", PTX {target.cell.ptx_arch} for those" if target.cell.ptx_arch else ""
    thinned = archs.thinned_text(target.cell, own, sources.project_gates(target.project.root)) if minors else ""
    parts = [f"less {' '.join(minors)}: one SASS per GPU generation (older-majors-sass): {thinned}"] if minors else []
    if fresh:
        parts.append(f"less {' '.join(fresh)}: GPUs new in CUDA {target.cell.cuda}, whose drivers JIT{ptx}")
    if beyond:
        parts.append(f"less {' '.join(beyond)}: beyond CUDA {target.cell.cuda}{ptx}")
    return f"{label} " + "; ".join(parts)


def matrix_json(config: ProjectConfig, chosen: Sequence[Target]) -> dict[str, object]:
    """``matrix --json``: the project, its targets with their routes, and the cells of the universe."""
    return {"project": config.name, "abi": config.abi, "python_abi": config.python_abi,
            "targets": [{**t.as_dict(), "route": route(t).as_dict(),
                         "torch_sass": list(matrix.get_torch(t.torch).archs_for(t.arch)),
                         "archs_source": archs_source(t)} for t in chosen],
            "cells": [c.as_dict() for c in matrix.CELLS]}


def matrix_table(config: ProjectConfig, chosen: Sequence[Target]) -> Table:
    """``matrix``: a row per target with its toolkit, compiler, glibc floor and route, here and on GitHub."""
    table = Table(title=f"{config.name}: {len(chosen)} targets ({config.abi} ABI, {config.python_abi})")
    table.add_column("target", no_wrap=True)
    for col in ("torch", "python", "CUDA", "arch", "SASS / PTX", "compiler", "glibc floor", "toolkit: here / GitHub",
                "route: here / GitHub"):
        table.add_column(col)
    for t in chosen:
        cell = t.cell
        found = route(t)
        if t.os == "windows" and cell.windows is not None:
            compiler = f"MSVC {cell.windows.toolset} ({cell.windows.msc_ver[0]}-{cell.windows.msc_ver[1] - 1})"
        else:
            compiler = f"{t.arch}-linux-gnu-g++" if t.cross else cell.host_compiler
        python = f"{t.python} (abi3 >= {t.oldest_python})" if t.abi3 else t.python  # build Python, and the floor
        floor = "-" if t.os == "windows" else f"release {found.release_floor}; here glibc {found.local_glibc}"
        table.add_row(t.id, t.torch, python, cell.cuda + (" (release)" if cell.release else ""), t.arch,
                      f"{' '.join(cell.sass_archs)} / {cell.ptx_arch or '-'} ({archs_source(t)})", compiler, floor,
                      f"{found.local_toolkit} / {found.github_toolkit}", f"{found.local} / {found.github}")
    return table
