"""MSVC toolsets: their ``_MSC_VER``, the CUDA versions their STL accepts, and the choice of one for a cell.

Two gates decide whether nvcc can use a toolset:

* the toolkit's ``crt/host_config.h`` refuses ``_MSC_VER`` outside a half-open
  range (the cell's ``WindowsFacts.msc_ver``; ``-allow-unsupported-compiler``
  overrides it, and the farm never passes that flag);
* the toolset's own STL (``yvals_core.h``) refuses a CUDA that is too old with
  ``error STL1002: Unexpected compiler version, expected CUDA X.Y or newer``,
  whatever nvcc was told. :data:`STL_GATES` records when that floor moved, from
  the ``vs-2022-17.*`` and ``msvc-build-tools-14.*`` release tags of
  github.com/microsoft/STL.

:func:`choose` is pure: given the toolsets installed (``windows/vswhere.py``)
it returns the instance and toolset to activate, or fails with a message that
names the Visual Studio component to install and ``-vcvars_ver`` to use.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from ci.errors import MissingRequirement, UsageError
from ci.universe import shapes
from windows.vswhere import InstalledToolset, VsInstance


@dataclasses.dataclass(frozen=True, order=True)
class Toolset:
    """An MSVC toolset version: ``14.44`` (what ``-vcvars_ver`` takes) or ``14.44.35207`` (its folder)."""

    major: int
    minor: int
    build: int = 0

    @classmethod
    def parse(cls, text: str) -> Toolset:
        m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\s*", text)
        if not m or int(m.group(1)) != 14:
            raise UsageError("not an MSVC toolset version", text or "empty",
                             "write it as 14.44 or 14.44.35207 (the folder name under VC\\Tools\\MSVC)")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    @property
    def short(self) -> str:
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return f"{self.short}.{self.build}" if self.build else self.short

    @property
    def msc_ver(self) -> int:
        """``_MSC_VER`` of the compiler: 14.44 -> 1944, 14.50 -> 1950 (19.xx since VS 2017's 14.1x)."""
        return 1900 + self.minor

    def matches(self, wanted: Toolset) -> bool:
        """``14.44.35207`` matches ``14.44`` and itself."""
        return (self.major, self.minor) == (wanted.major, wanted.minor) and wanted.build in (0, self.build)


#: (first toolset minor, oldest CUDA its STL accepts): STL1002 in yvals_core.h, per microsoft/STL release tag.
#: 14.52 is main's floor when recorded (July 2026), not yet in a released toolset.
STL_GATES: tuple[tuple[int, tuple[int, int]], ...] = (
    (29, (10, 1)),  # VS 2019 16.10/16.11 and VS 2022 17.0-17.3: CUDA 10.1 Update 2
    (34, (11, 6)),  # VS 2022 17.4-17.10 (14.34-14.40)
    (41, (12, 4)),  # VS 2022 17.11-17.14 (14.41-14.44) and VS 2026's first toolset 14.50
    (51, (13, 2)),  # MSVC Build Tools 14.51
    (52, (13, 3)),  # microsoft/STL main (toolset update to 19.52)
)

#: Visual Studio release that introduced each side-by-side toolset (the component id names it).
_VS_OF_MINOR = {16: "15.9", 29: "16.11", **{30 + i: f"17.{i}" for i in range(10)}, 40: "17.10", 41: "17.11",
                42: "17.12", 43: "17.13", 44: "17.14"}


def stl_min_cuda(toolset: Toolset) -> tuple[int, int] | None:
    """The oldest CUDA the toolset's STL accepts (None: no STL1002 check, older than VS 2019 16.10)."""
    floor = None
    for first_minor, cuda in STL_GATES:
        if toolset.minor >= first_minor:
            floor = cuda
    return floor


def cuda_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def component_id(toolset: Toolset) -> str:
    """The Visual Studio Installer component that installs ``toolset`` side by side."""
    vs = _VS_OF_MINOR.get(toolset.minor)
    if vs is not None:
        return f"Microsoft.VisualStudio.Component.VC.{toolset.short}.{vs}.x86.x64"
    # Toolsets of VS 2026 (14.5x) are its default "MSVC Build Tools for x64/x86 (Latest)".
    return "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"


def product_of(toolset: Toolset) -> str:
    vs = _VS_OF_MINOR.get(toolset.minor)
    if vs is None:
        return "Visual Studio 2026" if toolset.minor >= 50 else f"MSVC {toolset.short}"
    year = {"15": "2017", "16": "2019", "17": "2022"}[vs.split(".")[0]]
    return f"Visual Studio {year} {vs}"


def refusal(cuda: str, msc_ver: tuple[int, int], toolset: Toolset) -> str | None:
    """Why a CUDA ``cuda`` toolkit with that host_config range cannot use ``toolset`` (None: it can)."""
    low, high = msc_ver
    if not low <= toolset.msc_ver < high:
        return (f"_MSC_VER {toolset.msc_ver} is outside the range {low}-{high - 1} of CUDA {cuda}'s "
                "crt/host_config.h")
    floor = stl_min_cuda(toolset)
    if floor is not None and cuda_tuple(cuda) < floor:
        return (f"its STL stops CUDA older than {floor[0]}.{floor[1]} with error STL1002, even with "
                "-allow-unsupported-compiler")
    return None


def acceptable(cell: shapes.Cell, toolset: Toolset) -> bool:
    facts = _facts(cell)
    return refusal(cell.cuda, facts.msc_ver, toolset) is None


@dataclasses.dataclass(frozen=True)
class Choice:
    """The Visual Studio instance and toolset a cell's build activates."""

    instance: VsInstance
    toolset: Toolset
    #: The cell's pinned toolset (or the one asked for); False: another acceptable one stands in.
    preferred: bool
    note: str = ""

    @property
    def vcvars_ver(self) -> str:
        return str(self.toolset)


def _facts(cell: shapes.Cell) -> shapes.WindowsFacts:
    if cell.windows is None:
        raise UsageError(f"cell {cell.name} has no Windows facts", cell.cuda,
                         "add windows=WindowsFacts(...) to the cell in ci/universe/matrix.py")
    return cell.windows


def _rank(item: InstalledToolset) -> tuple[bool, tuple[int, ...]]:
    """Release instances before previews, newer Visual Studio before older."""
    return (not item.instance.prerelease, item.instance.version_key)


def _candidates(installed: Sequence[InstalledToolset]) -> list[tuple[InstalledToolset, Toolset]]:
    return [(item, Toolset.parse(item.version)) for item in installed]


def choose(cell: shapes.Cell, installed: Sequence[InstalledToolset], wanted: str | None = None,
           skipped: Sequence[str] = ()) -> Choice:
    """The instance and toolset for ``cell``: ``wanted`` (``--toolset``), else the cell's pinned toolset, else the
    acceptable toolset closest to it (older first: a wheel built with a newer toolset needs a newer VC++ runtime
    than the user's torch needs)."""
    facts = _facts(cell)
    pinned = Toolset.parse(facts.toolset)
    candidates = _candidates(installed)
    if wanted:
        asked = Toolset.parse(wanted)
        why = refusal(cell.cuda, facts.msc_ver, asked)
        if why:
            raise UsageError(f"MSVC {asked} cannot build CUDA {cell.cuda}: {why}", f"--toolset {wanted}",
                             f"use a toolset CUDA {cell.cuda} accepts (the farm pins {pinned.short})")
        matching = [(i, t) for i, t in candidates if t.matches(asked)]
        if not matching:
            raise _missing(cell, asked, candidates, skipped)
        item, toolset = max(matching, key=lambda pair: (_rank(pair[0]), pair[1]))
        return Choice(item.instance, toolset, preferred=True)
    good = [(i, t) for i, t in candidates if refusal(cell.cuda, facts.msc_ver, t) is None]
    exact = [(i, t) for i, t in good if t.matches(pinned)]
    if exact:
        item, toolset = max(exact, key=lambda pair: (_rank(pair[0]), pair[1]))
        return Choice(item.instance, toolset, preferred=True)
    if not good:
        raise _missing(cell, pinned, candidates, skipped)

    def closeness(pair: tuple[InstalledToolset, Toolset]) -> tuple[int, bool, bool, tuple[int, ...], int]:
        item, toolset = pair
        return (abs(toolset.minor - pinned.minor), toolset.minor > pinned.minor, item.instance.prerelease,
                tuple(-v for v in item.instance.version_key), -toolset.build)

    item, toolset = min(good, key=closeness)
    return Choice(item.instance, toolset, preferred=False,
                  note=f"MSVC {pinned.short} (the cell's toolset) is not installed; using {toolset}, which CUDA "
                       f"{cell.cuda} also accepts. Install {component_id(pinned)} for the pinned one.")


def install_hint(toolset: Toolset, instance_path: str | None = None) -> str:
    """How to add ``toolset`` to an installation (or install Build Tools with it)."""
    component = component_id(toolset)
    where = f'--installPath "{instance_path}"' if instance_path else '--installPath "<your Visual Studio folder>"'
    return (f"install the MSVC {toolset.short} toolset: Visual Studio Installer > Modify > Individual components > "
            f"\"MSVC ... build tools (v{toolset.short})\", i.e. component {component} "
            f"(\"%ProgramFiles(x86)%\\Microsoft Visual Studio\\Installer\\vs_installer.exe\" modify {where} "
            f"--add {component} --quiet --norestart); the farm then runs vcvarsall.bat x64 "
            f"-vcvars_ver={toolset.short}")


def _missing(cell: shapes.Cell, toolset: Toolset, candidates: Sequence[tuple[InstalledToolset, Toolset]],
             skipped: Sequence[str] = ()) -> MissingRequirement:
    facts = _facts(cell)
    lines = []
    for item, found in candidates:
        why = refusal(cell.cuda, facts.msc_ver, found) or "accepted, but not the toolset asked for"
        lines.append(f"  - MSVC {found} in {item.instance.label}: {why}")
    installed = ", ".join(f"{t} ({i.instance.label})" for i, t in candidates) or "no Visual Studio with the C++ " \
        "build tools (vswhere found none with VC\\Tools\\MSVC)"
    target_path = max((i for i, _ in candidates), key=_rank).instance.path if candidates else None
    return MissingRequirement(
        f"no MSVC toolset that CUDA {cell.cuda} accepts is installed (it needs {toolset.short}, _MSC_VER "
        f"{facts.msc_ver[0]}-{facts.msc_ver[1] - 1})", installed, install_hint(toolset, target_path),
        details="\n".join([*(["MSVC toolsets found:", *lines] if lines else []),
                            *(["Visual Studio installations without a usable toolset:", *(f"  - {s}" for s in skipped)]
                              if skipped else [])]),
    )
