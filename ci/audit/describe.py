"""What a wheel says about itself: the torch releases its binaries can load in, and the GPUs its CUDA code runs on.

**The torch range from the binary.** A stable-ABI library calls torch only through the C shim
(``aoti_torch_*``, ``torch_*``); each shim function was added in some torch release. torch-abi-audit carries
PyTorch's own table of those releases (``shim_function_versions.txt`` and the 2.9 baseline): the newest release
among the shims a library imports is the oldest torch it can load in. The farm reads the imported names itself
(pyelftools for ELF of any machine, pefile for Windows DLLs: torch-abi-audit runs ``nm`` on the host, which reads
neither PE files nor, on every host, aarch64 ELF) and asks torch-abi-audit's ``classify_symbols`` for the floor.
A stable wheel then says ``Requires-Dist: torch>=<floor>``: the project's own torch requirement survives only when
it admits no torch below the floor (a narrower one, ``torch>=2.12``, is the project's business); a wider one
(``torch``, ``torch>=2.9``) is replaced, keeping its upper bounds. Classic wheels keep their pin
(``torch==2.11.*``, the release they were compiled against) and say so.

**Coverage.** ``<name>-<version>.dist-info/cuda-ext-farm.json`` records what was learned, for tools (``doctor``)
and people::

    {"format": 1, "target": "my_ext-stable-cu130-cp310abi3-linux_x86_64", "cuda": "13.0", "abi": "stable",
     "sass": ["7.5", ...], "ptx": [], "torch_requirement": "torch>=2.10", "torch_floor": "2.10",
     "torch_floor_source": "binary", "torch_floor_symbols": ["torch_library_impl", ...]}

The audit checks both against the binary (``torch-range``, ``coverage-file``): a hand-edited wider range, or a file
that disagrees with the code it describes, fails.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ci import settings
from ci.audit import gpu_code
from ci.audit.checks import Check

if TYPE_CHECKING:
    from ci.universe.targets import Target

#: The file in ``<dist-info>/`` (format 1).
FILE = "cuda-ext-farm.json"
FORMAT = 1

#: Releases before the farm's table that a range is probed with besides TORCH_RELEASES (the last 1.x, 2.0-2.7).
_OLDER_RELEASES = ("1.13.1", "2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1")


@dataclasses.dataclass(frozen=True)
class TorchFloor:
    """The oldest torch the libraries load in (``2.10``), the shims that decide it and where they are."""

    version: str | None
    symbols: tuple[str, ...] = ()
    library: str = ""
    #: Shims torch-abi-audit's table does not know (newer than it): the floor is only a lower bound then.
    unknown: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.version is None:
            return "uses no stable-ABI shim"
        shown = ", ".join(self.symbols[:5]) + (f", +{len(self.symbols) - 5} more" if len(self.symbols) > 5 else "")
        return f"torch {self.version} ({shown or 'the 2.9 baseline shims'} in {self.library})"


def short_version(text: str) -> str:
    """``2.10.0`` -> ``2.10``; ``2.10.1`` stays."""
    v = Version(text)
    return f"{v.major}.{v.minor}" if v.micro == 0 else f"{v.major}.{v.minor}.{v.micro}"


def imported_names(path: Path) -> tuple[str, ...]:
    """The names a library imports: undefined dynamic symbols (ELF) or the import table (PE)."""
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic.startswith(b"MZ"):
        import pefile

        pe = pefile.PE(str(path), fast_load=True)
        pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
                                               pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"]])
        names = [imp.name.decode() for entry in (*getattr(pe, "DIRECTORY_ENTRY_IMPORT", ()),
                                                 *getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", ()))
                 for imp in entry.imports if imp.name]
        pe.close()
        return tuple(names)
    from ci.audit import symbols

    return tuple(name for name, _ in symbols.read_elf(path).undefined)


def binary_floor(libraries: Iterable[tuple[str, Path]]) -> TorchFloor:
    """The floor of a wheel: the newest of its libraries' floors (``(name in the wheel, file)`` pairs)."""
    from torch_abi_audit.torch_abi import classify_symbols

    best: TorchFloor = TorchFloor(None)
    unknown: list[str] = []
    for name, path in libraries:
        verdict = classify_symbols(imported_names(path))
        unknown += list(verdict.unknown_shim_symbols)
        if verdict.min_torch_version is None:
            continue
        floor = short_version(verdict.min_torch_version)
        if best.version is None or Version(floor) > Version(best.version):
            best = TorchFloor(floor, tuple(verdict.version_defining_symbols), name)
    return dataclasses.replace(best, unknown=tuple(sorted(set(unknown))))


