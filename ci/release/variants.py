"""Wheel variants (PEP 825, draft; experimental, off by default): the release's wheels again as *variant wheels*,
in ``<release>/variants/``, for installers that understand them. ``docs/variants.md`` says what is draft, what
installers do today and how to turn it on (``release --variant-wheels``, ``FARM_VARIANT_WHEELS=1`` or the project
key ``variant-wheels = true``).

A variant wheel is the audited wheel with a *label* after its platform tag
(``myext-0.1.0-cp310-abi3-manylinux_2_31_x86_64-cuda13.0.whl``) and ``<dist-info>/variant.json`` naming its
properties; the index serves ``{name}-{version}-variants.json``, every label's properties, beside them. The
properties are the NVIDIA provider's (namespace ``nvidia``), read from the binary (ELF libraries of Linux wheels,
PE files of win_amd64 wheels), never written by hand:

* ``nvidia :: cuda_version_lower_bound``: the CUDA runtime major the wheel links (``DT_NEEDED libcudart.so.13``;
  ``cudart64_13.dll`` in a PE import table, regular or delay-load) with the minor of the cell it was built in (the
  toolkit its torch is a build of): ``13.0`` for the cu130 cell. A runtime major other than the cell's, none, or
  more than one is refused (the rule would have no single answer);
* ``nvidia :: sm_arch``: one value per architecture its CUDA libraries hold (``cuobjdump``; of a PE file, its
  ``.nv_fatb`` section read as a fatbin file): SASS ``sm_90`` -> ``90_real``, PTX ``sm_90`` -> ``90_virtual``.
  Arch-specific cubins (``sm_90a``, ``sm_100f``) have no value in the provider's vocabulary and are left out; a
  CUDA wheel left with none is refused.

The label is the cell's CUDA version (``cuda13.0``, ``cuda12.8``; the local stand-in cu124 gives ``cuda12.4``),
shared by the cell's Linux and Windows wheels; where the Windows wheels hold other properties (one label names one
set), theirs is ``cuda12.8.win``. A CPU build is the *null variant* (label ``null``, no properties), which a
variant-aware installer takes when no other fits. The variant wheels carry the public version (the farm's local
label, ``+cu124``, dropped): every variant of one release is one ``{name}-{version}``. Classic projects get variants
of the release torch's wheels only (one wheel per label and tags). The wheels are written deterministically (the
input wheel's entry times, entries in its order with ``variant.json`` before ``RECORD``): same input, same bytes.

The folder::

    variants/<wheel>-<label>.whl                 the variant wheels (and <wheel>.metadata, PEP 658)
    variants/{name}-{version}-variants.json      every label's properties (PEP 825's index file)
    variants/simple/<project>/index.html         a PEP 503 page linking both (file:// installable)

``validate`` reads the folder back with ``variantlib`` (0.2.2: its own dist-info and variants.json parsers and its
wheel-name pattern), so the format is checked by the reference implementation, not only by this module.

Standard library and ``packaging`` at import (``ci/doctor`` reads variant wheels with :func:`split_name`,
:func:`read_variant`); the audit's readers and ``variantlib`` are imported where they are used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci import wheelmeta
from ci.errors import UsageError

if TYPE_CHECKING:
    from ci.universe.targets import Target

#: The variant metadata schema of PEP 825 this writer follows.
SCHEMA = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
FILE = "variant.json"
FOLDER = "variants"
NULL = "null"
#: Added to a label whose Windows wheels hold other properties than its Linux ones.
WINDOWS = ".win"
NAMESPACE = "nvidia"
LOWER_BOUND = "cuda_version_lower_bound"
SM_ARCH = "sm_arch"
#: How an installer gets the NVIDIA provider (its own README's recommendation).
PROVIDER: dict[str, Any] = {"requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
                            "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin"}
LABEL = re.compile(r"[0-9a-z._]+")
_SASS = re.compile(r"sm_(\d+)")


@dataclasses.dataclass(frozen=True)
class Variant:
    """A wheel's variant: its label and properties (``{feature: values}`` of the ``nvidia`` namespace; empty for
    the null variant), and where they came from."""

    label: str
    properties: Mapping[str, tuple[str, ...]]
    source: str = ""

    def document(self) -> dict[str, Any]:
        """The ``variant.json`` of a wheel of this variant."""
        return {"$schema": SCHEMA, "default-priorities": {"namespace": [NAMESPACE]},
                "providers": {NAMESPACE: PROVIDER},
                "variants": {self.label: {NAMESPACE: {k: list(v) for k, v in sorted(self.properties.items())}}
                             if self.properties else {}}}


def dumps(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


# --- names ---------------------------------------------------------------------------------------------------------


def split_name(filename: str) -> tuple[str, str | None]:
    """``a-1.0-cp310-abi3-linux_x86_64-cuda13.0.whl`` -> (``a-1.0-cp310-abi3-linux_x86_64.whl``, ``cuda13.0``);
    a wheel without a label -> (itself, None). A python tag never starts with a digit, a build tag always does:
    that tells a six-part name's build tag (third part) from a label (last part)."""
    if not filename.endswith(".whl"):
        return filename, None
    parts = filename[:-4].split("-")
    has_build = len(parts) >= 6 and parts[2][:1].isdigit()
    if len(parts) == (7 if has_build else 6) and LABEL.fullmatch(parts[-1]):
        return "-".join(parts[:-1]) + ".whl", parts[-1]
    return filename, None


