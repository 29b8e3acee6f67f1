"""What a library carries besides its code: debug sections (``debug-info``) and how its CUDA fatbinary is stored
(``fatbin``), read from the ELF file with pyelftools.

* ``debug-info`` fails a wheel whose libraries hold ``.debug_*`` sections, naming each library and the bytes:
  setuptools compiles with the interpreter's ``CFLAGS`` (``-g``), so DWARF ships unless the project says ``-g0``
  (a one-function extension: 10.7 MB of DWARF around 92 KB of code). The farm's builds split it off
  (ci/builds/debug_split.py: ``debug/<build-id>.debug`` beside the wheel); a project that wants its wheels to
  carry it says ``strip-debug = false`` and the check only reports.
* ``fatbin`` reports, per library with CUDA code, how many of its fatbinary's entries are compressed (the entry
  header's flags: 0x2000 LZ4, nvcc's ``-Xfatbin -compress-all``; 0x8000 Zstandard, ``--compress-mode``). A
  report, never a failure: an uncompressed fatbin loads as well, it only ships larger.

Fatbin layout (reverse-engineered, as cuobjdump reads it): containers of a 16-byte header (magic 0xBA55ED50,
u16 version, u16 header size, u64 size of what follows), then entries: u16 kind, u16, u32 header size,
u64 padded payload size, ..., u64 flags at offset 40; the next entry follows the payload.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ci.audit.checks import Check
from ci.audit.gpu_code import major_of

if TYPE_CHECKING:
    from ci.universe.targets import Target

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTION = ".nv_fatbin"
COMPRESSED_LZ4 = 0x2000
COMPRESSED_ZSTD = 0x8000


def is_elf(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"\x7fELF"


def debug_sections(path: Path) -> dict[str, int]:
    """The library's debug sections and their sizes in the file (``.debug_info``: 10 MB)."""
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as fh:
        elf = ELFFile(fh)
        return {s.name: s["sh_size"] for s in elf.iter_sections()
                if s.name.startswith((".debug_", ".zdebug_")) and s["sh_type"] != "SHT_NOBITS"}


def build_id(path: Path) -> str | None:
    """The GNU build-id (hex) of the ELF file, what debuggers and debuginfod find its debug file by."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import NoteSection

    with path.open("rb") as fh:
        elf = ELFFile(fh)
        for section in elf.iter_sections():
            if not isinstance(section, NoteSection):
                continue
            for note in section.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return str(note["n_desc"])
    return None


@dataclasses.dataclass(frozen=True)
class Fatbin:
    """A library's fatbinary: entries, and of them compressed with LZ4 or Zstandard."""

    entries: int = 0
    lz4: int = 0
    zstd: int = 0
    size: int = 0

    @property
    def compressed(self) -> int:
        return self.lz4 + self.zstd

    def describe(self) -> str:
        if not self.entries:
            return "no fatbin entries"
        kinds = ", ".join(f"{n} {k}" for k, n in (("Zstandard", self.zstd), ("LZ4", self.lz4)) if n)
        if self.compressed == self.entries:
            return f"compressed ({kinds}; {self.entries} entries, {self.size} bytes)"
        if not self.compressed:
            return f"not compressed ({self.entries} entries, {self.size} bytes)"
        return f"partly compressed ({kinds} of {self.entries} entries, {self.size} bytes)"


def fatbin_containers(data: bytes) -> list[bytes]:
    """The containers of a fatbin section, without the padding before, between or after them (a PE file's
    ``.nv_fatb`` goes to cuobjdump as a fatbin file: ci/release/variants/binary.py)."""
    found = []
    offset = 0
    while offset + 16 <= len(data):
        magic, _version, header, body = struct.unpack_from("<IHHQ", data, offset)
        if magic != FATBIN_MAGIC:
            # Containers are aligned in the section; skip padding to the next 8-byte boundary.
            offset += 8
            continue
        end = min(offset + header + body, len(data))
        found.append(data[offset:end])
        offset = max(end, offset + 16)
    return found