def torch_specifier(requires: Sequence[str]) -> SpecifierSet | None:
    """The specifier of the unconditional ``torch`` requirement among ``Requires-Dist`` values (None: none)."""
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and req.marker is None:
            return req.specifier
    return None


def below_floor(spec: SpecifierSet, floor: str) -> str | None:
    """A torch release below ``floor`` that ``spec`` admits (None: it admits none): every patch 0-9 of 1.13 and
    2.0 up to the floor's minor is probed; a known release is named before a probe."""
    from ci.universe import matrix

    low = Version(floor)
    probes = [Version(f"1.13.{p}") for p in range(10)]
    probes += [Version(f"{low.major}.{m}.{p}") for m in range(low.minor + 1) for p in range(10)]
    admitted = [v for v in probes if v < low and spec.contains(v, prereleases=True)]
    if not admitted:
        return None
    known = {Version(v) for v in (*_OLDER_RELEASES, *(r.version for r in matrix.TORCH_RELEASES))}
    return str(max([v for v in admitted if v in known] or admitted))


def stable_requirement(declared: SpecifierSet | None, floor: str) -> tuple[str, str]:
    """The torch requirement a stable wheel gets, and why."""
    if declared is not None and str(declared) and below_floor(declared, floor) is None:
        return f"torch{declared}", f"the project's own torch{declared} is within the binary's floor {floor}: kept"
    upper = [s for s in (declared or SpecifierSet()) if s.operator in ("<", "<=", "!=")
             and Version(s.version.rstrip(".*")) >= Version(floor)]
    spec = ",".join(sorted([f">={floor}", *(str(s) for s in upper)]))
    was = f"torch{declared}" if declared is not None and str(declared) else "an unbounded torch"
    return f"torch{spec}", f"the project said {was}; the binary needs torch {floor}"


def coverage_document(target_id: str, cuda: str | None, sass: Sequence[str], ptx: Sequence[str],
                      requirement: str | None, floor: TorchFloor | None, pinned: str | None) -> bytes:
    """The bytes of ``cuda-ext-farm.json`` (sorted keys, one trailing newline: reproducible)."""
    doc: dict[str, object] = {
        "format": FORMAT, "target": target_id, "cuda": cuda, "abi": "classic" if pinned else "stable",
        "sass": [sm_to_arch(a) for a in sass], "ptx": [sm_to_arch(a) for a in ptx],
        "torch_requirement": requirement,
    }
    if pinned:
        doc |= {"torch_floor": pinned, "torch_floor_source": "pin"}
    elif floor is not None:
        doc |= {"torch_floor": floor.version, "torch_floor_source": "binary",
                "torch_floor_symbols": list(floor.symbols)}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def sm_to_arch(sm: str) -> str:
    """``sm_90`` -> ``9.0``, ``sm_100a`` -> ``10.0a``, ``sm_120`` -> ``12.0``."""
    m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", sm)
    return f"{m.group(1)}.{m.group(2)}{m.group(3)}" if m else sm


def check_torch_range(requires: Sequence[str], floor: TorchFloor, pinned: str | None) -> Check:
    """``torch-range``: the wheel's torch requirement admits no torch below what its binary needs."""
    spec = torch_specifier(requires)
    if pinned is not None:
        ok = spec is not None and str(spec).replace(" ", "") == pinned.removeprefix("torch")
        return Check("torch-range", ok, f"Requires-Dist torch{spec or ' (none)'}: classic wheel, pinned to the "
                     f"torch it was built against ({pinned})" + ("" if ok else "; expected that pin"))
    if floor.unknown:
        return Check("torch-range", False, f"the binary uses shims torch-abi-audit does not know "
                     f"({', '.join(floor.unknown[:3])}): its floor is unknown; upgrade the farm (its torch-abi-audit "
                     "knows newer shims)")
    if floor.version is None:
        return Check("torch-range", True, f"Requires-Dist torch{spec or ' (none)'}; the binary uses no stable-ABI "
                     "shim (no floor from it)")
    if spec is None:
        return Check("torch-range", False, f"the wheel declares no torch requirement; its binary needs "
                     f"{floor.describe()}: it should say torch>={floor.version}")
    below = below_floor(spec, floor.version)
    if below is not None:
        return Check("torch-range", False, f"Requires-Dist torch{spec} admits torch {below}, below what the binary "
                     f"needs: {floor.describe()}; the farm writes torch>={floor.version} (do not widen it by hand)")
    return Check("torch-range", True, f"Requires-Dist torch{spec}; the binary needs {floor.describe()} "
                 "(torch-abi-audit's shim table)")


