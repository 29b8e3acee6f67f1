"""Reading and rewriting built wheels: the torch pin and local version of classic builds, and
deterministic archives.

A classic extension is bound to the torch release it was compiled against, but
its ``setup.py`` usually says ``install_requires=["torch"]``. The farm fixes the
wheel, not the project: ``Requires-Dist: torch==2.11.*`` and the local version
``+pt2.11.cu130`` (:func:`classic_label`; so the builds for several torch releases of one version coexist in a
GitHub Release, and sort by torch release: the torch minor is a numeric PEP 440 segment).

A project's own local version (setuptools-scm's ``+g<hash>`` between tags, ``.d<date>`` for a dirty tree)
is merged, not dropped: PEP 440 local segments joined by ``.``, the farm's label first
(``1.4.1.dev1+pt211cu130.g1a2b3c4``). First, because it is the part that tells the wheels of one version
apart (one per torch and variant) and so it stays where every tool and the audit find it; the project's
segments follow unchanged, and a segment equal to the label is not written twice (rewriting a farm wheel
again gives the same name).

The archive is rewritten with sorted entries, fixed timestamps
(``SOURCE_DATE_EPOCH``) and normalised permissions, and the ``RECORD`` is
regenerated. ``wheel`` (the package) retags wheels but does not edit METADATA;
this repack is short and keeps the result byte-reproducible.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import os
import re
import time
import zipfile
from collections.abc import Mapping
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ci import settings
from ci.errors import UsageError

#: 1980-01-01, the oldest time a zip entry can hold.
ZIP_EPOCH = 315532800


class WheelError(UsageError):
    """A file that should be a wheel is not one (or not a sound one)."""


@dataclasses.dataclass(frozen=True)
class WheelName:
    name: str
    version: Version
    build: str
    tags: tuple[str, ...]

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(sorted({t.split("-")[2] for t in self.tags}))


def parse_name(path: Path) -> WheelName:
    try:
        name, version, build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        raise WheelError("not a wheel file name", path.name,
                         "wheels are named <name>-<version>-<python>-<abi>-<platform>.whl") from None
    tag_strs = tuple(sorted(str(t) for t in tags))
    return WheelName(str(name), version, "".join(str(p) for p in build), tag_strs)


def open_wheel(path: Path) -> zipfile.ZipFile:
    """Open ``path`` as a zip, with one-line errors for missing, empty or corrupt files."""
    if not path.exists():
        raise WheelError("wheel file does not exist", path, "pass the path of a built .whl")
    if path.is_dir():
        raise WheelError("wheel path is a folder", path, "pass the path of a .whl file")
    parse_name(path)
    if path.stat().st_size == 0:
        raise WheelError("wheel file is empty", path, "rebuild it; an interrupted copy leaves empty files")
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise WheelError("wheel file is not a zip archive", path, "rebuild it or download it again") from None


def dist_info_dir(zf: zipfile.ZipFile, path: Path) -> str:
    dirs = sorted({n.split("/")[0] for n in zf.namelist() if n.split("/")[0].endswith(".dist-info")})
    if len(dirs) != 1:
        raise WheelError("wheel has no single .dist-info folder", path, "rebuild it with a standard build backend")
    return dirs[0]


def metadata_bytes(path: Path) -> bytes:
    """The wheel's core metadata, byte for byte (``<dist-info>/METADATA``: what PEP 658 serves as ``.metadata``)."""
    with open_wheel(path) as zf:
        info = dist_info_dir(zf, path)
        try:
            return zf.read(f"{info}/METADATA")
        except KeyError:
            raise WheelError("wheel has no METADATA in its .dist-info", path,
                             "rebuild it with a standard build backend") from None


def read_metadata(path: Path) -> dict[str, list[str]]:
    text = metadata_bytes(path).decode("utf-8")
    msg = HeaderParser().parsestr(text)
    result: dict[str, list[str]] = {}
    for key, value in msg.items():
        result.setdefault(key, []).append(value)
    return result


