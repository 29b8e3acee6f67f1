"""The release folder: ``assets/`` (with the manifest and SHA256SUMS), ``pypi/``, ``index/<variant>/`` and
``release-notes.md``, written from a plan, and read back and checked.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from ci import settings
from ci.errors import UsageError
from ci.release.manifest import MANIFEST, SUMS, Manifest, local_index, parse_sums, write_manifest


def prepare_out(out: Path) -> None:
    """Replace ``out``, but never a folder that is not an earlier release folder."""
    if out.exists():
        entries = {p.name for p in out.iterdir()}
        known = {"assets", "pypi", "index", "release-notes.md"}
        if entries and not (out / "assets" / MANIFEST).is_file() and not entries <= known:
            raise UsageError("the release folder exists and is not an earlier release folder", out,
                             "pass an empty or new folder with --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def write_metadata_file(wheel: Path, folder: Path, sha256: str | None = None) -> Path:
    """``<folder>/<wheel>.metadata``: the wheel's METADATA, which the index announces (PEP 658/714) so installers
    resolve without downloading the wheel. ``sha256``: what the manifest recorded; a wheel whose METADATA
    differs is refused."""
    import hashlib

    from ci import fsutil, wheelmeta
    from ci.release import index

    data = wheelmeta.metadata_bytes(wheel)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise UsageError("the wheel's METADATA is not what the release plan recorded", wheel.name,
                         "write the release folder again from the same wheels")
    dest = folder / (wheel.name + index.METADATA_SUFFIX)
    fsutil.atomic_write_bytes(dest, data)
    return dest


def pages_url(out: Path, env: Mapping[str, str] | None = None) -> str:
    """Where users find the indexes: the repository's GitHub Pages site, else (a dry run) the folder itself."""
    env = settings.current().environ if env is None else env
    owner, _, repo = env.get("GITHUB_REPOSITORY", "").partition("/")
    if owner and repo:
        return f"https://{owner.lower()}.github.io/{repo}"
    return (out / "index").resolve().as_uri()


def release_notes(manifest: Manifest, indexes: str) -> str:
    """The GitHub Release's text: how to install each variant, and how to check what was downloaded."""
    lines = [f"## {manifest.project} {manifest.version}", ""]
    pypi_wheels = [f for f in manifest.wheels if f.pypi]
    if pypi_wheels:
        pin = f"{manifest.project}=={manifest.version}"
        lines += [f"From PyPI (the {manifest.pypi_variant} build): `pip install {pin}`", ""]
    else:
        lines += ["PyPI has the sdist only: these wheels carry local versions, which PyPI refuses.", ""]
    lines += ["Every CUDA variant, the way PyTorch's own indexes work:", "",
              "| variant | CUDA | install | wheels |", "| --- | --- | --- | --- |"]
    for variant, files in sorted(manifest.variants().items()):
        cuda = sorted({str(f.cuda) for f in files})
        lines.append(f"| {variant} | {', '.join(cuda)} | `pip install {manifest.project}=={manifest.version} "
                     f"--extra-index-url {indexes}/{variant}` | {len(files)} |")
    lines += ["", f"`SHA256SUMS` and `{MANIFEST}` list every file (`sha256sum -c SHA256SUMS`); every file has a "
              "build provenance attestation (`gh attestation verify FILE --repo OWNER/REPO`)."]
    return "\n".join(lines) + "\n"


def write_release(out: Path, manifest: Manifest, sources: Mapping[str, Path]) -> None:
    """assets/ (+ manifest, SHA256SUMS), pypi/, index/, release-notes.md: what the release jobs upload."""
    from ci import fsutil
    from ci.release import index

    assets = out / "assets"
    for item in manifest.files:
        _link_or_copy(sources[item.name], assets / item.name)
        if item.pypi:
            _link_or_copy(sources[item.name], out / "pypi" / item.name)
        if item.metadata_sha256:
            write_metadata_file(sources[item.name], assets, item.metadata_sha256)
    (out / "pypi").mkdir(exist_ok=True)
    index.write_site(out / "index", local_index(manifest), title=f"{manifest.project} {manifest.version}")
    fsutil.atomic_write_text(out / "release-notes.md", release_notes(manifest, pages_url(out)))
    write_manifest(out, manifest)


def verify_release(out: Path) -> Manifest:
    """Read a release folder back and check it: SHA256SUMS, manifest, files, indexes."""
    from ci import wheelmeta
    from ci.release import index

    assets = out / "assets"
    manifest = Manifest.from_json((assets / MANIFEST).read_text(), assets / MANIFEST)
    sums = parse_sums((assets / SUMS).read_text())
    on_disk = {p.name for p in assets.iterdir() if p.is_file() and p.name != SUMS}
    if set(sums) != on_disk:
        raise UsageError("SHA256SUMS does not list exactly the release's files",
                         ", ".join(sorted(set(sums) ^ on_disk)), "write the release folder again")
    for name, digest in sums.items():
        if wheelmeta.sha256_file(assets / name) != digest:
            raise UsageError("a release file does not match SHA256SUMS", name, "write the release folder again")
    for item in manifest.files:
        if sums.get(item.name) != item.sha256:
            raise UsageError("the manifest and SHA256SUMS disagree", item.name, "write the release folder again")
    for item in manifest.wheels:
        if item.metadata_sha256:
            served = assets / (item.name + index.METADATA_SUFFIX)
            if not served.is_file() or wheelmeta.sha256_file(served) != item.metadata_sha256 \
                    or served.read_bytes() != wheelmeta.metadata_bytes(assets / item.name):
                raise UsageError("a wheel's .metadata file is missing or is not the wheel's METADATA", served,
                                 "write the release folder again")
    for variant, files in manifest.variants().items():
        page = out / "index" / variant / index.normalize(manifest.project) / "index.html"
        linked = {f.name: (f.sha256, f.metadata_sha256) for f in index.read_project_page(page)}
        if linked != {f.name: (f.sha256, f.metadata_sha256) for f in files}:
            raise UsageError(f"the {variant} index does not list exactly that variant's wheels", page,
                             "write the release folder again")
    pypi = {p.name for p in (out / "pypi").iterdir()}
    if pypi != {f.name for f in manifest.files if f.pypi}:
        raise UsageError("pypi/ does not hold exactly the files meant for PyPI", out / "pypi",
                         "write the release folder again")
    return manifest


def print_summary(manifest: Manifest, out: Path, seconds: float | None = None) -> None:
    """The release folder as a table on stdout, and where its indexes and PyPI files are."""
    from rich.table import Table

    from ci.log import log

    table = Table(title=f"{manifest.project} {manifest.version}: {out}")
    for col in ("file", "size", "sha256", "variant", "PyPI", "checks"):
        table.add_column(col, overflow="fold")
    for item in manifest.files:
        checks = ", ".join(f"{k} {v.split(':')[0]}" for k, v in item.checks) or "-"
        table.add_row(item.name, f"{item.size / 2**20:.2f} MiB", item.sha256[:16], item.variant or "-",
                      "yes" if item.pypi else "no", checks)
    log.result(table)
    log.progress.print(f"variants: {', '.join(sorted(manifest.variants()))}; indexes under {out / 'index'}; "
                       f"PyPI gets {sum(f.pypi for f in manifest.files)} files ({out / 'pypi'})"
                       + (f"; {seconds:.0f} s" if seconds is not None else ""))
