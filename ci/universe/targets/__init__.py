"""A build has an identity: the :class:`Target`.

A target is one wheel of one project: the project, its ABI kind, the torch
release it is built against, the CUDA toolkit cell, the Python ABI and the
platform. Its ``id`` names every axis::

    myops-stable-cu130-cp310abi3-linux_x86_64
    classic_ext-torch2.11-cu130-cp312-linux_x86_64
    classic_ext-torch2.11-cu130-cp313t-linux_x86_64

and everything a build writes is keyed by it: the wheelhouse folder, the report,
the staging and build folders, the lock, nox session arguments, workflow jobs.
Two targets never share a path. An abi3 id names the wheel's floor, the oldest
CPython it installs on (requires-python's lower bound, else the target's lowest
Python), not ``Target.python``, the CPython that builds it.

A project's targets are the farm's universe (``ci/universe/matrix.py``) filtered by the
project's configuration (``ci/universe/project/``):

* stable ABI: one abi3 wheel per toolkit cell (default: every cell), built
  against the cell's torch; it serves every later torch.
* classic: one wheel per torch release x Python (or per torch release for
  ``python-abi = "abi3"``), built in the release cell of the torch's CUDA major
  (or in each cell the project lists), with torch pinned in its metadata and a
  local version ``+pt2.11.cu130`` so several torch builds coexist on an index.
* free-threaded CPythons (``python = "3.13t"``, PEP 703): a target of their own for each one the torch release has
  wheels for (``TorchRelease.free_threaded``), ``cp313t`` in the id and ``cp313-cp313t`` in the wheel tag, in both
  kinds of project: abi3 does not cover a free-threaded CPython (it has no limited API), so a stable-ABI or abi3
  project builds one per-Python wheel per free-threaded CPython besides its abi3 wheel (``axes.python_labels``).

The package: the :class:`Target` and the enumeration of a project's targets (:func:`targets_for`,
:func:`default_target`, :func:`workflow_targets`) here; ``axes`` the torch releases, Pythons and cells a project's
configuration selects (each cell with one target's architectures); ``platforms`` the platforms and CPU
architectures, and this machine's.

Only the standard library and ``packaging``: ``noxfile.py`` uses this package.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ci.errors import TargetError
from ci.universe import archs, matrix, shapes
from ci.universe.project import ProjectConfig
from ci.universe.targets import axes, platforms


def stand_in(target: Target) -> Target | None:
    """``target`` built in its cell's local stand-in (cu124 for cu128), or None when the cell has none."""
    cell = matrix.stand_in_of(target.cell)
    if cell is None:
        return None
    return dataclasses.replace(target, cell=axes.target_cell(target.project, cell, target.torch, target.arch))