def source_date_epoch() -> int:
    value = settings.value("SOURCE_DATE_EPOCH") or ""
    if value:
        if not value.isdigit():
            raise UsageError("SOURCE_DATE_EPOCH is not a whole number of seconds", value,
                             "set it to a Unix time (git log -1 --format=%ct) or unset it")
        return max(int(value), ZIP_EPOCH)
    return ZIP_EPOCH


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _set_requirements(metadata: str, torch_pin: str | None, version: str) -> str:
    """Replace the Version header and any torch requirement (keeping markers and extras of others)."""
    out: list[str] = []
    head, sep, body = metadata.partition("\n\n")
    pinned = False
    for line in head.splitlines():
        if line.startswith("Version:"):
            out.append(f"Version: {version}")
            continue
        if torch_pin and line.startswith("Requires-Dist:"):
            spec = line.split(":", 1)[1].strip()
            try:
                req = Requirement(spec)
            except InvalidRequirement:
                out.append(line)
                continue
            if canonicalize_name(req.name) == "torch" and not req.marker:
                if not pinned:
                    out.append(f"Requires-Dist: {torch_pin}")
                    pinned = True
                continue
        out.append(line)
    if torch_pin and not pinned:
        # Insert after the last Requires-Dist (or at the end of the headers).
        index = max((i for i, line in enumerate(out) if line.startswith("Requires-Dist:")), default=len(out) - 1)
        out.insert(index + 1, f"Requires-Dist: {torch_pin}")
    return "\n".join(out) + (sep + body if sep else "\n")


#: The form of the farm's local labels at the start of a local version: ``pt2.11.cu130``, ``pt2.11.cpu``
#: (classic, :func:`classic_label`), ``cu124`` (stable-ABI variants), and the older one-segment classic form
#: ``pt211cu130`` (its torch part sorts as a string: ``pt29`` above ``pt210``).
FARM_LABEL = re.compile(r"^(pt\d+\.\d+\.(cu\d+|cpu)|(pt\d+)?(cu\d+|cpu))(\.|$)")


def classic_label(torch_minor: str, variant: str) -> str:
    """The local label of a classic wheel: ``pt2.10.cu124`` for torch 2.10 and variant ``cu124``.

    PEP 440 splits a local version at ``.`` and compares numeric segments as numbers, others as strings: in
    ``pt210cu124`` the torch release is part of a string, and ``pt29cu124`` sorts above it, so pip, which takes
    the highest version it may install, would give a torch 2.10 user the torch 2.9 build (and torch 2.9).
    ``pt2.10.cu124`` has the minor in a numeric segment: ``pt2.10`` sorts above ``pt2.9``."""
    major, minor = torch_minor.split("+")[0].split(".")[:2]
    return f"pt{int(major)}.{int(minor)}.{variant}"


def merge_local(label: str, own: str) -> str:
    """The local version of a farm wheel: the farm's ``label`` (one or more segments) first, then the project's
    ``own`` local segments (PEP 440: ``.``-separated; the label already leading ``own``, or a segment equal to a
    one-segment label, is dropped, so merging is idempotent)."""
    head = label.split(".") if label else []
    segments = [s for s in own.split(".") if s]
    n = len(head)
    if n:
        i = 0
        while i + n <= len(segments):  # every copy of the label in the project's part goes, wherever it is
            if segments[i:i + n] == head:
                del segments[i:i + n]
            else:
                i += 1
    return ".".join([*head, *segments])


def local_matches(local: str, label: str) -> bool:
    """Whether a wheel's local version ``local`` carries the target's ``label`` as the farm writes it: the
    label's segments first and nowhere else; with no label, a start that is no farm label."""
    segments = local.split(".") if local else []
    if label:
        head = label.split(".")
        n = len(head)
        return segments[:n] == head and not any(segments[i:i + n] == head for i in range(n, len(segments)))
    return not segments or not FARM_LABEL.match(local)