def check_coverage_file(document: bytes | None, sass: Sequence[str] | None, ptx: Sequence[str],
                        requires: Sequence[str]) -> Check:
    """``coverage-file``: the dist-info's ``cuda-ext-farm.json`` says what the binary holds and what METADATA
    requires (absent: a wheel the farm's publish step did not write, reported, not failed; ``sass`` None: the
    architectures were not read, an audit without cuobjdump, and only the requirement is compared)."""
    if document is None:
        return Check("coverage-file", True, f"no {FILE} in the dist-info (not written by the farm's publish step)")
    try:
        doc = json.loads(document)
    except ValueError:
        return Check("coverage-file", False, f"{FILE} is not JSON")
    spec = torch_specifier(requires)
    pairs: list[tuple[str, object, object]] = [("torch_requirement", doc.get("torch_requirement"),
                                                f"torch{spec}" if spec is not None else None)]
    if sass is not None:
        pairs = [("sass", doc.get("sass"), [sm_to_arch(a) for a in sass]),
                 ("ptx", doc.get("ptx"), [sm_to_arch(a) for a in ptx]), *pairs]
    wrong = [key for key, have, want in pairs if have != want]
    shown = (f"SASS {' '.join(map(str, doc.get('sass') or [])) or '-'}, "
             f"PTX {' '.join(map(str, doc.get('ptx') or [])) or '-'}"
             + ("" if sass is not None else " (not compared: no cuobjdump)"))
    return Check("coverage-file", not wrong,
                 f"{FILE}: {shown}, "
                 f"{doc.get('torch_requirement')}" + (f"; disagrees with the wheel on {', '.join(wrong)}"
                                                       if wrong else ""))


def check_torch_archs(sass: Sequence[str], torch_sass: Sequence[str], torch_version: str, arch: str) -> Check:
    """``sass-torch`` (a warning): SASS no torch of the target's build can run beside (a GPU torch has no kernels
    for never loads this code)."""
    from ci.universe.archs import runs_on

    if not torch_sass:
        return Check("sass-torch", True, f"torch {torch_version} has no recorded {arch} architecture list")
    idle = [a for a in sass if not runs_on(sm_to_arch(a), tuple(torch_sass))]
    return Check("sass-torch", True,
                 (f"SASS {', '.join(idle)}: torch {torch_version} ({arch}) runs on no such GPU "
                  f"(its SASS: {' '.join(torch_sass)}); these bytes serve nobody" if idle
                  else f"every SASS runs beside torch {torch_version} ({arch}: {' '.join(torch_sass)})"),
                 warn=bool(idle))


def read_document(root: Path) -> bytes | None:
    """``cuda-ext-farm.json`` of an unpacked wheel (None: absent)."""
    found = sorted(root.glob(f"*.dist-info/{FILE}"))
    return found[0].read_bytes() if found else None


def audit_checks(wheel: Path, root: Path, libraries: Sequence[Path], target: Target | None,
                 sass: Sequence[str], ptx: Sequence[str], *, cuda: bool, archs_read: bool) -> list[Check]:
    """The audit's checks of what the wheel says about itself (Linux and Windows audits alike); ``archs_read``:
    ``sass``/``ptx`` are what cuobjdump found (False: an audit without cuobjdump)."""
    from ci import wheelmeta

    requires = wheelmeta.read_metadata(wheel).get("Requires-Dist", [])
    checks = []
    if target is not None:
        pinned = target.torch_pin
        floor = TorchFloor(None) if pinned else binary_floor((str(p.relative_to(root)), p) for p in libraries)
        checks.append(check_torch_range(requires, floor, pinned))
        if cuda:
            from ci.universe import matrix

            torch_sass = matrix.get_torch(target.torch).archs_for(target.arch)
            checks.append(check_torch_archs(sass, torch_sass, target.torch, target.arch))
    checks.append(check_coverage_file(read_document(root), sass if archs_read else None, ptx, requires))
    return checks