@dataclasses.dataclass(frozen=True)
class Target:
    project: ProjectConfig
    cell: shapes.Cell
    #: The exact torch version the wheel is built against (``2.11.0``).
    torch: str
    #: The CPython used for the build (for abi3 wheels the oldest the project allows that torch has wheels for), as a
    #: label: ``3.12``, or ``3.13t`` for a free-threaded build (``shapes.python_minor`` gives its ``3.13``).
    python: str
    os: str = "linux"
    #: A CPU-only build (no toolkit, no CUDA code): ``--cpu``.
    cpu: bool = False
    #: abi3 only: the oldest CPython the wheel installs on (its ``cpXY-abi3`` tag); None: ``python``.
    #: Kept apart from ``python`` because a ``Py_LIMITED_API=0x03090000`` wheel built with 3.12 is a cp39 wheel.
    abi3_floor: str | None = None
    #: The CPU architecture (``platforms.ARCHS``): ``aarch64`` targets are cross-compiled on x86_64
    #: (ci/linux/cross.py).
    arch: str = "x86_64"

    @property
    def free_threaded(self) -> bool:
        """Built for a free-threaded CPython (``cp313t``): never an abi3 wheel, whatever the project's kind."""
        return shapes.is_free_threaded(self.python)

    @property
    def abi3(self) -> bool:
        return self.project.python_abi == "abi3" and not self.free_threaded

    @property
    def torch_minor(self) -> str:
        return shapes.minor_of(self.torch)

    @property
    def oldest_python(self) -> str:
        """The oldest CPython the wheel serves: the abi3 floor, else the build Python."""
        return (self.abi3_floor or self.python) if self.abi3 else self.python

    @property
    def python_tag(self) -> str:
        """``cp312`` or ``cp310abi3`` (the id's spelling; abi3: the floor, not the build Python)."""
        tag = "cp" + self.oldest_python.replace(".", "")
        return tag + "abi3" if self.abi3 else tag

    @property
    def wheel_tag_prefix(self) -> str:
        """The interpreter-abi part of the wheel tag: ``cp310-abi3``, ``cp312-cp312`` or ``cp313-cp313t``."""
        interpreter = "cp" + shapes.python_minor(self.oldest_python).replace(".", "")
        return f"{interpreter}-abi3" if self.abi3 else f"{interpreter}-cp{self.oldest_python.replace('.', '')}"

    @property
    def platform(self) -> str:
        return "win_amd64" if self.os == "windows" else f"linux_{self.arch}"

    @property
    def cross(self) -> bool:
        """Built for another architecture than this machine's: cross-compiled (ci/linux/cross.py). On an arm64
        machine (GitHub's arm runners) an aarch64 target is a native container build."""
        return self.os == "linux" and self.arch != platforms.host_arch()

    @property
    def torch_part(self) -> str:
        return "stable" if self.project.abi == "stable" else f"torch{self.torch_minor}"

    @property
    def variant(self) -> str:
        """The index a wheel belongs to (``cu130``, ``cpu``), as PyTorch's own per-CUDA indexes."""
        return "cpu" if self.cpu else self.cell.name

    @property
    def id(self) -> str:
        return f"{self.project.normalized_name}-{self.torch_part}-{self.variant}-{self.python_tag}-{self.platform}"

    @property
    def local_version(self) -> str:
        """The PEP 440 local label that gives every wheel of a release a name of its own (a GitHub Release is
        one flat folder; pip cannot tell two same-named files apart): ``pt2.11.cu130`` for classic wheels;
        ``cu124`` for a stable-ABI wheel of a variant other than the project's PyPI variant, as PyTorch labels
        its builds (``pip install --extra-index-url .../cu124`` then prefers it to PyPI's); none for the PyPI
        variant's stable-ABI wheels (PyPI refuses local versions) and CPU-only builds."""
        if self.project.abi == "stable":
            return "" if self.cpu or self.cell.name == pypi_variant(self.project) else self.variant
        return f"pt{self.torch_minor}.{self.variant}"  # wheelmeta.classic_label: the minor sorts as a number

    @property
    def cxx(self) -> int:
        """The C++ standard the build compiles as: the one the target's torch's headers need (``TorchRelease.cxx``,
        which torch's cpp_extension passes; ``ci/builds/standard.py`` refuses a project pinning an older one)."""
        return matrix.get_torch(self.torch).cxx

    @property
    def torch_requirement(self) -> str:
        """What the build environment installs: this exact CUDA build of torch."""
        return shapes.torch_requirement(self.torch)

    @property
    def torch_pin(self) -> str | None:
        """The wheel's runtime requirement on torch (classic only: the release it was built against)."""
        if self.project.abi == "stable":
            return None
        return f"torch=={self.torch_minor}.*"

    def as_dict(self) -> dict[str, object]:
        cell = self.cell
        return {
            "id": self.id,
            "project": self.project.name,
            "abi": self.project.abi,
            "python_abi": self.project.python_abi,
            "torch": self.torch,
            "torch_pin": self.torch_pin,
            "cxx": self.cxx,
            "python": self.python,
            "free_threaded": self.free_threaded,
            "abi3_floor": self.oldest_python if self.abi3 else None,
            "wheel_tag": f"{self.wheel_tag_prefix}-{self.platform}",
            "local_version": self.local_version,
            "os": self.os,
            "platform": self.platform,
            "arch": self.arch,
            "stand_in_for": cell.stand_in_for or None,
            "variant": self.variant,
            "cuda": cell.cuda,
            "cell": cell.name,
            "release_cell": cell.release,
            "toolkit": cell.toolkit.kind,
            "arch_list": cell.arch_list,
            "sass": list(cell.sass_archs),
            "ptx": cell.ptx_arch,
            "host_compiler": cell.host_compiler,
            "base_image": cell.base_image,
            "debian_suite": cell.debian_suite,
            "msvc": None if cell.windows is None else {
                "msc_ver": list(cell.windows.msc_ver), "toolset": cell.windows.toolset,
                "toolkit": cell.windows.toolkit},
        }


