"""The glibc floor of a release: no ELF object of a wheel may need symbol versions above it.

A wheel built on a base with a newer glibc or libstdc++ than the release promises
imports nowhere older: ``arc4random@GLIBC_2.36`` fails to load on RHEL 8's glibc
2.28, ``std::to_chars(double)@GLIBCXX_3.4.29`` on its libstdc++. This module reads
the versioned symbol requirements of every ELF object in a wheel
(``.gnu.version_r``: per needed library, the version names; ``.gnu.version`` /
``.dynsym``: which undefined symbol binds to which) and judges them against a
manylinux policy (``manylinux_2_28``; the same name serves x86_64 and aarch64).
The allowed versions per namespace (``GLIBC``, ``GLIBCXX``, ``CXXABI``, ``GCC``,
...) are auditwheel's own policy data (``auditwheel.policy.WheelPolicies``), so the
check and ``auditwheel repair`` never disagree on what a policy allows.

**The context's floor.** ``FARM_GLIBC_FLOOR`` (a policy name: ``manylinux_2_28``)
tells the audit the floor of the context it runs in; the release workflow and the
release dry run are to set it to :data:`RELEASE_FLOOR` (issue 20). The argument
``audit.audit_wheel(..., glibc_floor=...)`` overrides it.
With neither, the ``glibc-floor`` check is skipped: a local build on a Debian base
is judged by the tag auditwheel gave it from the symbols it uses (the base's floor
or lower). A value that is not a manylinux policy auditwheel knows stops the audit
with one line (:class:`ci.errors.UsageError`). docs/glibc-floor.md says which floor
each route gives.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import SymbolTableSection

from ci import settings, wheelmeta
from ci.audit.checks import Check
from ci.errors import UsageError
from ci.universe.matrix import RELEASE_FLOOR

ENV = "FARM_GLIBC_FLOOR"
CHECK = "glibc-floor"
#: ELF ``e_machine`` -> the architecture name of manylinux policies and platform tags.
MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
#: The namespaces the check names in its one line, in this order (others in the policy are judged too).
SHOWN = ("GLIBC", "GLIBCXX", "CXXABI")

_POLICY = re.compile(r"manylinux_(\d+)_(\d+)")
_TAG = re.compile(r"(manylinux_\d+_\d+|manylinux1|manylinux2010|manylinux2014)_(\w+)")


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One symbol version an object needs: ``arc4random@GLIBC_2.36`` (from ``libc.so.6``) in ``path``."""

    path: str
    library: str
    version: str
    symbols: tuple[str, ...]

    @property
    def namespace(self) -> str:
        """``GLIBC_2.36`` -> ``GLIBC`` (split as auditwheel splits it)."""
        return self.version.partition("_")[0]

    @property
    def number(self) -> str:
        return self.version.partition("_")[2]


@dataclasses.dataclass(frozen=True)
class ElfVersions:
    path: str
    arch: str | None
    requirements: tuple[Requirement, ...]


def version_key(version: str) -> tuple[int, ...]:
    """``GLIBC_2.36`` -> ``(2, 36)``; a version that is not numeric (``GLIBC_PRIVATE``, ``GLIBC_ABI_DT_RELR``) sorts
    below every number, so the newest numeric version is the one named."""
    number = version.partition("_")[2]
    if not re.fullmatch(r"\d+(\.\d+)*", number):
        return (-1,)
    return tuple(int(p) for p in number.split("."))


# --- policies (auditwheel's data) ---------------------------------------------------


