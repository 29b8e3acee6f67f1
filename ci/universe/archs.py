"""CUDA architectures: the ``TORCH_CUDA_ARCH_LIST`` grammar, which architectures each toolkit compiles, and a
cell with its architectures overridden (refused before anything runs when its nvcc cannot compile one)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from ci.errors import MatrixError
from ci.universe.arch_gates import Gate, behaviour


class _Archs(Protocol):
    """What of a matrix cell the architecture override reads and replaces (``ci.universe.matrix.Cell``)."""

    @property
    def cuda(self) -> str: ...

    @property
    def sass_archs(self) -> tuple[str, ...]: ...

    @property
    def ptx_arch(self) -> str: ...


CellT = TypeVar("CellT", bound=_Archs)


def parse_arch_list(value: str) -> tuple[tuple[str, ...], str | None]:
    """Parse a ``TORCH_CUDA_ARCH_LIST`` value into (SASS archs, PTX arch).

    Accepts ``;``, ``,`` or spaces as separators, like torch does.
    """
    archs: list[str] = []
    ptx: str | None = None
    for raw in value.replace(",", ";").replace(" ", ";").split(";"):
        item = raw.strip()
        if not item:
            continue
        base = item.removesuffix("+PTX")
        try:
            major, minor = base.split(".")
            int(major)
            int(minor.rstrip("af"))
        except ValueError:
            raise MatrixError(
                "bad architecture in the arch list", item, "use forms like '8.0' or '12.0+PTX', separated by ';'"
            ) from None
        archs.append(base)
        if item.endswith("+PTX"):
            ptx = base
    if not archs:
        raise MatrixError("empty architecture list", repr(value), "give at least one architecture, like '9.0+PTX'")
    return tuple(archs), ptx


_PRE_VOLTA = ("5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2")
_AMPERE_HOPPER = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0")

#: The architectures each toolkit's nvcc compiles (``nvcc --list-gpu-code``), by toolkit (major.minor prefix):
#: CUDA 13 dropped everything before Turing, added 8.8 and renamed Thor's 10.1 to 11.0; 12.8 added Blackwell
#: (10.0, 10.1, 12.0) and 12.9 the 10.3/12.1 parts and the ``f`` (family) variants. An ``a`` variant exists for
#: 9.0 and every architecture from 10.0 on.
TOOLKIT_ARCHS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("13.", ("7.5", "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")),
    ("12.9", (*_PRE_VOLTA, *_AMPERE_HOPPER, "10.0", "10.1", "10.3", "12.0", "12.1")),
    ("12.8", (*_PRE_VOLTA, *_AMPERE_HOPPER, "10.0", "10.1", "12.0")),
    ("12.", (*_PRE_VOLTA, *_AMPERE_HOPPER)),
)


def _arch_key(arch: str) -> tuple[int, int]:
    major, minor = arch.split(".")
    return int(major), int(minor.rstrip("af"))


def toolkit_archs(cuda: str) -> tuple[str, ...] | None:
    """The architectures ``cuda``'s nvcc compiles, oldest first (None: a toolkit the farm does not know)."""
    return next((archs for prefix, archs in TOOLKIT_ARCHS if cuda.startswith(prefix)), None)


def supported_archs(cuda: str) -> tuple[str, str] | None:
    """The oldest and newest architecture ``cuda``'s nvcc compiles (None: not known to the farm)."""
    known = toolkit_archs(cuda)
    return (known[0], known[-1]) if known else None


def compiles(cuda: str, arch: str) -> bool:
    """Whether ``cuda``'s nvcc compiles ``arch`` (``9.0``, ``9.0a``, ``12.0f``); True for a toolkit the farm does
    not know (nvcc judges)."""
    known = toolkit_archs(cuda)
    if known is None:
        return True
    base, suffix = arch.rstrip("af"), arch[len(arch.rstrip("af")):]
    if base not in known:
        return False
    if suffix == "a":
        return _arch_key(base) >= (9, 0)
    if suffix == "f":
        return _arch_key(base) >= (10, 0) and not (cuda.startswith("12.") and _arch_key(cuda) < (12, 9))
    return suffix == ""


#: What torch's extension builder takes in ``TORCH_CUDA_ARCH_LIST`` (``torch.utils.cpp_extension``'s
#: ``supported_arches`` of the releases the farm knows; 10.1 until Thor became 11.0): no 8.8, no ``f`` variants.
TORCH_EXTENSION_ARCHS = frozenset({
    "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "9.0a",
    "10.0", "10.0a", "10.1", "10.1a", "10.3", "10.3a", "11.0", "11.0a", "12.0", "12.0a", "12.1", "12.1a",
})


