"""The axes a project's targets range over, as its configuration narrows the universe: the torch releases a
classic project covers, the Pythons it allows (an abi3 target's build Python and floor; the free-threaded ones),
and the toolkit cells it is built in, each with the architectures of one target (the target torch's, the
project's ``__CUDA_ARCH__`` gates', its own lists)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from packaging.version import Version

from ci.errors import TargetError
from ci.universe import archs, build_files, matrix, shapes
from ci.universe.arch_gates import sources
from ci.universe.project import ProjectConfig


def sorted_versions(values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=shapes.python_order)


def free_threaded_wanted(config: ProjectConfig) -> bool:
    """Whether ``config`` builds free-threaded CPythons beyond those its ``python`` list names (``3.13t``): the
    table's ``free-threaded`` key (default and why: ``ci.universe.project.DEFAULT_FREE_THREADED``)."""
    return config.free_threaded


def free_threaded_labels(config: ProjectConfig, release: shapes.TorchRelease) -> list[str]:
    """The free-threaded CPythons (``3.13t``) of ``release`` that ``config`` builds: those its ``python`` list names,
    else (unless it opts out) each one its ``python`` specifier and requires-python allow."""
    labels = [f"{p}t" for p in release.free_threaded]
    if not config.python and not free_threaded_wanted(config):
        return []
    return [p for p in labels if python_allowed(config, p)]


def any_allowed(config: ProjectConfig, candidates: Iterable[str]) -> bool:
    return any(python_allowed(config, p) for p in candidates)


def torch_releases(config: ProjectConfig) -> list[shapes.TorchRelease]:
    """The torch releases a classic project covers."""
    if config.torch:
        return [matrix.get_torch(v) for v in config.torch]
    if config.torch_spec is not None:
        chosen = [r for r in matrix.TORCH_RELEASES if Version(r.version) in config.torch_spec]
        if not chosen:
            raise TargetError(
                f"no torch release of the farm matches [tool.cuda-ext-farm] torch of {config.name}",
                str(config.torch_spec), f"the farm knows {', '.join(r.minor for r in matrix.TORCH_RELEASES)}",
            )
        return chosen
    # Default: the newest release of each CUDA major of the project's cells (`cuda = ["13"]`: torch built with CUDA
    # 13), else of every cell the farm has.
    newest: dict[int, shapes.TorchRelease] = {}
    majors = {matrix.get_cell(key).cuda_major for key in config.cuda} if config.cuda else \
        {c.cuda_major for c in matrix.CELLS}
    for release in matrix.TORCH_RELEASES:
        if release.cuda_major in majors:
            newest[release.cuda_major] = release
    return [newest[m] for m in sorted(newest)]


def python_range(releases: Iterable[shapes.TorchRelease]) -> str:
    """The Pythons ``releases`` have wheels for, together: ``3.10 to 3.15`` (``; free-threaded 3.13t, 3.14t``)."""
    releases = list(releases)
    pythons = sorted_versions(p for r in releases for p in r.pythons)
    said = f"{pythons[0]} to {pythons[-1]}" if len(pythons) > 1 else ", ".join(pythons) or "none"
    threaded = sorted({p for r in releases for p in r.labels if shapes.is_free_threaded(p)}, key=shapes.python_order)
    return f"{said}; free-threaded {', '.join(threaded)}" if threaded else said


def python_allowed(config: ProjectConfig, python: str) -> bool:
    """Whether ``config`` allows the CPython ``python`` (``3.12``, ``3.13t``): a ``python`` list names it (a
    free-threaded one by its ``t``), a specifier and requires-python hold for its version."""
    version = Version(shapes.python_minor(python))
    if config.python and python not in config.python:
        return False
    if config.python_spec is not None and version not in config.python_spec:
        return False
    return not (config.requires_python is not None and version not in config.requires_python)


def cells_for(config: ProjectConfig, cuda_major: int | None, arch: str = "x86_64",
               torch: str | None = None) -> list[shapes.Cell]:
    if config.cuda:
        chosen = [matrix.get_cell(key) for key in config.cuda]
    elif config.abi == "stable":
        # A stand-in (cu124 for cu128) is built only when asked for (--cuda 12.4) or in place of its release
        # cell on a machine that cannot reach that cell's toolkit (ci/linux/buildall.py local_equivalents).
        chosen = [c for c in matrix.CELLS if not c.stand_in_for]
    else:
        chosen = [c for c in matrix.CELLS if c.release]
    if cuda_major is not None:
        chosen = [c for c in chosen if c.cuda_major == cuda_major]
    if arch == "aarch64":
        chosen = [c for c in chosen if c.aarch64]
    unique: dict[str, shapes.Cell] = {c.name: c for c in chosen}
    return [target_cell(config, c, torch or c.torch, arch) for c in unique.values()]


def abi3_floor(config: ProjectConfig, python: str) -> str:
    """The floor of an abi3 target built with ``python``: the ``cpXY`` its build tags the wheel with
    (``py_limited_api`` of bdist_wheel, read before the build), else what requires-python declares, else
    ``python``.

    ``python`` satisfies requires-python, so the declared floor is never above it; ``min`` keeps that so.
    """
    declared = config.limited_api_floor or build_files.declared_floor(config.requires_python)
    return python if declared is None else min(declared, python, key=shapes.version_key)


def abi3_python(config: ProjectConfig, candidates: Sequence[str]) -> str:
    allowed = [p for p in sorted_versions(candidates) if python_allowed(config, p)]
    if not allowed:
        known = sorted_versions(candidates)
        raise TargetError(f"no Python allowed by the configuration of {config.name}",
                          ", ".join(config.python) or str(config.python_spec or config.requires_python),
                          f"the torch releases have wheels for Python {known[0]} to {known[-1]}: widen "
                          "[tool.cuda-ext-farm] python or [project] requires-python to some of them")
    return max(allowed[0], matrix.PYTHON_LIMITED_API, key=shapes.version_key) if config.abi == "stable" \
        else allowed[0]


def target_cell(config: ProjectConfig, cell: shapes.Cell, torch: str, arch: str) -> shapes.Cell:
    """``cell`` with one target's architectures: those of the target torch's own build for the wheel's CPU
    architecture (``TorchRelease.archs_for``) and those the project's ``__CUDA_ARCH__`` comparisons need
    (ci/universe/arch_gates/), the project's ``cuda-archs`` instead where it sets them, then its
    ``extra-cuda-archs``."""
    cell = archs.with_torch_archs(cell, matrix.get_torch(torch).archs_for(arch))
    gates = sources.project_gates(config.root)
    cell = archs.per_generation(cell, gates) if older_major(config, cell) else archs.with_gated_archs(cell, gates)
    return archs.with_extra_archs(archs.with_arch_list(cell, config.cuda_archs), config.extra_cuda_archs)


def older_major(config: ProjectConfig, cell: shapes.Cell) -> bool:
    """Whether ``cell`` is an older CUDA major of a ``pypi-cuda-majors`` project with ``older-majors-sass`` at one SASS
    per GPU generation: every platform's build alike (one cell, one set of variant properties)."""
    if not config.pypi_cuda_majors or config.older_majors_sass != "per-generation":
        return False
    cells = [matrix.get_cell(key) for key in config.cuda] if config.cuda else list(matrix.CELLS)
    return cell.cuda_major < max(c.cuda_major for c in cells)