@functools.cache
def _policies(arch: str) -> dict[str, dict[str, frozenset[str]]]:
    """``manylinux_2_28`` (and aliases: ``manylinux2014``) -> namespace -> allowed versions, for ``arch``."""
    # Imported here: auditwheel is installed on Linux only, and ci.audit.wheel_audit's helpers serve the Windows
    # audit too.
    from auditwheel.architecture import Architecture
    from auditwheel.libc import Libc
    from auditwheel.policy import WheelPolicies

    result: dict[str, dict[str, frozenset[str]]] = {}
    suffix = f"_{arch}"
    for policy in WheelPolicies(libc=Libc.GLIBC, arch=Architecture(arch)):
        name = str(policy.name)
        if name == f"linux{suffix}":
            continue
        allowed = {str(ns): frozenset(f"{ns}_{v}" for v in versions) for ns, versions in policy.symbol_versions.items()}
        for alias in (name, *policy.aliases):
            result[str(alias).removesuffix(suffix)] = allowed
    return result


def known_floors() -> list[str]:
    """The PEP 600 policy names auditwheel knows for x86_64 or aarch64, oldest first."""
    names = {n for arch in MACHINES.values() for n in _policies(arch) if _POLICY.fullmatch(n)}
    return sorted(names, key=floor_key)


_LEGACY = {"manylinux1": "manylinux_2_5", "manylinux2010": "manylinux_2_12", "manylinux2014": "manylinux_2_17"}


def parse_floor(value: str, source: str = ENV) -> str:
    """Validate a floor (``manylinux_2_28``; the legacy ``manylinux2014`` means ``manylinux_2_17``) and return its
    PEP 600 name; one-line :class:`UsageError` naming ``source`` otherwise."""
    name = value.strip()
    name = _LEGACY.get(name, name)
    known = known_floors()
    if name not in known:
        raise UsageError(
            f"{source} is not a manylinux policy auditwheel knows", value,
            f"use one of {', '.join(known)} (the release's floor is manylinux_2_28), or unset it",
        )
    return name


def context_floor(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The floor the audit judges against: ``explicit`` (``audit_wheel(glibc_floor=...)``), else ``FARM_GLIBC_FLOOR``,
    else None (the check is skipped)."""
    if explicit is not None and explicit.strip():
        return parse_floor(explicit, "the glibc floor")
    value = (settings.current().environ if env is None else env).get(ENV, "").strip()
    return parse_floor(value, ENV) if value else None


def floor_glibc(floor: str) -> str:
    """``manylinux_2_28`` -> ``2.28``."""
    return ".".join(floor.split("_")[1:3])


def floor_key(floor: str) -> tuple[int, ...]:
    """``manylinux_2_28`` -> ``(2, 28)``."""
    return tuple(int(p) for p in floor.split("_")[1:3])


def wheel_tag_floor(wheel: Path | str) -> str | None:
    """The lowest manylinux floor among a wheel's platform tags (``manylinux_2_17_x86_64.manylinux2014_x86_64`` ->
    ``manylinux_2_17``): the oldest glibc pip installs it on; None for a wheel with no manylinux tag."""
    parsed = wheelmeta.parse_name(Path(wheel))
    floors = []
    for platform in parsed.platforms:
        match = _TAG.fullmatch(platform)
        if match:
            floors.append(_LEGACY.get(match.group(1), match.group(1)))
    if not floors:
        return None
    return min(floors, key=floor_key)


# --- reading ELF objects ---------------------------------------------------------------


def read_versions(path: Path, name: str) -> ElfVersions | None:
    """The versioned symbol requirements of one file (``name``: its path in the wheel); None if it is not ELF."""
    with path.open("rb") as fh:
        if fh.read(4) != b"\x7fELF":
            return None
        fh.seek(0)
        try:
            elf = ELFFile(fh)
            arch = MACHINES.get(str(elf["e_machine"]))
            needs: dict[int, tuple[str, str]] = {}
            verneed = elf.get_section_by_name(".gnu.version_r")
            if isinstance(verneed, GNUVerNeedSection):
                for entry, auxiliaries in verneed.iter_versions():
                    library = str(entry.name)
                    for aux in auxiliaries:
                        needs[int(aux["vna_other"])] = (library, str(aux.name))
            bound: dict[int, list[str]] = {index: [] for index in needs}
            versym = elf.get_section_by_name(".gnu.version")
            dynsym = elf.get_section_by_name(".dynsym")
            if isinstance(versym, GNUVerSymSection) and isinstance(dynsym, SymbolTableSection):
                for i, sym in enumerate(dynsym.iter_symbols()):
                    if i == 0 or sym["st_shndx"] != "SHN_UNDEF" or not sym.name:
                        continue
                    ndx = versym.get_symbol(i)["ndx"]
                    if isinstance(ndx, int) and (ndx & 0x7FFF) in bound:
                        bound[ndx & 0x7FFF].append(str(sym.name))
        except ELFError:
            return None
    requirements = tuple(
        Requirement(name, library, version, tuple(sorted(bound[index])))
        for index, (library, version) in sorted(needs.items())
        # auditwheel skips the dynamic loader's own versions too (they follow glibc's).
        if not library.startswith("ld-linux") and library not in ("ld64.so.1", "ld64.so.2")
    )
    return ElfVersions(name, arch, requirements)


def read_tree(root: Path) -> list[ElfVersions]:
    """Every ELF object under ``root`` (an unpacked wheel), named by its path relative to ``root``."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        info = read_versions(path, path.relative_to(root).as_posix())
        if info is not None:
            found.append(info)
    return found