def buildable(cuda: str, arch: str) -> bool:
    """Whether a torch extension can be built for ``arch`` with ``cuda``: its nvcc compiles it and torch's extension
    builder takes it."""
    return compiles(cuda, arch) and (toolkit_archs(cuda) is None or arch in TORCH_EXTENSION_ARCHS)


def check_archs(cuda: str, archs: tuple[str, ...]) -> None:
    """Refuse, in one line, the first of ``archs`` an extension cannot be built for with ``cuda`` (``9.9``), naming
    those it can: checked before anything runs, not by torch or nvcc minutes into a build."""
    bad = [a for a in archs if not buildable(cuda, a)]
    if bad:
        known = [a for a in toolkit_archs(cuda) or () if a in TORCH_EXTENSION_ARCHS]
        raise MatrixError(f"architecture not supported by CUDA {cuda}", bad[0],
                          f"torch extensions with CUDA {cuda} build for {', '.join(known)} (and +PTX of any of them): "
                          "pick from those, or another CUDA cell with --cuda")


def with_arch_list(cell: CellT, value: str | None) -> CellT:
    """Return ``cell`` with its architectures overridden by ``value`` (if given); an architecture the cell's
    nvcc cannot compile is refused here, before anything runs, not by the compiler after minutes of work.

    PTX only where ``value`` asks for it (``9.0+PTX``): ``--arch-list 9.0`` builds SASS for 9.0 and no PTX."""
    if not value:
        return cell
    archs, ptx = parse_arch_list(value)
    check_archs(cell.cuda, archs)
    return dataclasses.replace(cell, sass_archs=archs, ptx_arch=ptx or "")  # type: ignore[type-var]


def with_torch_archs(cell: CellT, torch_sass: tuple[str, ...]) -> CellT:
    """``cell`` with the architectures of the target torch's own build (``TorchRelease.archs_for``): the wheel
    covers exactly the GPUs torch runs on. Those the cell's nvcc cannot compile (CUDA 12.4 and Blackwell) are
    left out and get the newest compilable architecture's PTX instead, so those GPUs JIT it; otherwise no PTX
    (torch itself has none: a GPU its SASS does not cover cannot run torch). An empty list (a torch with no CUDA
    build for that CPU architecture) keeps the cell's own."""
    if not torch_sass:
        return cell
    known = supported_archs(cell.cuda)
    low, high = known if known else (torch_sass[0], torch_sass[-1])
    inside = tuple(a for a in torch_sass if _arch_key(low) <= _arch_key(a) <= _arch_key(high))
    above = any(_arch_key(a) > _arch_key(high) for a in torch_sass)
    if not inside:
        return cell
    return dataclasses.replace(cell, sass_archs=inside, ptx_arch=inside[-1] if above else "")  # type: ignore[type-var]


def new_in(cuda: str) -> tuple[str, ...]:
    """The architectures ``cuda``'s nvcc is the first to compile (12.8: 10.0 10.1 12.0), as far as the farm's table
    tells: GPUs of those run only on drivers of that CUDA release or newer (B200 and the RTX 50 series: r570, CUDA
    12.8), which can JIT-compile PTX made by that toolkit."""
    for index, (prefix, archs) in enumerate(TOOLKIT_ARCHS):
        if cuda.startswith(prefix):
            older = TOOLKIT_ARCHS[index + 1][1] if index + 1 < len(TOOLKIT_ARCHS) else archs
            return tuple(a for a in archs if a not in older)
    return ()