@dataclasses.dataclass(frozen=True)
class Description:
    """What the publish step writes into a wheel: its torch requirement (None: leave METADATA's) and the file."""

    requirement: str | None
    document: bytes
    note: str


def describe_wheel(wheel: Path, target: Target, cuobjdump: Path | None) -> Description:
    """Read a repaired wheel's binaries and decide its torch requirement and coverage file (the publish step)."""
    import fnmatch
    import tempfile

    from ci import wheelmeta

    requires = wheelmeta.read_metadata(wheel).get("Requires-Dist", [])
    with tempfile.TemporaryDirectory(prefix="farm-describe-") as tmp:
        root = Path(tmp)
        with wheelmeta.open_wheel(wheel) as zf:
            zf.extractall(root)
        libraries = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".py")
                           and (".so" in p.name or p.suffix.lower() in (".pyd", ".dll")))
        sass: tuple[str, ...] = ()
        ptx: tuple[str, ...] = ()
        if not target.cpu and cuobjdump is not None:
            def matches(path: Path, patterns: Sequence[str]) -> bool:
                rel = str(path.relative_to(root)).replace("\\", "/")
                return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(path.name, p) for p in patterns)

            cuda_libs = [p for p in libraries if matches(p, target.project.cuda_libraries)
                         and not matches(p, target.project.cpu_libraries)
                         and not any(part.endswith(".libs") for part in p.relative_to(root).parts)]
            sass, ptx = gpu_code.list_archs(cuobjdump, cuda_libs)
        cuda = None if target.cpu else target.cell.cuda
        if target.torch_pin:
            doc = coverage_document(target.id, cuda, sass, ptx, target.torch_pin, None,
                                    matrix_minor(target.torch))
            return Description(target.torch_pin, doc, f"{target.torch_pin} (classic: the torch it was built against)")
        floor = binary_floor((str(p.relative_to(root)), p) for p in libraries)
    declared = torch_specifier(requires)
    if floor.version is None or floor.unknown:
        # The audit's torch-range check says why; the wheel keeps the project's requirement until then.
        requirement = f"torch{declared}" if declared is not None else None
        return Description(None, coverage_document(target.id, cuda, sass, ptx, requirement, floor, None),
                           f"no torch floor from the binary ({floor.describe()})")
    requirement, why = stable_requirement(declared, floor.version)
    return Description(requirement, coverage_document(target.id, cuda, sass, ptx, requirement, floor, None),
                       f"{requirement}: {why} ({', '.join(floor.symbols[:3]) or 'baseline shims'})")


def matrix_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def floor_releases(wheel: Path) -> tuple[str, str]:
    """(the torch release at a stable wheel's floor, the release below it), from its ``cuda-ext-farm.json``."""
    import zipfile

    from ci.errors import UsageError
    from ci.universe import matrix

    with zipfile.ZipFile(wheel) as zf:
        found = [n for n in zf.namelist() if n.endswith(f".dist-info/{FILE}")]
        doc = json.loads(zf.read(found[0])) if found else {}
    floor = doc.get("torch_floor")
    if doc.get("torch_floor_source") != "binary" or not floor:
        raise UsageError("the wheel records no torch floor from its binary", wheel.name,
                         "build it with the farm (a stable-ABI project): the publish step writes it")
    releases = [r.version for r in matrix.TORCH_RELEASES]
    at = matrix.get_torch(str(floor)).version
    index = releases.index(at) if at in releases else 0
    if index == 0:
        raise UsageError("no torch release below the floor is known", at,
                f"a newer farm knows more torch releases ({settings.entry('adopt-torch', '--check')} in the farm's "
                "checkout says what PyPI has that this one lacks)")
    return at, releases[index - 1]