def variant_name(wheel_name: str, label: str) -> str:
    return wheel_name.removesuffix(".whl") + f"-{label}.whl"


# --- what the binary says --------------------------------------------------------------------------------------------


def sm_values(sass: Iterable[str], ptx: Iterable[str]) -> tuple[str, ...]:
    """The provider's ``sm_arch`` values of a wheel's SASS and PTX (``sm_90`` -> ``90_real`` / ``90_virtual``);
    arch-specific ``sm_90a``/``sm_100f`` have none."""
    found = {f"{m.group(1)}_real" for s in sass if (m := _SASS.fullmatch(s))}
    found |= {f"{m.group(1)}_virtual" for s in ptx if (m := _SASS.fullmatch(s))}
    return tuple(sorted(found, key=lambda v: (v.endswith("_virtual"), int(v.split("_")[0]))))


def runtime_majors(needed: Iterable[str]) -> set[int]:
    """The CUDA runtime majors a set of DT_NEEDED entries links (``libcudart.so.13`` -> 13)."""
    return {int(m.group(1)) for n in needed if (m := re.fullmatch(r"libcudart\.so\.(\d+)", n))}


@dataclasses.dataclass(frozen=True)
class _Code:
    """A CUDA wheel's runtime majors (``runtime``: the file of a major, ``libcudart.so.{}``), SASS and PTX."""

    majors: frozenset[int]
    runtime: str
    sass: tuple[str, ...]
    ptx: tuple[str, ...]


