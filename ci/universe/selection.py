"""What the command line asks for: the cell a command names (:func:`resolve`), and the project's targets narrowed
by it.

A :class:`Selection` holds ``--target``, ``--cuda``, ``--torch``, ``--python``,
``--arch-list`` and ``--arch``; :func:`select` narrows the project's targets
(``ci/universe/targets/``) by each in turn and fails with one line naming the filter
that matched nothing. A stable-ABI project may name any toolkit of the universe;
a torch release brings its CUDA major.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ci import settings
from ci.errors import MatrixError, TargetError
from ci.universe import archs, matrix, shapes
from ci.universe.project import ProjectConfig
from ci.universe.targets import Target, platform_targets, stand_in, targets_for
from ci.universe.targets.axes import abi3_floor, sorted_versions, target_cell

#: A dispatched run's selection (dispatch.yml's inputs) -> the environment variable the plan step sets from each
#: (``env:``, never the script).
PLAN_ENV = {"targets": "FARM_DISPATCH_TARGETS", "torch": "FARM_DISPATCH_TORCH", "cuda": "FARM_DISPATCH_CUDA",
            "python": "FARM_DISPATCH_PYTHON", "os": "FARM_DISPATCH_OS", "publish": "FARM_DISPATCH_PUBLISH"}


@dataclasses.dataclass(frozen=True)
class Selection:
    """What the command line asked for; every field narrows the project's targets."""

    target_ids: tuple[str, ...] = ()
    cuda: str | None = None
    torch: str | None = None
    python: str | None = None
    arch_list: str | None = None
    #: The CPU architecture (``--arch aarch64``); None: x86_64, or the architecture of the target ids given.
    arch: str | None = None
    #: Where ``arch_list`` came from, for its errors (``--arch-list``, ``TORCH_CUDA_ARCH_LIST``).
    arch_list_from: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.target_ids or self.cuda or self.torch or self.python or self.arch)


def resolve(
    key: str,
    arch_list: str | None = None,
    torch: str | None = None,
) -> shapes.Cell:
    """The cell a command names (``--cuda``), with the architecture and torch overrides applied, validated
    (``arch_list``: ``--arch-list`` / ``TORCH_CUDA_ARCH_LIST`` as the entry resolved it, ci/settings.py)."""
    cell = matrix.get_cell(key)
    cell = archs.with_arch_list(cell, arch_list)
    if torch:
        cell = dataclasses.replace(cell, torch=matrix.get_torch(torch).version)
    return matrix.validate(cell)


def select(config: ProjectConfig, selection: Selection, os: str = "linux") -> tuple[Target, ...]:
    """The project's targets narrowed by ``selection`` (never empty: that is an error naming the filter)."""
    if selection.target_ids and selection.arch is None:
        available = platform_targets(config, os)
    else:
        available = targets_for(config, os, selection.arch)
    chosen = list(available)
    if selection.target_ids:
        chosen = _by_ids(config, available, selection.target_ids)
    if selection.cuda:
        chosen = _by_cuda(config, chosen, selection.cuda, selection.arch, os)
    if selection.torch:
        chosen = _by_torch(config, chosen, selection.torch, bool(selection.cuda))
    if selection.python:
        chosen = _by_python(config, chosen, selection.python)
    return tuple(with_arch_list(t, selection) for t in chosen)


def with_arch_list(target: Target, selection: Selection) -> Target:
    """``target`` with the selection's architectures (``--arch-list`` / ``TORCH_CUDA_ARCH_LIST``), if any; a list the
    target's toolkit cannot build is refused naming where the list came from."""
    if not selection.arch_list:
        return target
    try:
        return dataclasses.replace(target, cell=archs.with_arch_list(target.cell, selection.arch_list))
    except MatrixError as exc:
        if not selection.arch_list_from:
            raise
        fix = exc.fix
        if selection.arch_list_from == "TORCH_CUDA_ARCH_LIST":
            fix += "; or unset TORCH_CUDA_ARCH_LIST (this environment sets it) for each target torch's own list"
        raise MatrixError(f"{selection.arch_list_from}: {exc.what}", exc.value, fix) from None


def _by_ids(config: ProjectConfig, available: Sequence[Target], target_ids: Sequence[str]) -> list[Target]:
    """``--target``: the targets of those ids, in the order asked."""
    by_id = {t.id: t for t in available}
    # A stand-in's id (cu124 for cu128) names the target a machine without the release cell's toolkit builds.
    by_id |= {s.id: s for s in (stand_in(t) for t in available) if s is not None and s.id not in by_id}
    unknown = [i for i in target_ids if i not in by_id]
    if unknown:
        raise TargetError(f"{config.name} has no such target", unknown[0],
                          f"its targets are {', '.join(by_id)} ({settings.entry('matrix')} lists them)")
    return [by_id[i] for i in target_ids]