def archs_of(config: ProjectConfig, os: str) -> tuple[str, ...]:
    """The architectures ``config`` builds on ``os`` that the universe has a cell for."""
    if os != "linux":
        return platforms.ARCHS[os]
    return tuple(a for a in platforms.ARCHS[os]
                 if a in config.archs and (a == "x86_64" or _targets_or_none(config, os, a)))


def platform_targets(config: ProjectConfig, os: str = "linux") -> tuple[Target, ...]:
    """Every target of ``config`` on ``os``, every architecture (``targets_for`` is one architecture's); none for an
    OS the project's ``os`` leaves out."""
    if os in platforms.PLATFORMS and os not in config.oses:
        return ()
    return tuple(t for arch in platforms.ARCHS[os] if os != "linux" or arch in config.archs or arch == "x86_64"
                 for t in _targets_or_none(config, os, arch))


def _targets_or_none(config: ProjectConfig, os: str, arch: str) -> tuple[Target, ...]:
    if arch == "x86_64" or os != "linux":
        return targets_for(config, os)
    if arch not in config.archs:
        return ()
    try:
        return targets_for(config, os, arch)
    except TargetError:  # the project's torch/Python choice has no aarch64 CUDA build: x86_64 only
        return ()


def targets_for(config: ProjectConfig, os: str = "linux", arch: str | None = None) -> tuple[Target, ...]:
    """Every target of ``config`` on ``os`` for one architecture (default: the OS's first), in matrix order."""
    arch = arch or platforms.ARCHS.get(os, ("",))[0]
    platforms.check_arch(os, arch)
    if os not in config.oses:
        raise TargetError(f"{config.name} is not built for {os}", ", ".join(config.oses),
                          f'add "{os}" to [tool.cuda-ext-farm] os (or remove os for every platform)')
    cross = os == "linux" and arch != "x86_64"
    if cross and arch not in config.archs:
        raise TargetError(f"{config.name} is not built for {arch}", ", ".join(config.archs),
                          f'add "{arch}" to [tool.cuda-ext-farm] archs (or remove archs for every architecture)')
    targets: list[Target] = []
    if config.abi == "stable":
        all_pythons = sorted({p for r in matrix.TORCH_RELEASES for p in r.pythons}, key=shapes.version_key)
        python = axes.abi3_python(config, all_pythons) if axes.any_allowed(config, all_pythons) else None
        for cell in axes.cells_for(config, None, arch):
            matrix.validate(cell)
            if python is not None:
                targets.append(Target(config, cell, cell.torch, python, os,
                                      abi3_floor=axes.abi3_floor(config, python), arch=arch))
            targets += [Target(config, cell, cell.torch, p, os, arch=arch)
                        for p in axes.free_threaded_labels(config, matrix.get_torch(cell.torch))]
    else:
        releases = axes.torch_releases(config)
        for release in releases:
            if not cross or release.aarch64:
                targets += _classic_targets(config, release, releases, os, arch)
    if not targets:
        covered = "" if config.abi == "stable" else \
            f" (its torch releases have wheels for Python {axes.python_range(axes.torch_releases(config))})"
        raise TargetError(f"the configuration of {config.name} selects no {arch} build", config.source,
                          f"check torch, python{covered} and cuda in [tool.cuda-ext-farm]"
                          + ("; aarch64 wheels need a CUDA 13 cell and torch 2.11 or newer" if cross else ""))
    return tuple(targets)