def read_wheel(wheel: Path) -> list[ElfVersions]:
    """Every ELF object of a wheel (a zip): each is unpacked to a temporary folder, since pyelftools seeks."""
    with tempfile.TemporaryDirectory(prefix="farm-glibc-") as tmp, wheelmeta.open_wheel(wheel) as zf:
        root = Path(tmp)
        for member in zf.infolist():
            if member.is_dir():
                continue
            with zf.open(member) as fh:
                if fh.read(4) != b"\x7fELF":
                    continue
            zf.extract(member, root)
        return read_tree(root)


# --- judging ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Offender:
    """The newest version of one namespace above the floor, one symbol that needs it, and the object."""

    version: str
    symbol: str
    path: str
    others: int  # further (symbol, object) pairs needing versions of this namespace above the floor

    @property
    def namespace(self) -> str:
        return self.version.partition("_")[0]


def _allowed(floor: str, arch: str | None) -> dict[str, frozenset[str]] | None:
    if arch is None:
        return None
    return _policies(arch).get(floor)


def offenders(objects: Iterable[ElfVersions], floor: str) -> list[Offender]:
    """Per namespace the policy of ``floor`` limits, the newest version above it (with a symbol and the object that
    need it); empty when every object is within the floor. Objects of an architecture the policy does not cover are
    judged by :func:`check_objects`."""
    over: dict[str, list[tuple[Requirement, str]]] = {}
    for obj in objects:
        allowed = _allowed(floor, obj.arch)
        if allowed is None:
            continue
        for req in obj.requirements:
            if req.namespace in allowed and req.version not in allowed[req.namespace]:
                for symbol in req.symbols or ("",):
                    over.setdefault(req.namespace, []).append((req, symbol))
    result = []
    for namespace in sorted(over, key=lambda ns: (SHOWN.index(ns) if ns in SHOWN else len(SHOWN), ns)):
        pairs = over[namespace]
        req, symbol = max(pairs, key=lambda p: (version_key(p[0].version), p[1]))
        result.append(Offender(req.version, symbol, req.path, len(pairs) - 1))
    return result


def newest(objects: Iterable[ElfVersions]) -> dict[str, str]:
    """Namespace -> the newest version any object needs (for the passing line)."""
    best: dict[str, str] = {}
    for obj in objects:
        for req in obj.requirements:
            current = best.get(req.namespace)
            if current is None or version_key(req.version) > version_key(current):
                best[req.namespace] = req.version
    return best


