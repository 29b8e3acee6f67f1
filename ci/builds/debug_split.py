"""Small by construction: the build's libraries lose their debug sections, which are kept beside the wheel.

setuptools compiles with the interpreter's ``CFLAGS`` (``-g``), so a project that does not pass ``-g0`` ships its
DWARF (a one-function extension: 10.7 MB around 92 KB of code). Before repair, every ELF library of the wheel
that has ``.debug_*`` sections is split with binutils' objcopy, the way distributions do it:

* ``objcopy --only-keep-debug lib <build-id>.debug``: the DWARF (and the symbol table) in a file of its own,
  named by the library's GNU build-id: ``gdb``, ``eu-unstrip`` and debuginfod find it by that id (put it at
  ``/usr/lib/debug/.build-id/<first 2>/<rest>.debug``, or point ``debug-file-directory`` at the folder);
* ``objcopy --strip-debug --add-gnu-debuglink=<build-id>.debug lib``: the library without its debug sections
  (its code, dynamic and regular symbol tables stay: backtraces keep their function names), naming its debug
  file and that file's CRC.

objcopy writes no time or path into either file, so the same library gives the same bytes: the wheel stays
reproducible. The debug files go to ``<wheelhouse>/<target>/debug/`` with the wheel (ci/builds/tail.py), never
into it, never to PyPI. ``strip-debug = false`` in ``[tool.cuda-ext-farm]`` keeps the wheel as built.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import platform
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ci import proc
from ci.audit import debug_info
from ci.errors import MissingRequirement

DEBUG_FOLDER = "debug"


@dataclasses.dataclass(frozen=True)
class Split:
    """One library of the wheel, split: its bytes before and after, and its debug file."""

    member: str
    build_id: str
    before: int
    after: int
    debug_file: str
    debug_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SplitResult:
    wheel: Path
    splits: tuple[Split, ...]
    wheel_before: int
    wheel_after: int

    def report(self) -> dict[str, Any]:
        """What the build report records: each library's bytes before and after, and the wheel's."""
        return {"wheel_before": self.wheel_before, "wheel_after": self.wheel_after,
                "libraries": [s.as_dict() for s in self.splits]}

    def summary(self) -> str:
        if not self.splits:
            return "no library carried debug sections"
        before = sum(s.before for s in self.splits)
        after = sum(s.after for s in self.splits)
        return (f"{len(self.splits)} libraries {before} -> {after} bytes (wheel {self.wheel_before} -> "
                f"{self.wheel_after} bytes); debug files in {DEBUG_FOLDER}/: "
                + ", ".join(s.debug_file for s in self.splits))


def objcopy_for(arch: str) -> str:
    """binutils' objcopy for ``arch``'s ELF files: this machine's for its own architecture, else the cross one
    (the cross compiler's binutils); LLVM's, which reads every architecture, where neither is installed."""
    candidates = ["objcopy" if arch == platform.machine() else f"{arch}-linux-gnu-objcopy", "llvm-objcopy"]
    for name in candidates:
        found = proc.which(name) or shutil.which(name)
        if found:
            return str(found)
    raise MissingRequirement(f"splitting debug info off needs {candidates[0]} (binutils)", arch,
                             f"install binutils{'' if arch == platform.machine() else f'-{arch}-linux-gnu'}, or "
                             "set strip-debug = false in [tool.cuda-ext-farm] to ship the debug sections")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def split_library(objcopy: str, library: Path, debug_dir: Path) -> tuple[str, Path]:
    """Split ``library`` in place; returns its build-id and its debug file (``debug_dir/<build-id>.debug``).
    A library without a build-id (linked with ``--build-id=none``) is named by its SHA-256 instead."""
    ident = debug_info.build_id(library) or hashlib.sha256(library.read_bytes()).hexdigest()[:40]
    debug_dir.mkdir(parents=True, exist_ok=True)
    debug = debug_dir / f"{ident}.debug"
    proc.run([objcopy, "--only-keep-debug", library, debug], what=f"objcopy could not copy {library.name}'s debug "
             "info", log=False)
    # The debug link is the file name and a CRC: objcopy reads it from the folder it is run in.
    proc.run([objcopy, "--strip-debug", f"--add-gnu-debuglink={debug.name}", library.resolve()], cwd=debug_dir,
             what=f"objcopy could not strip {library.name}", log=False)
    return ident, debug


def _replace_members(wheel: Path, dest: Path, replaced: Mapping[str, bytes]) -> Path:
    """``wheel`` again at ``dest`` with members replaced and its RECORD updated (order and entry times kept; the
    build tail rewrites the archive deterministically afterwards)."""
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        record_name = next((i.filename for i in infos if i.filename.endswith(".dist-info/RECORD")), None)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for info in infos:
                data = replaced.get(info.filename)
                if data is None:
                    data = zf.read(info)
                if info.filename == record_name:
                    rows = []
                    for row in csv.reader(io.StringIO(data.decode("utf-8"))):
                        if row and row[0] in replaced:
                            row = [row[0], _record_hash(replaced[row[0]]), str(len(replaced[row[0]]))]
                        rows.append(row)
                    text = io.StringIO()
                    csv.writer(text, lineterminator="\n").writerows(rows)
                    data = text.getvalue().encode("utf-8")
                out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return dest


def split_wheel(wheel: Path, outdir: Path, debug_dir: Path, arch: str) -> SplitResult:
    """The wheel with every ELF library's debug sections split off into ``debug_dir`` (``<build-id>.debug``);
    the wheel itself when none has any."""
    before = wheel.stat().st_size
    splits: list[Split] = []
    replaced: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="farm-debug-split-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            members = [i.filename for i in zf.infolist() if not i.is_dir()]
            for index, member in enumerate(sorted(members)):
                data = zf.read(member)
                if not data.startswith(b"\x7fELF"):
                    continue
                library = Path(tmp) / str(index) / Path(member).name
                library.parent.mkdir()
                library.write_bytes(data)
                if not debug_info.debug_sections(library):
                    continue
                ident, debug = split_library(objcopy_for(arch), library, debug_dir)
                stripped = library.read_bytes()
                replaced[member] = stripped
                splits.append(Split(member, ident, len(data), len(stripped), debug.name, debug.stat().st_size))
    if not splits:
        return SplitResult(wheel, (), before, before)
    result = _replace_members(wheel, outdir / wheel.name, replaced)
    return SplitResult(result, tuple(splits), before, result.stat().st_size)