def _no_python(config: ProjectConfig, release: shapes.TorchRelease, releases: list[shapes.TorchRelease]) -> None:
    """``python`` leaves ``release`` no Python: refused, naming the Pythons the selected torch releases cover."""
    minors = ", ".join(r.minor for r in releases)
    if not any(p in r.labels for r in releases for p in config.python):
        raise TargetError("[tool.cuda-ext-farm] python names no Python the selected torch releases have wheels for",
                          ", ".join(config.python), f"torch {minors} {'has' if len(releases) == 1 else 'have'} "
                          "wheels for Python "
                          f"{axes.python_range(releases)}: pick some of those")
    missing = [p for p in config.python if p not in release.labels]
    raise TargetError(f"torch {release.minor} has no wheel for the requested Python on PyPI", ", ".join(missing),
                      f"torch {release.minor} has wheels for {axes.python_range([release])} (the selected torch "
                      f"releases, {minors}, for {axes.python_range(releases)}): add one of those, or leave torch "
                      f"{release.minor} out with [tool.cuda-ext-farm] torch")


def _classic_targets(config: ProjectConfig, release: shapes.TorchRelease, releases: list[shapes.TorchRelease],
                     os: str, arch: str) -> list[Target]:
    """A classic project's targets of one torch release: each allowed Python's (abi3: one wheel for the GIL
    builds), and each allowed free-threaded CPython's, in each selected cell."""
    cells = axes.cells_for(config, release.cuda_major, arch, release.version)
    if not cells:
        raise TargetError(
            f"torch {release.minor} is built with CUDA {release.cuda}, but no toolkit cell of CUDA "
            f"{release.cuda_major} is selected for {config.name}", release.minor,
            "add a CUDA "
            f"{release.cuda_major} cell to [tool.cuda-ext-farm] cuda, or drop this torch release",
        )
    pythons = [p for p in release.pythons if axes.python_allowed(config, p)]
    threaded = axes.free_threaded_labels(config, release)
    if not pythons and not threaded:
        if any(p not in release.labels for p in config.python):
            _no_python(config, release, releases)
        return []
    abi3 = config.python_abi == "abi3"
    chosen = [axes.abi3_python(config, pythons)] if abi3 and pythons else pythons
    floor = axes.abi3_floor(config, chosen[0]) if abi3 and chosen else None
    chosen = sorted([*chosen, *threaded], key=shapes.python_order)
    return [Target(config, cell, release.version, python, os, abi3_floor=None if shapes.is_free_threaded(python)
                   else floor, arch=arch) for cell in cells for python in chosen]


def default_target(config: ProjectConfig, os: str = "linux", prefer_python: str | None = None) -> Target:
    """The release target: release cell of the newest CUDA major, newest torch, and (per-Python) the
    running Python when the project covers it, else the newest."""
    available = targets_for(config, os)
    newest_major = max(t.cell.cuda_major for t in available)
    candidates = [t for t in available if t.cell.cuda_major == newest_major]
    release = [t for t in candidates if t.cell.release] or candidates
    newest_torch = max((t.torch for t in release), key=shapes.version_key)
    release = [t for t in release if t.torch == newest_torch]
    preferred = [t for t in release if t.python == prefer_python]
    if preferred:
        return preferred[0]
    # A free-threaded target is the release target only when asked for: the GIL build is what most installs run.
    gil = [t for t in release if not t.free_threaded] or release
    return max(gil, key=lambda t: shapes.python_order(t.python))


def pypi_variant(config: ProjectConfig) -> str:
    """The variant whose wheels PyPI gets: the release cell of the newest CUDA major (the release target's)."""
    return default_target(config).cell.name


def with_arch_list(target: Target, arch_list: str | None) -> Target:
    return dataclasses.replace(target, cell=archs.with_arch_list(target.cell, arch_list))


def released(found: Iterable[Target]) -> tuple[Target, ...]:
    """The targets GitHub builds: a local stand-in cell (``stand_in_for``: cu124 for cu128) is what this machine
    builds in place of a release cell whose toolkit it cannot reach; GitHub reaches it and builds the release cell."""
    return tuple(t for t in found if not t.cell.stand_in_for)


def workflow_targets(config: ProjectConfig) -> tuple[tuple[Target, ...], tuple[Target, ...]]:
    """The targets the generated workflows have jobs for: every architecture's Linux targets and the Windows ones,
    without local stand-ins (the workflows, and dispatch.yml's plan, read this one answer)."""
    return released(platform_targets(config, "linux")), released(platform_targets(config, "windows"))
