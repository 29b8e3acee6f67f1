"""What a PE file (``.pyd``/``.dll``) imports, exports and holds, read with ``pefile``.

Both import tables count: the regular one (resolved when the module loads)
and the delay-load one (``/DELAYLOAD``: resolved at the first call, so a missing
DLL there fails later, in the middle of a run). Import names are MSVC-mangled
C++ names (``?current_device@cuda@c10@@YACXZ``); :func:`readable` turns their
scope into ``c10::cuda::current_device`` for messages, and :data:`C10_CUDA` /
:data:`AT_CUDA` recognise the namespaces that live in ``c10_cuda.dll`` and
``torch_cuda.dll``. nvcc puts the fatbinary in a section named ``.nv_fatb``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ci.errors import UsageError

#: Sections where nvcc-compiled code keeps its fatbinary (PE section names hold 8 characters).
FATBIN_SECTIONS = (".nv_fatb", ".nvFatBi")
#: Symbols in namespace c10::cuda (``...@cuda@c10@@``) and at::cuda, MSVC mangling.
C10_CUDA = re.compile(r"^\?.*@cuda@c10@@")
AT_CUDA = re.compile(r"^\?.*@cuda@at@@")
AMD64 = 0x8664


class NotPe(UsageError):
    pass


@dataclasses.dataclass(frozen=True)
class PeInfo:
    path: str
    machine: int
    #: DLL -> imported names (ordinals as ``#N``), in file order; names of DLLs as written.
    imports: Mapping[str, tuple[str, ...]]
    delay_imports: Mapping[str, tuple[str, ...]]
    sections: tuple[str, ...]
    exports: tuple[str, ...]

    @property
    def dlls(self) -> tuple[str, ...]:
        return tuple(self.imports)

    @property
    def delay_dlls(self) -> tuple[str, ...]:
        return tuple(self.delay_imports)

    @property
    def all_dlls(self) -> tuple[str, ...]:
        return (*self.imports, *(d for d in self.delay_imports if d not in self.imports))

    @property
    def has_cuda_code(self) -> bool:
        return any(s in FATBIN_SECTIONS for s in self.sections)

    def imported_from(self, dll: str) -> tuple[str, ...]:
        wanted = dll.lower()
        names: list[str] = []
        for table in (self.imports, self.delay_imports):
            for name, symbols in table.items():
                if name.lower() == wanted:
                    names.extend(symbols)
        return tuple(names)

    def importing(self, pattern: re.Pattern[str]) -> dict[str, tuple[str, ...]]:
        """DLL -> imported names matching ``pattern`` (regular and delay-load imports)."""
        found: dict[str, list[str]] = {}
        for table in (self.imports, self.delay_imports):
            for dll, symbols in table.items():
                hits = [s for s in symbols if pattern.search(s)]
                if hits:
                    found.setdefault(dll, []).extend(hits)
        return {dll: tuple(names) for dll, names in found.items()}


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("ascii", errors="replace") if isinstance(value, bytes) else value


def _load(path: Path) -> Any:
    import pefile

    try:
        # From bytes, not a memory map: extension modules are small, and closing a map costs a gc.collect().
        return pefile.PE(data=path.read_bytes(), fast_load=True)
    except pefile.PEFormatError as exc:
        raise NotPe("not a Windows PE file", path, f"{exc.value}; is it really a .pyd/.dll?") from None
    except OSError as exc:
        raise NotPe("cannot read the file", path, exc.strerror or str(exc)) from None


def read(path: Path, *, exports: bool = True) -> PeInfo:
    """Import tables, sections and (optionally) the export table of ``path``."""
    import pefile

    pe = _load(path)
    try:
        directories = [pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
                       pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"]]
        if exports:
            directories.append(pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"])
        pe.parse_data_directories(directories=directories)
        tables: list[dict[str, tuple[str, ...]]] = []
        for attr in ("DIRECTORY_ENTRY_IMPORT", "DIRECTORY_ENTRY_DELAY_IMPORT"):
            table: dict[str, list[str]] = {}
            for entry in getattr(pe, attr, []):
                names = table.setdefault(_text(entry.dll), [])
                names.extend(_text(i.name) if i.name else f"#{i.ordinal}" for i in entry.imports)
            tables.append({dll: tuple(names) for dll, names in table.items()})
        exported: tuple[str, ...] = ()
        if exports and hasattr(pe, "DIRECTORY_ENTRY_EXPORT"):
            exported = tuple(_text(s.name) for s in pe.DIRECTORY_ENTRY_EXPORT.symbols if s.name)
    except pefile.PEFormatError as exc:
        raise NotPe("a damaged PE file", path, f"{exc.value}; rebuild it") from None
    sections = tuple(_text(s.Name).rstrip("\x00") for s in pe.sections)
    return PeInfo(str(path), int(pe.FILE_HEADER.Machine), tables[0], tables[1], sections, exported)


def fatbin_sections(path: Path) -> tuple[bytes, ...]:
    """The bytes of each fatbinary section of ``path`` (``.nv_fatb``; none: no CUDA code), for
    cuobjdump, which reads them as fatbin files (ci/release/variants/binary.py; it opens no PE file)."""
    pe = _load(path)
    # The raw data is padded to the file alignment, and the virtual size may say less: keep what both hold.
    return tuple(bytes(s.get_data()[:s.Misc_VirtualSize or None]) for s in pe.sections
                 if _text(s.Name).rstrip("\x00") in FATBIN_SECTIONS)


def read_exports(path: Path) -> frozenset[str]:
    """The names ``path`` exports (for resolving an extension's imports against the user's torch)."""
    import pefile

    try:
        pe = pefile.PE(str(path), fast_load=True)
    except (pefile.PEFormatError, OSError):
        return frozenset()
    try:
        pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"]])
        if not hasattr(pe, "DIRECTORY_ENTRY_EXPORT"):
            return frozenset()
        return frozenset(_text(s.name) for s in pe.DIRECTORY_ENTRY_EXPORT.symbols if s.name)
    finally:
        pe.close()


def readable(name: str) -> str:
    """The qualified name of an MSVC-mangled symbol.

    ``?current_device@cuda@c10@@YACXZ`` -> ``c10::cuda::current_device``.

    Only the scope is decoded (enough to name the function in a message); anything else is returned as it is.
    """
    if not name.startswith("?") or "@@" not in name:
        return name
    body = name[1:name.index("@@")]
    if body.startswith("?"):  # operators and special members (??0 constructor, ...): keep them as they are
        return name
    parts = [p for p in body.split("@") if p]
    if not parts or any(p.startswith(("?$", "?")) for p in parts):
        return name
    return "::".join(reversed(parts))