def rewrite(wheel: Path, outdir: Path, *, local_version: str = "", torch_pin: str | None = None,
            epoch: int | None = None, dist_info_files: Mapping[str, bytes] | None = None) -> Path:
    """Write ``wheel`` again into ``outdir``: the farm's local label merged with the wheel's own local version
    (:func:`merge_local`), torch requirement, files added to (or replaced in) the dist-info folder
    (``cuda-ext-farm.json``), deterministic archive (entry times from ``epoch``, else SOURCE_DATE_EPOCH, else
    1980)."""
    parsed = parse_name(wheel)
    local = merge_local(local_version, parsed.version.local or "")
    version = f"{parsed.version.public}+{local}" if local else parsed.version.public
    epoch = max(epoch, ZIP_EPOCH) if epoch is not None else source_date_epoch()
    date_time = time.gmtime(epoch)[:6]
    with open_wheel(wheel) as zf:
        old_info = dist_info_dir(zf, wheel)
        dist = old_info[: -len(".dist-info")].rsplit("-", 1)[0]
        new_info = f"{dist}-{version}.dist-info"
        entries: list[tuple[str, bytes, int]] = []
        for item in zf.infolist():
            if item.is_dir():
                continue
            name = item.filename
            if name == f"{old_info}/RECORD" or name.endswith(".dist-info/RECORD.jws") or name.endswith("RECORD.p7s"):
                continue
            data = zf.read(item)
            if name.startswith(old_info + "/"):
                name = new_info + name[len(old_info):]
                if dist_info_files and name[len(new_info) + 1:] in dist_info_files:
                    continue
                if name == f"{new_info}/METADATA":
                    data = _set_requirements(data.decode("utf-8"), torch_pin, version).encode("utf-8")
            mode = (item.external_attr >> 16) & 0o777
            entries.append((name, data, 0o755 if mode & 0o111 else 0o644))
    entries += [(f"{new_info}/{name}", data, 0o644) for name, data in (dist_info_files or {}).items()]
    # dist-info last (the wheel spec's recommendation), everything else sorted.
    entries.sort(key=lambda e: (e[0].startswith(new_info + "/"), e[0]))
    tags = "-".join(_tag_fields(parsed.tags))
    build = f"-{parsed.build}" if parsed.build else ""
    return write_archive(outdir / f"{dist}-{version}{build}-{tags}.whl", entries, new_info, date_time)


def write_archive(target: Path, entries: list[tuple[str, bytes, int]], dist_info: str,
                  date_time: tuple[int, ...]) -> Path:
    """Write a wheel's ``(name, bytes, mode)`` entries, in their order, into ``target`` with a RECORD of them made
    here (``dist_info/RECORD``, last): every entry at ``date_time``, Unix modes, deflate level 6, so the same
    entries give the same bytes. Written beside ``target`` and renamed into place (nothing half-written)."""
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data, _ in entries:
        writer.writerow([name, _record_hash(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    entries = [*entries, (f"{dist_info}/RECORD", record.getvalue().encode(), 0o644)]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=date_time)  # type: ignore[arg-type]
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            out.writestr(info, data, compresslevel=6)
    os.replace(tmp, target)
    return target


def _tag_fields(tags: tuple[str, ...]) -> tuple[str, str, str]:
    """Compressed tag set ``cp312-cp312-manylinux_2_28_x86_64.manylinux_2_34_x86_64`` back from expanded tags."""
    interpreters = sorted({t.split("-")[0] for t in tags})
    abis = sorted({t.split("-")[1] for t in tags})
    platforms = sorted({t.split("-")[2] for t in tags}, key=_platform_key)
    return ".".join(interpreters), ".".join(abis), ".".join(platforms)


def _platform_key(platform: str) -> tuple[int, ...]:
    m = re.match(r"manylinux_(\d+)_(\d+)_", platform)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def version_parts(name: str) -> tuple[str, str]:
    """The public and local parts of a wheel file name's version (``1.0``, ``pt2.11.cu130``)."""
    version = parse_name(Path(name)).version
    return version.public, version.local or ""