def per_generation(cell: CellT, gates: Sequence[Gate] = ()) -> CellT:
    """``cell`` for an older CUDA major's half of one PyPI wheel across majors (``older-majors-sass``): SASS for the
    oldest architecture of each GPU generation in its list (its floor), and for the generations new in its toolkit
    (:func:`new_in`) PTX of the newest kept one instead of their SASS; then SASS of every architecture whose code
    takes another side of one of the project's ``gates`` (``__CUDA_ARCH__ >= 890``: ci/universe/arch_gates/) than
    the code its GPUs would run (:func:`gated_archs`). Of torch 2.10's 7.0 7.5 8.0 8.6 9.0 10.0 12.0 a CUDA 12.8 build
    keeps SASS 7.0 8.0 9.0 and PTX 9.0 (7.0 8.0 8.9 9.0 where the sources compare ``__CUDA_ARCH__`` with 890);
    ``a``/``f`` variants and an existing PTX are kept.

    Why it still runs on every GPU that torch runs on: a cubin runs on every GPU of its generation with an equal
    or higher minor (``runs_on``: sm_80 code on an sm_86 or sm_89 GPU), and a Blackwell GPU needs a driver of CUDA
    12.8 or newer, which JIT-compiles the 12.8 build's PTX once (then the driver's cache has it). The drivers older
    than the toolkit (minor-version compatibility: r525 runs CUDA 12.8 code) cannot JIT, and they run only the older
    generations, which keep SASS. What a thinned GPU runs is its floor's code: that architecture's instruction
    scheduling, and its side of every ``#if`` on the architecture. The project's own ``#if`` lines keep their
    architectures (above); the toolkit's and torch's headers gate only faster paths with portable ones beside them
    (``cuda_fp8.hpp``'s hardware FP8 conversions from 8.9), which a thinned GPU runs instead. Compression cannot make
    this half smaller instead: its CUDA 12 fatbins stay LZ4 (ci/linux/host.py, FATBIN_COMPRESSION: Zstandard needs a
    CUDA 12.4 driver, r550, and torch 2.10's CUDA 12.8 runs on r525 and r535, the drivers of many of the users this
    half is for: they cannot run a CUDA 13 torch)."""
    variants = [a for a in cell.sass_archs if a[-1].isalpha()]
    plain = [a for a in cell.sass_archs if a not in variants]
    older = [a for a in plain if a not in new_in(cell.cuda)] or plain  # only new GPUs: nothing to JIT them from
    kept: dict[int, str] = {}
    for arch in older:
        major = _arch_key(arch)[0]
        if major not in kept or _arch_key(arch) < _arch_key(kept[major]):
            kept[major] = arch
    jit = len(older) < len(plain)
    ptx = cell.ptx_arch or (max(older, key=_arch_key) if jit else "")
    floors = tuple(kept.values())
    chosen = dict.fromkeys([*floors, *gated_archs(cell.cuda, plain, floors, ptx, gates), *variants])
    sass = tuple(sorted(chosen, key=_arch_key))  # stable: 9.0 before 9.0a
    return dataclasses.replace(cell, sass_archs=sass, ptx_arch=ptx)  # type: ignore[type-var]


def with_gated_archs(cell: CellT, gates: Sequence[Gate] = ()) -> CellT:
    """``cell`` with SASS added for every architecture whose code takes another side of one of the project's
    ``gates`` than the build its GPUs would run otherwise (:func:`gated_archs`): torch's own lists carry no 8.9, so
    without it an Ada GPU (L4, L40S, RTX 4090) would run the sm_86 build and miss a ``__CUDA_ARCH__ >= 890`` path.
    A project without gates keeps torch's list as it is."""
    added = gated_archs(cell.cuda, cell.sass_archs, cell.sass_archs, cell.ptx_arch, gates)
    if not added:
        return cell
    sass = tuple(sorted({*cell.sass_archs, *added}, key=_arch_key))
    return dataclasses.replace(cell, sass_archs=sass)  # type: ignore[type-var]


def runner(gpu: str, sass: Iterable[str], ptx: str = "") -> str | None:
    """The build a GPU of capability ``gpu`` runs of plain ``sass`` and ``ptx``: the SASS of its generation with
    the highest minor not above its own, else the PTX (JIT-compiled) when not above it; None: neither runs there."""
    own = [a for a in sass if _arch_key(a)[0] == _arch_key(gpu)[0] and _arch_key(a) <= _arch_key(gpu)]
    if own:
        return max(own, key=_arch_key)
    return ptx if ptx and _arch_key(ptx) <= _arch_key(gpu) else None


def gated_archs(cuda: str, served: Sequence[str], floors: Sequence[str], ptx: str,
                gates: Sequence[Gate]) -> tuple[str, ...]:
    """The architectures a thinned list must keep SASS for so that every GPU from ``served``'s oldest to its newest
    (every architecture ``cuda`` builds in that range, listed by torch or not) runs code that takes the same side of
    each of ``gates`` as code built for it: lowest first, each GPU whose :func:`runner` behaves otherwise than its
    own architecture gets its own SASS. Architectures ``cuda`` cannot build are left to the PTX (their gated paths
    are lost: ``lost_paths`` says which)."""
    plain = [g for g in gates if not g.specific]
    if not plain or not served:
        return ()
    low, high = min(served, key=_arch_key), max(served, key=_arch_key)
    gpus = [a for a in toolkit_archs(cuda) or served if buildable(cuda, a) and _arch_key(low) <= _arch_key(a)
            <= _arch_key(high)]
    kept = list(floors)
    added: list[str] = []
    for gpu in sorted({*gpus, *served}, key=_arch_key):
        ran = runner(gpu, kept, ptx)
        if ran is not None and behaviour(ran, plain) != behaviour(gpu, plain) and buildable(cuda, gpu):
            kept.append(gpu)
            added.append(gpu)
    return tuple(added)


