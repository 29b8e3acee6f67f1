"""What a release records: its files (``ReleaseFile``), the manifest (``release-manifest.json``), SHA256SUMS
and the PEP 503 indexes of a manifest (written by ``ci/release/index.py``; one per CUDA variant,
        for classic projects one
per torch release x variant: :func:`index_name`): the release folder's own
``index/`` (relative links to ``assets/``) and the GitHub Pages site of every release (GitHub Release downloads).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ci.errors import UsageError

MANIFEST = "release-manifest.json"
SUMS = "SHA256SUMS"
MANIFEST_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class ReleaseFile:
    """One file of a release, as the manifest records it."""

    name: str
    sha256: str
    size: int
    kind: str  # "wheel" or "sdist"
    pypi: bool
    #: Why a file is (not) on PyPI, in words.
    pypi_reason: str
    target: str | None = None
    os: str | None = None
    variant: str | None = None
    cuda: str | None = None
    torch: str | None = None
    python: str | None = None
    tags: tuple[str, ...] = ()
    requires_python: str | None = None
    checks: tuple[tuple[str, str], ...] = ()
    #: The index the file is listed in (:func:`index_name`); None in manifests written before it existed: the
    #: variant's.
    index: str | None = None
    #: ``stable`` or ``classic`` (None: written before it was recorded).
    abi: str | None = None
    #: SHA-256 of the wheel's METADATA, served beside it as ``<name>.metadata`` (PEP 658); None: not served.
    metadata_sha256: str | None = None

    @property
    def index_name(self) -> str:
        return self.index or str(self.variant)

    def with_checks(self, results: Mapping[str, str]) -> ReleaseFile:
        return dataclasses.replace(self, checks=tuple(sorted({**dict(self.checks), **results}.items())))

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["tags"] = list(self.tags)
        data["checks"] = dict(self.checks)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReleaseFile:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["tags"] = tuple(values.get("tags", ()))
        values["checks"] = tuple(sorted(dict(values.get("checks", {})).items()))
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class Manifest:
    project: str
    version: str
    tag: str | None
    commit: str | None
    pypi_variant: str
    files: tuple[ReleaseFile, ...]

    @property
    def wheels(self) -> tuple[ReleaseFile, ...]:
        return tuple(f for f in self.files if f.kind == "wheel")

    def variants(self) -> dict[str, list[ReleaseFile]]:
        """The wheels of each index (:func:`index_name`: the CUDA variant; for classic projects the torch release
        and the variant), as the release folder's ``index/`` and the GitHub Pages site lay them out."""
        found: dict[str, list[ReleaseFile]] = {}
        for item in self.wheels:
            found.setdefault(item.index_name, []).append(item)
        return found

    indexes = variants

    def to_json(self) -> str:
        data = {"schema": MANIFEST_SCHEMA, "generated-by": "python -m ci release", "project": self.project,
                "version": self.version, "tag": self.tag, "commit": self.commit, "pypi-variant": self.pypi_variant,
                "files": [f.as_dict() for f in sorted(self.files, key=lambda f: f.name)]}
        return json.dumps(data, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str, source: object = "release-manifest.json") -> Manifest:
        try:
            data = json.loads(text)
            if data.get("schema") != MANIFEST_SCHEMA:
                raise UsageError("release manifest of an unknown schema", f"{source}: {data.get('schema')}",
                                 f"this farm reads schema {MANIFEST_SCHEMA}")
            return cls(project=data["project"], version=data["version"], tag=data.get("tag"),
                       commit=data.get("commit"), pypi_variant=data["pypi-variant"],
                       files=tuple(ReleaseFile.from_dict(f) for f in data["files"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError("not a release manifest", f"{source}: {exc}",
                             "pass the release-manifest.json a release wrote") from None



def index_name(abi: str, variant: str, torch: str | None) -> str:
    """The index a wheel is listed in: its CUDA variant (``cu124``) for a stable-ABI project, whose wheel serves
    every later torch, as PyTorch's own per-CUDA indexes; ``torch2.10-cu124`` for a classic project, bound to
    one torch release: one index per torch release x variant (as PyG's ``torch-2.5.0+cu124`` pages), so an
    index never offers a build of another torch and pip cannot trade the user's torch for one."""
    if abi == "stable" or not torch:
        return variant
    return f"torch{'.'.join(torch.split('+')[0].split('.')[:2])}-{variant}"


def sums_text(files: Iterable[tuple[str, str]]) -> str:
    """``sha256sum -c`` format: ``<hex>  <name>``, sorted by name."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(files))


def parse_sums(text: str) -> dict[str, str]:
    result = {}
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        result[name.lstrip("*")] = digest
    return result


def local_index(manifest: Manifest) -> dict[str, dict[str, list[Any]]]:
    """Every index, linking the release folder's ``assets/`` (index/<index>/<project>/ -> ../../../)."""
    from ci.release import index

    return {variant: {manifest.project: [
        index.IndexFile(f.name, index.file_url("../../../assets", f.name), f.sha256, f.requires_python,
                        f.metadata_sha256)
        for f in files]} for variant, files in manifest.variants().items()}


def site_index(manifests: Iterable[Manifest], base_url: str) -> dict[str, dict[str, list[Any]]]:
    """Every index over every release, linking ``<base_url>/<tag>/<file>`` (GitHub Release downloads)."""
    from ci.release import index

    site: dict[str, dict[str, list[Any]]] = {}
    for manifest in manifests:
        if not manifest.tag:
            raise UsageError("a release manifest has no tag", manifest.version,
                             "manifests of published releases carry their tag (python -m ci release --tag)")
        for variant, files in manifest.variants().items():
            site.setdefault(variant, {}).setdefault(manifest.project, []).extend(
                index.IndexFile(f.name, index.file_url(base_url, manifest.tag, f.name), f.sha256, f.requires_python,
                                f.metadata_sha256)
                for f in files)
    return site


def write_manifest(out: Path, manifest: Manifest) -> None:
    """The manifest, then SHA256SUMS over every asset (the manifest included)."""
    from ci import fsutil, wheelmeta

    assets = out / "assets"
    fsutil.atomic_write_text(assets / MANIFEST, manifest.to_json())
    digests = [(p.name, wheelmeta.sha256_file(p)) for p in sorted(assets.iterdir())
               if p.is_file() and p.name != SUMS]
    fsutil.atomic_write_text(assets / SUMS, sums_text(digests))


# --- the one manifest recorder (release dry-run and assemble, dispatch-assemble) -------------------------------


def record_checks(manifest: Manifest, results: Mapping[str, str], name: str) -> Manifest:
    """``{file: result}`` as each named file's check ``name``."""
    return dataclasses.replace(manifest, files=tuple(
        item.with_checks({name: results[item.name]}) if item.name in results else item for item in manifest.files))


def record_file(manifest: Manifest, file_name: str, results: Mapping[str, str]) -> Manifest:
    """``{check: result}`` as checks of the one file ``file_name``."""
    return dataclasses.replace(manifest, files=tuple(
        item.with_checks(results) if item.name == file_name else item for item in manifest.files))


def record_install_lines(manifest: Manifest, results: Mapping[str, str]) -> Manifest:
    """``{"<line id> <file>": result}`` (install_lines.pip_check.check_install_lines) as each file's
    ``install-line <line id>`` checks."""
    by_file: dict[str, dict[str, str]] = {}
    for key, result in sorted(results.items()):
        line_id, _, name = key.rpartition(" ")
        by_file.setdefault(name, {})[f"install-line {line_id}"] = result
    return dataclasses.replace(manifest, files=tuple(
        item.with_checks(by_file[item.name]) if item.name in by_file else item for item in manifest.files))