def parse_fatbin(data: bytes) -> Fatbin:
    """Count the entries of every container in a ``.nv_fatbin`` section and the compressed ones."""
    entries = lz4 = zstd = 0
    for container in fatbin_containers(data):
        (entry,) = struct.unpack_from("<H", container, 6)
        while entry + 48 <= len(container):
            _kind, _v, size, padded = struct.unpack_from("<HHIQ", container, entry)
            (flags,) = struct.unpack_from("<Q", container, entry + 40)
            if size == 0:
                break
            entries += 1
            lz4 += bool(flags & COMPRESSED_LZ4)
            zstd += bool(flags & COMPRESSED_ZSTD) and not flags & COMPRESSED_LZ4
            entry += size + padded
    return Fatbin(entries, lz4, zstd, len(data))


def fatbin_of(path: Path) -> Fatbin | None:
    """The library's ``.nv_fatbin`` (None: it has none)."""
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(FATBIN_SECTION)
        return parse_fatbin(section.data()) if section is not None else None


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} KB"


def check_debug_info(files: Sequence[Path], root: Path, target: Target | None) -> Check:
    """``debug-info``: no library of the wheel carries debug sections (a project with ``strip-debug = false`` keeps
    them: reported as a warning)."""
    strip = target is None or target.project.strip_debug
    found = []
    for path in files:
        if not is_elf(path):
            continue
        sections = debug_sections(path)
        if sections:
            total = sum(sections.values())
            found.append(f"{path.relative_to(root)}: {_mb(total)} in {len(sections)} sections "
                         f"({total} of {path.stat().st_size} bytes)")
    if not found:
        return Check("debug-info", True, f"{len(files)} libraries carry no debug sections")
    if not strip:
        return Check("debug-info", True, "debug sections kept (strip-debug = false): " + "; ".join(found), warn=True)
    return Check("debug-info", False, "debug sections ship in the wheel: " + "; ".join(found) + "; the farm's "
                 "builds split them off into debug/<build-id>.debug beside the wheel (was strip-debug set to false, "
                 "or was the wheel built elsewhere?)")


def check_fatbin(files: Sequence[Path], root: Path, cuda_major: int | None = None) -> Check:
    """``fatbin``: whether each library's fatbinary is compressed (a report; a warning when some is not, or when a
    CUDA 12 library's is Zstandard). ``cuda_major``: the build's (a ``_cuda<MAJOR>/`` library of a wheel across
    majors is that major's)."""
    reports = []
    uncompressed = False
    zstd_12 = []
    for path in files:
        if not is_elf(path):
            continue
        fatbin = fatbin_of(path)
        if fatbin is None:
            continue
        member = str(path.relative_to(root))
        reports.append(f"{member}: {fatbin.describe()}")
        uncompressed |= fatbin.compressed < fatbin.entries
        if fatbin.zstd and (major_of(member) or cuda_major) == 12:
            zstd_12.append(member)
    if not reports:
        return Check("fatbin", True, "no library holds a fatbin")
    hint = ("; nvcc compresses with --compress-mode=size (CUDA 12.8+) or -Xfatbin -compress-all"
            if uncompressed else "")
    if zstd_12:
        # A CUDA 12 wheel otherwise runs on drivers back to r525 (minor-version compatibility; the doctor's floor):
        # these libraries load their kernels only from r550 on (ci/linux/host.py, FATBIN_COMPRESSION).
        hint += (f"; {', '.join(zstd_12)}: Zstandard fatbins of CUDA 12 need a CUDA 12.4 driver (r550) or newer, "
                 "where the rest of a CUDA 12 wheel runs from r525: compile CUDA 12 with -Xfatbin -compress-all (LZ4) "
                 "unless r550 is the floor you mean")
    return Check("fatbin", True, "; ".join(reports) + hint, warn=uncompressed or bool(zstd_12))