def lost_paths(cell: _Archs, full: Sequence[str], gates: Sequence[Gate]) -> dict[str, tuple[Gate, ...]]:
    """For each GPU of ``full`` (torch's list) that runs another architecture's code in ``cell``, the project's gates
    whose other side it runs there (empty where none: only that architecture's instruction scheduling differs)."""
    plain = [g for g in gates if not g.specific]
    lost: dict[str, tuple[Gate, ...]] = {}
    for gpu in full:
        ran = runner(gpu, [a for a in cell.sass_archs if not a[-1].isalpha()], cell.ptx_arch)
        if ran is not None and ran != gpu:
            lost[gpu] = tuple(g for g in plain if g.holds(ran) != g.holds(gpu))
    return lost


def thinned_text(cell: _Archs, full: Sequence[str], gates: Sequence[Gate]) -> str:
    """What ``older-majors-sass`` costs the GPUs of ``full`` (torch's list) in the thinned ``cell``, for ``matrix``:
    ``7.5 runs the 7.0 build, 8.6 the 8.0 one: its scheduling, and the paths the toolkit's and torch's headers gate
    above it; kept 8.9 for the sources' __CUDA_ARCH__ >= 890 (csrc/k.cu:3)``."""
    sass = [a for a in cell.sass_archs if not a[-1].isalpha()]
    lost = lost_paths(cell, full, gates)
    pairs = [(gpu, ran) for gpu in lost if (ran := runner(gpu, sass, cell.ptx_arch)) in sass
             and _arch_key(ran)[0] == _arch_key(gpu)[0]]  # the others JIT the PTX: archs_source says so
    parts = []
    if pairs:
        (gpu, ran), *rest = pairs
        parts.append(f"{gpu} runs the {ran} build" + "".join(f", {g} the {r} one" for g, r in rest)
                     + ": its scheduling, and the paths the toolkit's and torch's headers gate above it")
    beyond = sorted({g.text() for found in lost.values() for g in found})
    if beyond:
        parts.append(f"beyond CUDA {cell.cuda} the sources' {', '.join(beyond)} take their other side")
    plain = [g for g in gates if not g.specific]
    if plain:
        gated = [a for a in sass if a in new_in(cell.cuda) or any(
            _arch_key(b)[0] == _arch_key(a)[0] and _arch_key(b) < _arch_key(a) for b in sass)]
        shown = ", ".join(f"{g.text()} ({g.where})" for g in plain[:3]) + (", ..." if len(plain) > 3 else "")
        parts.append(f"kept {' '.join(gated)} for the sources' {shown}" if gated
                     else f"the sources' {shown} need no more")
    return "; ".join(parts)


def with_extra_archs(cell: CellT, value: str | None) -> CellT:
    """``cell`` with a project's additions (``extra-cuda-archs = "8.9;12.0+PTX"``): more SASS, and PTX where an
    entry says ``+PTX``; checked against the cell's nvcc like an override."""
    if not value:
        return cell
    extra = with_arch_list(cell, value)  # parses and range-checks; its PTX default is not used
    _, ptx = parse_arch_list(value)
    sass = tuple(sorted(set(cell.sass_archs) | set(extra.sass_archs), key=_arch_key))
    return dataclasses.replace(cell, sass_archs=sass, ptx_arch=ptx or cell.ptx_arch)  # type: ignore[type-var]


def runs_on(gpu: str, sass: tuple[str, ...], ptx: tuple[str, ...] = ()) -> bool:
    """Whether code with these SASS and PTX architectures runs on a GPU of compute capability ``gpu``: SASS of
    the same major and an equal or lower minor (an ``a`` variant only on its own capability, an ``f`` family one
    on its family: the same major, that minor or above), or PTX of an equal or lower capability, JIT-compiled by
    the driver (``a`` PTX only on its own capability)."""
    g_major, g_minor = _arch_key(gpu)
    for arch in sass:
        major, minor = _arch_key(arch)
        if arch.endswith("a"):
            if (major, minor) == (g_major, g_minor):
                return True
        elif major == g_major and minor <= g_minor:
            return True
    return any(_arch_key(a) == (g_major, g_minor) if a.endswith("a") else _arch_key(a) <= (g_major, g_minor)
               for a in ptx)
