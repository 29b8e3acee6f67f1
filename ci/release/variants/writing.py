"""The variant wheels of a release, written: each audited wheel again with its label and ``variant.json`` (public
version, deterministic bytes), the index file of every label's properties, and a PEP 503 page; which wheels a
release writes as variants, and the Windows wheels' own label where their properties differ."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci import wheelmeta
from ci.errors import UsageError
from ci.release.variants import FILE, FOLDER, NULL, WINDOWS, Variant, dumps, variant_name
from ci.release.variants.binary import variant_of

if TYPE_CHECKING:
    from ci.universe.targets import Target


def _public_version(version: str) -> str:
    """The version without the farm's local label (``0.1.0+cu124`` -> ``0.1.0``); a project's own local part stays."""

    public, _, local = version.partition("+")
    own = wheelmeta.FARM_LABEL.sub("", local).lstrip(".")
    return f"{public}+{own}" if own else public


def write_wheel(wheel: Path, outdir: Path, variant: Variant) -> Path:
    """``wheel`` as a variant wheel in ``outdir``: public version, ``variant.json`` before ``RECORD``, the RECORD
    again; entries in the input's order with its first entry's time (the same input gives the same bytes)."""
    with zipfile.ZipFile(wheel) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        record = next((i.filename for i in infos if re.fullmatch(r"[^/]+\.dist-info/RECORD", i.filename)), None)
        if record is None:
            raise UsageError("the wheel has no dist-info RECORD", wheel, "release a wheel the farm built")
        old_info = record.split("/")[0]
        dist, _, version = old_info.removesuffix(".dist-info").rpartition("-")
        version = _public_version(version)
        new_info = f"{dist}-{version}.dist-info"
        date_time = infos[0].date_time
        entries: list[tuple[str, bytes, int]] = []
        for item in infos:
            name = item.filename
            if name == record or name.startswith(f"{old_info}/RECORD.") or name == f"{old_info}/{FILE}":
                continue
            data = zf.read(item)
            if name.startswith(old_info + "/"):
                name = new_info + name[len(old_info):]
                if name == f"{new_info}/METADATA":
                    data = re.sub(rb"(?m)^Version: .*$", f"Version: {version}".encode(), data, count=1)
            entries.append((name, data, (item.external_attr >> 16) & 0o777 or 0o644))
    entries.append((f"{new_info}/{FILE}", dumps(variant.document()), 0o644))
    base = wheel.name.removesuffix(".whl").split("-")
    base[1] = version.replace("-", "_")
    return wheelmeta.write_archive(outdir / variant_name("-".join(base) + ".whl", variant.label), entries, new_info,
                                   date_time)


def variants_document(variants: Iterable[Variant]) -> dict[str, Any]:
    """``{name}-{version}-variants.json``: every label's properties (one label, one set of properties)."""
    merged: dict[str, Any] = {}
    for variant in variants:
        (label, props), = variant.document()["variants"].items()
        if merged.setdefault(label, props) != props:
            raise UsageError("two wheels of one variant label have different properties", label,
                             "a label names one build: release one CUDA build per cell")
    return {**Variant(NULL, {}).document(), "variants": dict(sorted(merged.items()))}


@dataclasses.dataclass(frozen=True)
class Written:
    folder: Path
    wheels: tuple[Path, ...]
    index_file: Path
    page: Path


def write_folder(out: Path, items: Sequence[tuple[Path, Variant]], project: str) -> Written:
    """The ``variants/`` folder of a release: each wheel as its variant, the index file, a PEP 503 page."""
    from ci.release import index

    folder = out / FOLDER
    if folder.exists():
        shutil.rmtree(folder)
    written: list[Path] = []
    names: dict[str, str] = {}
    for wheel, variant in items:
        path = write_wheel(wheel, folder, variant)
        if names.setdefault(path.name, wheel.name) != wheel.name:
            raise UsageError("two wheels give one variant wheel name", f"{path.name}: {names[path.name]}, "
                             f"{wheel.name}", "release one wheel per cell and tags (classic: the release torch's)")
        written.append(path)
    if not written:
        raise UsageError("no wheel to write as a variant", out, "release at least one wheel")
    dist, version = written[0].name.split("-")[:2]
    index_file = folder / f"{dist}-{version}-variants.json"
    index_file.write_bytes(dumps(variants_document(v for _, v in items)))
    files = []
    for path in written:
        metadata = _metadata(path)
        (folder / (path.name + index.METADATA_SUFFIX)).write_bytes(metadata)
        files.append(index.IndexFile(path.name, index.file_url("../..", path.name), wheelmeta.sha256_file(path),
                                     _requires_python(metadata), hashlib.sha256(metadata).hexdigest()))
    files.append(index.IndexFile(index_file.name, index.file_url("../..", index_file.name),
                                 wheelmeta.sha256_file(index_file)))
    page = folder / "simple" / index.normalize(project) / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(index.project_page(project, files), encoding="utf-8")
    (folder / "simple" / "index.html").write_text(index.listing_page("Simple index (variant wheels)",
                                                                     [index.normalize(project)]), encoding="utf-8")
    return Written(folder, tuple(sorted(written)), index_file, page)


def _metadata(wheel: Path) -> bytes:
    """A variant wheel's METADATA (wheelmeta's readers refuse the labelled name)."""
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)))


def _requires_python(metadata: bytes) -> str | None:
    from email.parser import HeaderParser

    value = HeaderParser().parsestr(metadata.decode("utf-8", errors="replace")).get("Requires-Python")
    return str(value).strip() if value else None


def release_items(built: Iterable[tuple[Path, Target]], release_torch: str,
                  cuobjdump: Path | None) -> list[tuple[Path, Variant]]:
    """The wheels a release writes as variants, each with its variant: every built wheel, of a classic project
    those of the release torch only."""
    chosen = [(w, t) for w, t in built if t.project.abi == "stable" or t.torch == release_torch]
    found = [(w, t.os, variant_of(w, t, cuobjdump)) for w, t in sorted(chosen, key=lambda x: x[0].name)]
    return [(w, _windows_label(v, [(o, x) for _, o, x in found if x.label == v.label]) if os == "windows" else v)
            for w, os, v in found]


def _windows_label(variant: Variant, same_label: Sequence[tuple[str, Variant]]) -> Variant:
    """A label names one set of properties in a release (variantlib refuses two): where the Windows wheels of a
    label hold other properties than its other wheels (built with other architectures), theirs is
    ``<label>.win``. Any other disagreement stays refused (:func:`variants_document`)."""
    def key(v: Variant) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return tuple(sorted(v.properties.items()))

    windows = {key(v) for os, v in same_label if os == "windows"}
    others = {key(v) for os, v in same_label if os != "windows"}
    if not others or len(windows) > 1 or windows == others:
        return variant
    return dataclasses.replace(variant, label=variant.label + WINDOWS, source=variant.source + "; the label's "
                               "other wheels hold other properties")