def _readable(symbol: str) -> str:
    if not symbol:
        return "no symbol bound to it"
    from ci.audit.symbols import demangle

    return demangle([symbol])[symbol] if symbol.startswith("_Z") else symbol


def check_objects(objects: Iterable[ElfVersions], floor: str, tag_floor: str | None = None) -> Check:
    """The ``glibc-floor`` check of a wheel's ELF objects against ``floor`` (``tag_floor``: the wheel's own, from
    :func:`wheel_tag_floor`: a wheel tagged above the floor is refused by pip there, whatever its symbols)."""

    objects = list(objects)
    glibc = floor_glibc(floor)
    uncovered = sorted({f"{o.path} ({o.arch or 'unknown architecture'})" for o in objects
                        if o.requirements and _allowed(floor, o.arch) is None})
    if uncovered:
        return Check(CHECK, False, f"{floor} has no policy for {', '.join(uncovered)}; build for x86_64 or aarch64 "
                                   "on the release's base")
    bad = offenders(objects, floor)
    if bad:
        first, *rest = bad
        more = f"; {first.others} more symbol uses above it" if first.others else ""
        also = "".join(f"; also {o.version} ({_readable(o.symbol)} in {o.path})" for o in rest)
        arch = next(o.arch for o in objects if o.path == first.path) or "x86_64"
        allowed = _allowed(floor, arch) or {}
        ceiling = max(allowed.get(first.namespace, ()), key=version_key, default=f"{first.namespace} nothing")
        base = [f"glibc is at most {glibc}"] if any(o.namespace == "GLIBC" for o in bad) else []
        if any(o.namespace != "GLIBC" for o in bad):
            cxx = max(allowed.get("GLIBCXX", ()), key=version_key, default="")
            base.append(f"libstdc++ provides at most {cxx}" if cxx else "runtime libraries are that old")
        where = (f"the release's {floor} base (quay.io/pypa/{floor}_{arch})" if floor == RELEASE_FLOOR
                 else f"a {floor} base")
        return Check(CHECK, False,
                     f"needs {first.version} ({_readable(first.symbol)} in {first.path}{more}) above {floor}'s "
                     f"{ceiling}{also}; build on {where}, or a base whose {' and whose '.join(base)}")
    found = newest(objects)
    shown = ", ".join(found[ns] for ns in SHOWN if ns in found) or "no versioned glibc/libstdc++ symbols"
    if tag_floor is not None and floor_key(tag_floor) > floor_key(floor):
        return Check(CHECK, False,
                     f"newest {shown}: within {floor}, but the wheel is tagged {tag_floor}, so pip refuses it below "
                     f"glibc {floor_glibc(tag_floor)}; repair it with auditwheel repair --plat {floor}_<arch>")
    return Check(CHECK, True, f"newest {shown}: within {floor}")


def check_tree(root: Path, floor: str, tag_floor: str | None = None) -> Check:
    """The ``glibc-floor`` check of an unpacked wheel (``audit.audit_wheel`` passes its folder)."""
    return check_objects(read_tree(root), floor, tag_floor)


def check_unpacked(root: Path, wheel: Path, floor: str | None) -> list[Check]:
    """What ``audit.audit_wheel`` appends: the ``glibc-floor`` check of the wheel unpacked at ``root`` when a floor is
    set (:func:`context_floor`) and the wheel is a Linux one; nothing otherwise."""
    platforms = wheelmeta.parse_name(wheel).platforms
    if floor is None or not any(p.startswith(("manylinux", "linux")) for p in platforms):
        return []
    return [check_tree(root, floor, wheel_tag_floor(wheel))]


def check_wheel(wheel: Path, floor: str) -> Check:
    """The ``glibc-floor`` check of a wheel file against ``floor`` (validated: :func:`parse_floor`)."""
    floor = parse_floor(floor, "the glibc floor")
    return check_objects(read_wheel(wheel), floor, wheel_tag_floor(wheel))