def _by_cuda(config: ProjectConfig, chosen: Sequence[Target], cuda: str, arch_asked: str | None,
             os: str) -> list[Target]:
    """``--cuda``: the targets of that cell (a major: its release cell), else its stand-in's, else, for a stable-ABI
    project, a target in that cell whether the project lists it or not."""
    cell = matrix.get_cell(cuda)
    cuda_major_only = cuda.strip().isdigit()
    matching = [t for t in chosen if t.cell.name == cell.name
                or (cuda_major_only and t.cell.cuda_major == cell.cuda_major and t.cell.release)]
    if not matching and cell.stand_in_for:  # --cuda 12.4: the stand-in of a release cell the project has
        matching = [t for t in (stand_in(t) for t in chosen if t.cell.name == cell.stand_in_for) if t]
    if not matching and config.abi == "stable":
        # Any toolkit of the universe may build a stable-ABI project, listed or not.
        python = chosen[0].python if chosen else matrix.PYTHON_LIMITED_API
        arch = arch_asked or "x86_64"
        if arch != "x86_64" and not cell.aarch64:
            raise TargetError(f"cell {cell.name} has no {arch} toolkit", cuda,
                              "aarch64 wheels are built in the CUDA 13 cells "
                              f"({settings.entry('matrix')} lists them)")
        matching = [Target(config, target_cell(config, cell, cell.torch, arch), cell.torch, python, os,
                           abi3_floor=chosen[0].abi3_floor if chosen else abi3_floor(config, python), arch=arch)]
    if not matching:
        raise TargetError(f"{config.name} has no target for CUDA", cuda,
                          f"its CUDA cells are {', '.join(sorted({t.cell.cuda for t in chosen}))}")
    return matching


def _by_torch(config: ProjectConfig, chosen: Sequence[Target], torch: str, cuda_asked: bool) -> list[Target]:
    """``--torch``: a stable-ABI project's targets built against that release, a classic project's targets of it."""
    chosen = _cells_of_torch(config, chosen, matrix.get_torch(torch), cuda_asked)
    if config.abi == "stable":
        release = matrix.get_torch(torch)
        chosen = [dataclasses.replace(t, torch=release.version) for t in chosen]
        for target in chosen:
            matrix.validate(dataclasses.replace(target.cell, torch=target.torch))
        return chosen
    minor = shapes.minor_of(matrix.get_torch(torch).version)
    matching = [t for t in chosen if t.torch_minor == minor]
    if not matching:
        raise TargetError(f"{config.name} has no target for torch", torch,
                          f"its torch releases are {', '.join(sorted_versions(t.torch_minor for t in chosen))}"
                          " ([tool.cuda-ext-farm] torch adds more)")
    return matching


def _by_python(config: ProjectConfig, chosen: Sequence[Target], python: str) -> list[Target]:
    """``--python``: an abi3 project's wheels built and tested with that CPython, a per-Python project's targets
    of it."""
    if config.python_abi != "abi3" or shapes.is_free_threaded(python):  # a free-threaded CPython's wheels: per-Python
        matching = [t for t in chosen if t.python == python]
        if not matching:
            raise TargetError(f"{config.name} has no target for Python", python,
                              f"its Pythons are {', '.join(sorted_versions(t.python for t in chosen))}")
        return matching
    # --python asks for a wheel that serves that CPython (any at or above the abi3 floor), built and tested with
    # that interpreter: the wheel (its id, its cpXY-abi3 tag) stays the same.
    chosen = [t for t in chosen if t.abi3]
    if not chosen:
        raise TargetError(f"{config.name} builds no abi3 wheel", python, "its Pythons are free-threaded ones: "
                          "ask for one of them (3.13t), or add GIL Pythons to [tool.cuda-ext-farm] python")
    oldest = chosen[0].oldest_python
    if shapes.version_key(python) < shapes.version_key(oldest):
        raise TargetError(f"{config.name} builds abi3 wheels for CPython {oldest} and newer",
                          python, f"pick {oldest} or newer")
    for target in chosen:
        release = matrix.get_torch(target.torch)
        if python not in release.pythons:
            raise TargetError(f"torch {release.minor} has no wheel for the Python asked for", python,
                              f"its wheels are for {', '.join(release.pythons)} (the project's "
                              f"cp{oldest.replace('.', '')}-abi3 wheel serves every one of them)")
    return [dataclasses.replace(t, python=python, abi3_floor=t.oldest_python) for t in chosen]


def _cells_of_torch(config: ProjectConfig, chosen: Sequence[Target], release: shapes.TorchRelease,
                    cuda_asked: bool) -> list[Target]:
    """``chosen`` narrowed to the cells of ``release``'s CUDA major: a torch release brings its CUDA, so
    ``--torch 2.11`` alone means its CUDA 13 cells (an explicit ``--cuda`` is left for validate to judge)."""
    if cuda_asked:
        return list(chosen)
    matching = [t for t in chosen if t.cell.cuda_major == release.cuda_major]
    if not matching:
        raise TargetError(
            f"torch {release.minor} is built with CUDA {release.cuda}, but none of the cells selected for "
            f"{config.name} has CUDA {release.cuda_major}", release.minor,
            f"its cells are {', '.join(sorted({t.cell.name for t in chosen}))}: pick a torch built for their CUDA "
            f"major, or add a CUDA {release.cuda_major} cell to [tool.cuda-ext-farm] cuda",
        )
    return matching