def _elf_code(root: Path, cuobjdump: Path) -> _Code | None:
    from ci.audit import gpu_code, symbols

    libraries = [p for p in sorted(root.rglob("*.so*")) if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    infos = {p: symbols.read_elf(p) for p in libraries}
    cuda_libs = [p for p, info in infos.items() if info.has_cuda_code]
    if not cuda_libs:
        return None
    return _Code(frozenset(runtime_majors(n for info in infos.values() for n in info.needed)), "libcudart.so.{}",
                 *gpu_code.list_archs(cuobjdump, cuda_libs))


def _pe_code(root: Path, cuobjdump: Path) -> _Code | None:
    """A Windows wheel's PE files (``.pyd``/``.dll``): the runtime from both import tables (``cudart64_13.dll``;
    delay-loaded counts too), the architectures from each ``.nv_fatb`` section. cuobjdump (the Linux one the farm
    installs) does not open PE files, but the section holds nvcc's fatbinary containers, which cuobjdump reads as a
    ``.fatbin`` file (without the padding around them, which it refuses): the same tool, and the same names and
    ``a``/``f`` rules, as for ELF libraries."""
    from ci.audit import debug_info, gpu_code
    from windows import dlls, pe

    files = [p for p in sorted(root.rglob("*")) if p.suffix.lower() in (".pyd", ".dll") and p.is_file()
             and p.read_bytes()[:2] == b"MZ"]
    infos = {p: pe.read(p, exports=False) for p in files}
    sections = [fatbin for p, info in infos.items() if info.has_cuda_code for data in pe.fatbin_sections(p)
                if (fatbin := b"".join(debug_info.fatbin_containers(data)))]
    if not sections:
        return None
    dumps = [root.parent / f"section-{i}.fatbin" for i in range(len(sections))]
    for path, data in zip(dumps, sections, strict=True):
        path.write_bytes(data)
    majors = {m for info in infos.values() for dll in info.all_dlls if (m := dlls.cudart_major(dll)) is not None}
    return _Code(frozenset(majors), "cudart64_{}.dll", *gpu_code.list_archs(cuobjdump, dumps))


def variant_of(wheel: Path, target: Target, cuobjdump: Path | None) -> Variant:
    """The wheel's variant, from its libraries (ELF on Linux, PE on Windows): the null variant for a CPU build, else
    the label of its cell and the properties its binary gives (see the module's rules)."""
    if target.cpu:
        return Variant(NULL, {}, "a CPU build: the null variant")
    if cuobjdump is None:
        raise UsageError("the variant's sm_arch is read with cuobjdump, which was not found", wheel.name,
                         "run the release where the farm can install it")
    with tempfile.TemporaryDirectory(prefix="farm-variant-") as tmp:
        root = Path(tmp) / "wheel"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(root)
        code = (_pe_code if target.os == "windows" else _elf_code)(root, cuobjdump)
    if code is None:
        raise UsageError("a CUDA build holds no CUDA code, so it has no variant", wheel.name,
                         "fix the build (the audit says why), or release without --variant-wheels")
    cell = target.cell
    if code.majors != {cell.cuda_major}:
        raise UsageError("the CUDA runtime the wheel links is not its cell's single major", f"{wheel.name}: links "
                         f"{code.runtime.format('*')} {sorted(code.majors) or 'none'}, cell {cell.name}",
                         "a variant's cuda_version_lower_bound comes from the one runtime it links: link the cell's "
                         "CUDA runtime (torch's CUDAExtension does), or release without --variant-wheels")
    values = sm_values(code.sass, code.ptx)
    if not values:
        raise UsageError("the wheel's GPU code has no sm_arch value", f"{wheel.name}: SASS "
                         f"{' '.join(code.sass) or 'none'}, PTX {' '.join(code.ptx) or 'none'}", "build for at least "
                         "one architecture without the a/f suffix (TORCH_CUDA_ARCH_LIST '9.0', not only '9.0a')")
    lower = f"{cell.cuda_major}.{cell.cuda.split('.')[1]}"
    return Variant(f"cuda{cell.cuda}", {LOWER_BOUND: (lower,), SM_ARCH: values},
                   f"links {code.runtime.format(cell.cuda_major)}, cell {cell.name}; SASS {' '.join(code.sass)}; PTX "
                   f"{' '.join(code.ptx) or 'none'}")


# --- writing ---------------------------------------------------------------------------------------------------------


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


def read_variant(wheel: Path) -> dict[str, Any] | None:
    """The ``variant.json`` of a wheel (None: no such file, or not JSON)."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(rf"[^/]+\.dist-info/{re.escape(FILE)}", n)]
        if len(names) != 1:
            return None
        with contextlib.suppress(ValueError):
            loaded = json.loads(zf.read(names[0]))
            return loaded if isinstance(loaded, dict) else None
    return None


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


# --- checking, with the reference implementation -------------------------------------------------------------------


def validate(folder: Path) -> str:
    """Read ``folder`` back with ``variantlib``: every variant wheel's name (its wheel-name pattern) and
    ``variant.json`` (its dist-info parser, with the label the name gives), the index file (its variants.json
    parser), and that the index file holds exactly the wheels' variants. Returns a one-line summary."""
    try:
        from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX
        from variantlib.errors import ValidationError
        from variantlib.variant_dist_info import VariantDistInfo
        from variantlib.variants_json import VariantsJson
    except ImportError:
        raise UsageError("variantlib is not installed", "variantlib", "install the farm's locked requirements "
                         "(ci/requirements/farm.txt), which hold it") from None
    wheels = sorted(folder.glob("*.whl"))
    index_files = sorted(folder.glob("*-variants.json"))
    if len(index_files) != 1:
        raise UsageError("a variants folder needs exactly one {name}-{version}-variants.json", folder,
                         "write the folder again (release --variant-wheels)")
    seen: dict[str, Any] = {}
    try:
        for wheel in wheels:
            match = VALIDATION_WHEEL_NAME_REGEX.fullmatch(wheel.name)
            label = match.group("variant_label") if match else None
            if label is None:
                raise UsageError("not a variant wheel name (variantlib)", wheel.name, "write the folder again")
            with zipfile.ZipFile(wheel) as zf:
                info = next(n for n in zf.namelist() if n.endswith(f".dist-info/{FILE}"))
                dist_info = VariantDistInfo(zf.read(info), label)
            seen[label] = dist_info.variant_desc
        combined = VariantsJson(json.loads(index_files[0].read_text(encoding="utf-8")))
    except (ValidationError, StopIteration, ValueError) as exc:
        raise UsageError(f"variantlib refuses the variant metadata ({type(exc).__name__}: {exc})", folder,
                         "write the folder again") from None
    if combined.variants != seen:
        raise UsageError("the variants.json does not describe exactly the folder's wheels", index_files[0],
                         "write the folder again")
    return f"variantlib accepts {len(wheels)} variant wheels ({', '.join(sorted(seen))}) and {index_files[0].name}"

