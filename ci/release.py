"""The release: every Linux target built, audited and import-tested, per-variant PEP 503 indexes, SHA256SUMS
and a manifest in one folder (``nox -s release -- --dry-run`` does what the release workflow does for the Linux
targets, uploading nothing).

The release folder (``--out``, default ``<build>/release``)::

    assets/                 what the GitHub Release gets: every wheel, the sdist, release-manifest.json, SHA256SUMS
    pypi/                   what PyPI gets: the sdist and the PyPI variant's wheels without a local version
    index/<variant>/<project>/index.html
                            one PEP 503 index per CUDA variant, linking ../../../assets/ (so the folder installs
                            as it is: pip install --index-url file://…/index/cu124 <project>)

Which wheels go where (one rule, for every project the farm serves):

* the *PyPI variant* is the release cell of the newest CUDA major (``targets.default_target``); its wheels go to
  PyPI when their version has no local label (PyPI refuses ``+…``), with the sdist;
* every wheel of every variant goes to the GitHub Release and to its variant's index, so
  ``pip install <project> --extra-index-url <site>/cu124`` finds the cu124 build the way PyTorch's indexes work:
  a variant's local label (``+cu124``, ``+pt211cu130``) sorts above the plain PyPI version;
* two different files may not share a name: a GitHub Release is one flat folder, and pip cannot tell two
  same-named files apart. Wheels of different variants must differ in their local label.

Modes: ``--dry-run`` (the whole pipeline for the Linux targets, here), ``--assemble ARTIFACTS`` (the release
workflow's assemble job: the downloaded build artifacts of every OS -> the same folder), ``--import-test WHEEL``
(the workflow's import-test jobs), ``--sdist DIR``, ``--site DIR`` (the GitHub Pages index of every release, from
the releases' manifests).

The argument hook is standard library only (``ci/cli.py`` imports it before any environment exists).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.errors import CommandFailed, UsageError

if TYPE_CHECKING:
    from ci import envs
    from ci.project import ProjectConfig
    from ci.targets import Target

MANIFEST = "release-manifest.json"
SUMS = "SHA256SUMS"
MANIFEST_SCHEMA = 1
#: Where the PyTorch wheels an import test installs come from, by flavour (the workflow's clean runners).
PYTORCH_INDEX = "https://download.pytorch.org/whl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="build, audit and import-test every Linux target here; write the release folder "
                           "(indexes, SHA256SUMS, manifest) and check that the indexes install; upload nothing")
    mode.add_argument("--assemble", metavar="ARTIFACTS",
                      help="the release workflow's assemble step: the built wheels under ARTIFACTS "
                           "(<target-id>/ or wheel-<target-id>/ folders with report.json) and the sdist -> --out")
    mode.add_argument("--import-test", metavar="WHEEL",
                      help="install WHEEL (or the one wheel in a folder) into a new environment with a torch of "
                           "--torch-kind and run the project's smoke command")
    mode.add_argument("--sdist", metavar="DIR", help="build the project's sdist into DIR")
    mode.add_argument("--site", metavar="DIR",
                      help="write the per-variant indexes of every release in --manifests into DIR, linking "
                           "the GitHub Release downloads under --base-url")
    parser.add_argument("--out", help="the release folder (default: <build>/release); replaced")
    parser.add_argument("--tag", help="the release tag; must be v<version> of the wheels")
    parser.add_argument("--sdist-dir", help="--assemble: the folder holding the sdist")
    parser.add_argument("--manifests", help="--site: a folder holding the releases' release-manifest.json files")
    parser.add_argument("--base-url", help="--site: the releases' download URL "
                        "(https://github.com/OWNER/REPO/releases/download)")
    parser.add_argument("--base-image", help="--dry-run: base image of the container builds (default: "
                        "FARM_BASE_IMAGE or the cell's)")
    parser.add_argument("--reuse-wheels", action="store_true",
                        help="--dry-run: do not rebuild a target whose audited wheel and report are in the wheelhouse")
    parser.add_argument("--no-audit", action="store_true",
                        help="--assemble: trust the build reports instead of auditing the Linux wheels again")
    parser.add_argument("--torch-kind", choices=("cuda", "cpu"), default="cuda",
                        help="--import-test: the CUDA torch of the target's cell, or a CPU-only torch")
    parser.add_argument("--torch-index", help="--import-test: the index torch comes from (default: pip's own, "
                        f"e.g. {PYTORCH_INDEX}/cpu)")
    parser.add_argument("--cpu-torch", help="the torch release of the CPU-only import test (default: the "
                        "target's; a stable-ABI wheel may be tested with any later one)")


def cmd_release(args: argparse.Namespace) -> int:
    if args.import_test:
        return _cmd_import_test(args)
    if args.sdist:
        return _cmd_sdist(args)
    if args.site:
        return _cmd_site(args)
    if args.assemble:
        return _cmd_assemble(args)
    if args.dry_run:
        return _cmd_dry_run(args)
    raise UsageError("no release mode given", "python -m ci release",
                     "pass --dry-run (here), or --assemble/--import-test/--sdist/--site (the release workflow)")


# --- the release's files --------------------------------------------------------------------------------


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
        found: dict[str, list[ReleaseFile]] = {}
        for item in self.wheels:
            found.setdefault(str(item.variant), []).append(item)
        return found

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


@dataclasses.dataclass(frozen=True)
class Built:
    """A target's audited wheel and the report its build wrote."""

    target: Target
    wheel: Path
    report: Mapping[str, Any]


def pypi_variant(config: ProjectConfig) -> str:
    from ci import targets

    return targets.pypi_variant(config)


def pypi_target_ids(config: ProjectConfig) -> frozenset[str]:
    """The targets whose wheels PyPI may get: the release target's cell and torch, on every OS."""
    from ci import targets

    default = targets.default_target(config)
    return frozenset(t.id for os_name in ("linux", "windows") for t in targets.targets_for(config, os_name)
                     if t.cell.name == default.cell.name and t.torch == default.torch)


def all_targets(config: ProjectConfig, os_names: Iterable[str] = ("linux", "windows")) -> dict[str, Target]:
    from ci import targets

    return {t.id: t for os_name in os_names for t in targets.targets_for(config, os_name)}


def find_built(folder: Path, wanted: Mapping[str, Target], *, require_all: bool = True) -> list[Built]:
    """The built wheels under ``folder``: ``<target-id>/`` (a wheelhouse) or ``wheel-<target-id>/`` (downloaded
    workflow artifacts), each holding one wheel and its ``report.json``."""
    from ci import report

    found: list[Built] = []
    missing: list[str] = []
    for target_id, target in wanted.items():
        candidates = [d for d in (folder / target_id, folder / f"wheel-{target_id}") if d.is_dir()]
        wheels = sorted(p for d in candidates for p in d.glob("*.whl"))
        rep = next((r for d in candidates if (r := report.read_report(d)) is not None), None)
        if not wheels or rep is None:
            missing.append(target_id)
            continue
        if len(wheels) != 1:
            raise UsageError(f"more than one wheel for {target_id}", ", ".join(w.name for w in wheels),
                             "leave one wheel per target folder (the build of the release)")
        found.append(Built(target, wheels[0], rep))
    if missing and require_all:
        raise UsageError(f"{len(missing)} of {len(wanted)} targets have no built wheel with a report",
                         ", ".join(missing), f"build them, or check the artifacts under {folder}")
    return found


def verify_built(built: Built) -> str:
    """The build report must name the target and the file, with every audit check passed."""
    from ci import wheelmeta

    rep = built.report
    if rep.get("target") != built.target.id or rep.get("wheel") != built.wheel.name:
        raise UsageError("the build report does not describe this wheel", built.wheel,
                         f"report.json says {rep.get('target')}/{rep.get('wheel')}; rebuild the target")
    digest = wheelmeta.sha256_file(built.wheel)
    if digest != rep.get("sha256"):
        raise UsageError("the wheel is not the one its build audited (SHA-256 differs)", built.wheel,
                         "rebuild it; never edit a wheel after its audit")
    checks = rep.get("checks", [])
    failed = [c.get("name", "?") for c in checks if not c.get("ok")]
    if failed or not checks:
        raise UsageError("the build report lists failed audit checks", f"{built.target.id}: {', '.join(failed)}",
                         "fix the build; a wheel is released only when every check passed")
    return f"ok: {len(checks)} checks at build ({rep.get('mode', '?')})"


def _version_parts(name: str) -> tuple[str, str]:
    from ci import wheelmeta

    version = wheelmeta.parse_name(Path(name)).version
    return version.public, version.local or ""


def _requires_python(wheel: Path) -> str | None:
    from ci import wheelmeta

    values = wheelmeta.read_metadata(wheel).get("Requires-Python", [])
    return values[0].strip() if values else None


def plan(config: ProjectConfig, built: Sequence[Built], sdist: Path | None, *, tag: str | None,
         commit: str | None, checks: Mapping[str, Mapping[str, str]] | None = None) -> Manifest:
    """Decide every file's place (PyPI or not, which index) and refuse a release pip could misread."""
    from ci import wheelmeta

    if not built:
        raise UsageError("nothing to release", config.name, "build at least one target")
    pypi_ids = pypi_target_ids(config)
    variant = pypi_variant(config)
    files: list[ReleaseFile] = []
    versions: dict[str, str] = {}
    for item in built:
        target = item.target
        public, local = _version_parts(item.wheel.name)
        versions[item.wheel.name] = public
        if target.id not in pypi_ids:
            on_pypi, why = False, f"variant {target.variant} (PyPI has {variant}): GitHub Release and index only"
            if target.variant != variant and not local:
                raise UsageError(
                    f"the {target.variant} wheel has no local version, so pip would take it for PyPI's "
                    f"{variant} build", item.wheel.name,
                    f"give wheels of variants other than {variant} a local label (+{target.variant}); "
                    "see docs/releasing.md 'Variants and local versions'")
        elif local:
            on_pypi, why = False, f"local version +{local}: PyPI refuses local versions; GitHub Release and index"
        else:
            on_pypi, why = True, f"the PyPI variant {variant}"
        parsed = wheelmeta.parse_name(item.wheel)
        files.append(ReleaseFile(
            name=item.wheel.name, sha256=wheelmeta.sha256_file(item.wheel), size=item.wheel.stat().st_size,
            kind="wheel", pypi=on_pypi, pypi_reason=why, target=target.id, os=target.os, variant=target.variant,
            cuda=target.cell.cuda, torch=target.torch, python=target.python, tags=parsed.tags,
            requires_python=_requires_python(item.wheel),
            checks=tuple(sorted((checks or {}).get(item.wheel.name, {}).items())),
        ))
    if sdist is not None:
        base = sdist.name.removesuffix(".tar.gz")
        public = base.rpartition("-")[2]
        versions[sdist.name] = public
        files.append(ReleaseFile(name=sdist.name, sha256=wheelmeta.sha256_file(sdist), size=sdist.stat().st_size,
                                 kind="sdist", pypi=True, pypi_reason="the source distribution"))
    distinct = sorted(set(versions.values()))
    if len(distinct) != 1:
        raise UsageError("the release's files have different versions", ", ".join(
            f"{n}: {v}" for n, v in sorted(versions.items())), "build every target from one commit")
    version = distinct[0]
    if tag is not None and tag.removeprefix("v") != version:
        raise UsageError("the tag does not name the version of the wheels", f"{tag} vs {version}",
                         f"tag the release v{version}, or bump [project] version")
    by_name: dict[str, list[str]] = {}
    for entry in files:
        by_name.setdefault(entry.name, []).append(entry.target or "sdist")
    clashes = {n: ids for n, ids in by_name.items() if len(ids) > 1}
    if clashes:
        name, ids = sorted(clashes.items())[0]
        raise UsageError(
            "two targets build wheels of one file name", f"{name}: {', '.join(ids)}",
            "a GitHub Release is one folder and pip cannot tell them apart: the variants need local labels "
            "(+cu124; see docs/releasing.md 'Variants and local versions')")
    return Manifest(project=config.name, version=version, tag=tag, commit=commit, pypi_variant=variant,
                    files=tuple(sorted(files, key=lambda f: f.name)))


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
    """Every variant's index, linking the release folder's ``assets/`` (index/<variant>/<project>/ -> ../../../)."""
    from ci import index

    return {variant: {manifest.project: [
        index.IndexFile(f.name, index.file_url("../../../assets", f.name), f.sha256, f.requires_python)
        for f in files]} for variant, files in manifest.variants().items()}


def site_index(manifests: Iterable[Manifest], base_url: str) -> dict[str, dict[str, list[Any]]]:
    """Every variant's index over every release, linking ``<base_url>/<tag>/<file>`` (GitHub Release downloads)."""
    from ci import index

    site: dict[str, dict[str, list[Any]]] = {}
    for manifest in manifests:
        if not manifest.tag:
            raise UsageError("a release manifest has no tag", manifest.version,
                             "manifests of published releases carry their tag (python -m ci release --tag)")
        for variant, files in manifest.variants().items():
            site.setdefault(variant, {}).setdefault(manifest.project, []).extend(
                index.IndexFile(f.name, index.file_url(base_url, manifest.tag, f.name), f.sha256, f.requires_python)
                for f in files)
    return site


def _prepare_out(out: Path) -> None:
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


def pages_url(out: Path, env: Mapping[str, str] | None = None) -> str:
    """Where users find the indexes: the repository's GitHub Pages site, else (a dry run) the folder itself."""
    env = os.environ if env is None else env
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
    from ci import fsutil, index

    assets = out / "assets"
    for item in manifest.files:
        _link_or_copy(sources[item.name], assets / item.name)
        if item.pypi:
            _link_or_copy(sources[item.name], out / "pypi" / item.name)
    (out / "pypi").mkdir(exist_ok=True)
    index.write_site(out / "index", local_index(manifest), title=f"{manifest.project} {manifest.version}")
    fsutil.atomic_write_text(out / "release-notes.md", release_notes(manifest, pages_url(out)))
    write_manifest(out, manifest)


def write_manifest(out: Path, manifest: Manifest) -> None:
    """The manifest, then SHA256SUMS over every asset (the manifest included)."""
    from ci import fsutil, wheelmeta

    assets = out / "assets"
    fsutil.atomic_write_text(assets / MANIFEST, manifest.to_json())
    digests = [(p.name, wheelmeta.sha256_file(p)) for p in sorted(assets.iterdir())
               if p.is_file() and p.name != SUMS]
    fsutil.atomic_write_text(assets / SUMS, sums_text(digests))


def verify_release(out: Path) -> Manifest:
    """Read a release folder back and check it: SHA256SUMS, manifest, files, indexes."""
    from ci import index, wheelmeta

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
    for variant, files in manifest.variants().items():
        page = out / "index" / variant / index.normalize(manifest.project) / "index.html"
        linked = {f.name: f.sha256 for f in index.read_project_page(page)}
        if linked != {f.name: f.sha256 for f in files}:
            raise UsageError(f"the {variant} index does not list exactly that variant's wheels", page,
                             "write the release folder again")
    pypi = {p.name for p in (out / "pypi").iterdir()}
    if pypi != {f.name for f in manifest.files if f.pypi}:
        raise UsageError("pypi/ does not hold exactly the files meant for PyPI", out / "pypi",
                         "write the release folder again")
    return manifest


# --- checks: the indexes install, pip picks the variant, the wheels import -------------------------------


def pip_isolated_env() -> dict[str, str]:
    """pip that sees only the indexes on its command line: no configuration file (PIP_CONFIG_FILE=os.devnull
    skips them all, the machine's find-links and constraints included); ``--isolated`` drops PIP_* variables."""
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _tag_args(item: ReleaseFile) -> list[str]:
    """pip's --python-version/--implementation/--abi/--platform for the wheel's own tags."""
    interpreters = sorted({t.split("-")[0] for t in item.tags})
    abis = sorted({t.split("-")[1] for t in item.tags})
    platforms = sorted({t.split("-")[2] for t in item.tags})
    python = item.python or f"{interpreters[0][2]}.{interpreters[0][3:]}"
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for abi in abis:
        args += ["--abi", abi]
    for platform in platforms:
        args += ["--platform", platform]
    return args


def check_index_install(out: Path, manifest: Manifest, python: Path | None = None) -> dict[str, str]:
    """``pip install --index-url file://…/index/<variant> <project>==<version>`` for every wheel, with the
    wheel's own tags (so Windows wheels are checked on Linux too); the installed files must be the wheel's."""
    from ci import proc, wheelmeta

    interpreter = str(python or sys.executable)
    results: dict[str, str] = {}
    for variant, files in sorted(manifest.variants().items()):
        url = (out / "index" / variant).resolve().as_uri() + "/"
        for item in files:
            public, local = _version_parts(item.name)
            spec = f"{manifest.project}=={public}{'+' + local if local else ''}"
            with tempfile.TemporaryDirectory(prefix="farm-index-check-") as tmp:
                proc.run([interpreter, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps", "--no-cache-dir",
                          "--target", tmp, "--index-url", url, *_tag_args(item), spec],
                         env=pip_isolated_env(), what=f"installing {item.name} from the {variant} index failed",
                         hint="the index under index/ does not serve the wheel; its page is above")
                dist_info = sorted(Path(tmp).glob("*.dist-info"))
                record = dist_info[0] / "RECORD" if dist_info else None
                if record is None or not record.is_file():
                    raise CommandFailed(f"the {variant} index installed no distribution", item.name,
                                        "check the index page's links")
                installed = wheelmeta.parse_name(Path(item.name)).version
                if not dist_info[0].name.endswith(f"-{installed}.dist-info"):
                    raise CommandFailed(f"the {variant} index installed another version", dist_info[0].name,
                                        f"expected {item.name}")
            results[item.name] = f"ok: pip install --index-url {variant} {spec}"
    return results


def check_extra_index(out: Path, manifest: Manifest, python: Path | None = None) -> dict[str, str]:
    """What users type, ``pip install <project> --extra-index-url <site>/<variant>``, with PyPI played by an
    index of the pypi/ folder: pip must pick the variant's wheel, not PyPI's."""
    from ci import index, proc

    interpreter = str(python or sys.executable)
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="farm-pypi-standin-") as tmp:
        standin = Path(tmp) / "pypi"
        index.write_site(standin, {"simple": {manifest.project: [
            index.IndexFile(f.name, (out / "pypi" / f.name).resolve().as_uri(), f.sha256, f.requires_python)
            for f in manifest.files if f.pypi]}})
        pypi_url = (standin / "simple").as_uri() + "/"
        for variant, files in sorted(manifest.variants().items()):
            variant_url = (out / "index" / variant).resolve().as_uri() + "/"
            names = {f.name for f in files}
            for item in files:
                dest = Path(tmp) / "download" / item.name
                proc.run([interpreter, "-m", "pip", "download", "--isolated", "--quiet", "--no-deps",
                          "--no-cache-dir", "--dest", str(dest), "--index-url", pypi_url,
                          "--extra-index-url", variant_url, *_tag_args(item), manifest.project],
                         env=pip_isolated_env(), what=f"pip found no {manifest.project} for {item.name}'s tags")
                got = sorted(p.name for p in dest.iterdir())
                if len(got) != 1 or got[0] not in names:
                    raise CommandFailed(
                        f"pip install {manifest.project} --extra-index-url …/{variant} picks another file",
                        ", ".join(got) or "nothing", f"expected a {variant} wheel ({item.name}); the variant's "
                        "wheels need a local label that sorts above PyPI's version")
                results[item.name] = (f"ok: --extra-index-url {variant} picks {got[0]}" if got[0] == item.name
                                      else f"ok: --extra-index-url {variant} picks {got[0]} (same variant, newer)")
    return results


def _smoke_command(target: Target, python: Path, wheel: Path) -> list[str]:
    from ci import project

    values = {"python": str(python), "project": str(target.project.root), "wheel": str(wheel), "out": "."}
    parts = [project.expand(p, values) for p in target.project.commands.smoke]
    if parts and parts[0] in ("python", "python3"):
        parts[0] = str(python)
    elif parts and parts[0] == "pytest":
        parts = [str(python), "-m", "pytest", *parts[1:]]
    return parts


def torch_env(target: Target, kind: str, python: str, *, index_url: str | None,
              cpu_torch: str | None) -> envs.PythonEnv:
    """An environment (cached by the farm) holding only ``python`` and the torch of the import test."""
    from ci import envs, matrix

    if kind == "cuda":
        if index_url is None:
            # The farm's own build environment of the target: the CUDA torch of its cell, from pip's index.
            return envs.build_env(python, target.torch_requirement, target.project.build_requires)
        return envs.ensure_env("import-cuda", python, ["--index-url", index_url, target.torch_requirement])
    version = matrix.get_torch(cpu_torch).version if cpu_torch else target.torch
    if target.project.abi != "stable" and matrix.minor_of(version) != target.torch_minor:
        raise UsageError(f"{target.id} is bound to torch {target.torch_minor}", cpu_torch,
                         "a classic wheel is import-tested with its own torch release")
    return envs.ensure_env("import-cpu", python, [*(["--index-url", index_url] if index_url else []),
                                                  f"torch=={version}+cpu"])


def import_test(target: Target, kind: str, *, wheel: Path, python: str, index_url: str | None,
                cpu_torch: str | None, from_index: str | None = None, version_spec: str | None = None) -> str:
    """Install the wheel into a new venv over a torch-only environment; ``pip check``; the smoke command."""
    from ci import envs, proc

    base = torch_env(target, kind, python, index_url=index_url, cpu_torch=cpu_torch)
    with tempfile.TemporaryDirectory(prefix="farm-import-") as tmp:
        env = envs.test_env(base, Path(tmp) / "venv")
        source = ["--index-url", from_index, version_spec or target.project.name] if from_index \
            else ["--no-index", str(wheel)]
        proc.run([env.python, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps", *source],
                 env=pip_isolated_env(), what=f"installing {wheel.name} into a clean environment failed")
        proc.run([env.python, "-m", "pip", "check"], env=pip_isolated_env(),
                 what="the wheel's requirements are not met in its test environment",
                 hint="a classic wheel pins its torch release; a stable-ABI wheel needs torch >= its floor")
        torch = proc.run([env.python, "-c", "import torch; print(torch.__version__)"], capture=True, log=False)
        run_env = {"PATH": os.pathsep.join([str(env.bin_dir), os.environ.get("PATH", "")]), "PYTHONPATH": "",
                   "FARM_LANE": f"import-{kind}"}
        proc.run(_smoke_command(target, env.python, wheel), env=run_env, cwd=target.project.root,
                 what=f"the smoke command failed under a {kind} torch",
                 hint="its output is above ([tool.cuda-ext-farm.commands] smoke)")
    return f"ok: smoke under torch {torch.stdout.strip().splitlines()[-1]}"


def host_can_run(item: ReleaseFile, python: str) -> str | None:
    """Why this machine cannot import the wheel (None when it can)."""
    from packaging import tags

    from ci import matrix

    if item.os != "linux" or sys.platform != "linux":
        return f"a {item.os} wheel"
    host_platforms = set(tags.platform_tags())
    wheel_platforms = {t.split("-")[2] for t in item.tags}
    if not host_platforms & wheel_platforms:
        return (f"its platform {', '.join(sorted(wheel_platforms))} needs a newer glibc than this machine's; "
                "the build's smoke test ran it in the cell's image")
    if matrix.version_key(python) < matrix.version_key(item.python or python):
        return f"it needs CPython {item.python} or newer"
    return None


def _test_python(target: Target) -> str | None:
    """The CPython an import test uses here: the running one for abi3 wheels, the target's otherwise."""
    from ci import envs, options
    from ci.errors import MissingRequirement

    if target.abi3:
        return options.current_python()
    try:
        envs.find_interpreter(target.python)
    except MissingRequirement:
        return None
    return target.python


def run_import_tests(out: Path, manifest: Manifest, by_id: Mapping[str, Target], *,
                     cpu_torch: str | None) -> dict[str, dict[str, str]]:
    results: dict[str, dict[str, str]] = {}
    for item in manifest.wheels:
        target = by_id[str(item.target)]
        url = (out / "index" / str(item.variant)).resolve().as_uri() + "/"
        public, local = _version_parts(item.name)
        spec = f"{manifest.project}=={public}{'+' + local if local else ''}"
        python = _test_python(target)
        reason = f"no CPython {target.python} on this machine" if python is None \
            else host_can_run(item, python)
        checks: dict[str, str] = {}
        wheel = out / "assets" / item.name
        if reason is not None:
            checks["import-cuda"] = checks["import-cpu"] = f"not run here: {reason}"
        else:
            assert python is not None
            checks["import-cuda"] = import_test(target, "cuda", wheel=wheel, python=python, index_url=None,
                                                cpu_torch=None, from_index=url, version_spec=spec)
            if target.project.cpu_libraries:
                checks["import-cpu"] = import_test(target, "cpu", wheel=wheel, python=python, index_url=None,
                                                   cpu_torch=cpu_torch, from_index=url, version_spec=spec)
            else:
                checks["import-cpu"] = "not applicable: the project declares no cpu-libraries"
        results[item.name] = checks
    return results


# --- the sdist -------------------------------------------------------------------------------------------


def build_sdist(config: ProjectConfig, dest: Path) -> Path:
    """``python -m build --sdist`` in the farm's build environment of the release target (its setup.py may
    import torch, which an isolated build would download again)."""
    from ci import envs, options, proc, targets

    target = targets.default_target(config)
    env = envs.build_env(options.current_python(), target.torch_requirement, config.build_requires)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="farm-sdist-") as tmp:
        proc.run([env.python, "-m", "build", "--sdist", "--no-isolation", "--outdir", tmp, config.root],
                 env={"PIP_CONSTRAINT": os.devnull}, what="building the sdist failed")
        made = sorted(Path(tmp).glob("*.tar.gz"))
        if len(made) != 1:
            raise CommandFailed("the sdist build did not produce exactly one archive",
                                ", ".join(p.name for p in made) or "none", "its output is above")
        final = dest / made[0].name
        shutil.copy2(made[0], final)
    return final


def find_sdist(folder: Path) -> Path:
    found = sorted(folder.glob("*.tar.gz"))
    if len(found) != 1:
        raise UsageError("expected exactly one sdist", f"{folder}: {', '.join(p.name for p in found) or 'none'}",
                         "pass the folder python -m ci release --sdist wrote")
    return found[0]


# --- commands --------------------------------------------------------------------------------------------


def _git_commit(root: Path) -> str | None:
    from ci import proc

    head = proc.run(["git", "-C", root, "rev-parse", "HEAD"], capture=True, check=False, log=False)
    if head.returncode != 0:
        return None
    dirty = proc.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"], capture=True,
                     check=False, log=False)
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _default_out(args: argparse.Namespace, config: ProjectConfig) -> Path:
    from ci import options, publish

    outputs = publish.Outputs.resolve(config.root, getattr(args, "wheelhouse", None), getattr(args, "build_dir", None))
    return options.path_option(args.out, "FARM_RELEASE_DIR", outputs.build_root / "release")


def _print_summary(manifest: Manifest, out: Path, seconds: float | None = None) -> None:
    from rich.table import Table

    from ci import proc

    table = Table(title=f"{manifest.project} {manifest.version}: {out}")
    for col in ("file", "size", "sha256", "variant", "PyPI", "checks"):
        table.add_column(col, overflow="fold")
    for item in manifest.files:
        checks = ", ".join(f"{k} {v.split(':')[0]}" for k, v in item.checks) or "-"
        table.add_row(item.name, f"{item.size / 2**20:.2f} MiB", item.sha256[:16], item.variant or "-",
                      "yes" if item.pypi else "no", checks)
    proc.console.print(table)
    proc.console.print(f"variants: {', '.join(sorted(manifest.variants()))}; indexes under {out / 'index'}; "
                       f"PyPI gets {sum(f.pypi for f in manifest.files)} files ({out / 'pypi'})"
                       + (f"; {seconds:.0f} s" if seconds is not None else ""))


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from ci import audit, buildall, images, options, proc, publish, targets, toolkit

    started = time.monotonic()
    config = options.load_project(args)
    sel = options.selection(args)
    chosen = targets.select(config, sel, "linux") if not sel.empty else targets.targets_for(config, "linux")
    outputs = publish.Outputs.resolve(config.root, args.wheelhouse, args.build_dir)
    out = _default_out(args, config)
    proc.console.print(f"[bold]release dry run[/] of {config.name}: {len(chosen)} Linux targets -> {out}")
    # Preflight: what the build needs, before hours of compiling.
    images.require_engine()
    outputs.check_writable()
    by_id = {t.id: t for t in chosen}
    reusable = []
    if args.reuse_wheels:
        for item in find_built(outputs.wheelhouse, by_id, require_all=False):
            try:
                verify_built(item)
                reusable.append(item.target.id)
            except UsageError as exc:
                proc.console.print(f"[yellow]rebuilding[/] {item.target.id}: {exc.line()}")
    to_build = tuple(t for t in chosen if t.id not in reusable)
    if reusable:
        proc.console.print(f"[green]reusing[/] the audited wheels of {', '.join(reusable)}")
    if to_build:
        buildall.build_all(to_build, outputs, jobs=1, base_image=args.base_image, max_jobs=args.max_jobs,
                           console=proc.console)
    built = find_built(outputs.wheelhouse, by_id)
    checks: dict[str, dict[str, str]] = {}
    cuobjdump = toolkit.ensure_cuobjdump()
    for item in built:
        at_build = verify_built(item)
        result = audit.audit_wheel(item.wheel, item.target, cuobjdump)
        audit.raise_for_failures(result)
        checks[item.wheel.name] = {"audit": f"{at_build}; ok: {len(result.checks)} checks again on the host"}
    with tempfile.TemporaryDirectory(prefix="farm-release-") as tmp:
        sdist = build_sdist(config, Path(tmp) / "sdist")
        manifest = plan(config, built, sdist, tag=args.tag, commit=_git_commit(config.root), checks=checks)
        _prepare_out(out)
        sources = {item.wheel.name: item.wheel for item in built} | {sdist.name: sdist}
        write_release(out, manifest, sources)
    manifest = _record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = _record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    for name, results in run_import_tests(out, manifest, by_id, cpu_torch=args.cpu_torch).items():
        manifest = _record_all(manifest, name, results)
    write_manifest(out, manifest)
    verify_release(out)
    _print_summary(manifest, out, time.monotonic() - started)
    proc.console.print("[green]dry run complete[/]: nothing was uploaded")
    return 0


def _record_checks(manifest: Manifest, results: Mapping[str, str], name: str) -> Manifest:
    files = tuple(f.with_checks({name: results[f.name]}) if f.name in results else f for f in manifest.files)
    return dataclasses.replace(manifest, files=files)


def _record_all(manifest: Manifest, file_name: str, results: Mapping[str, str]) -> Manifest:
    files = tuple(f.with_checks(results) if f.name == file_name else f for f in manifest.files)
    return dataclasses.replace(manifest, files=files)


def _cmd_assemble(args: argparse.Namespace) -> int:
    from ci import audit, options, proc, toolkit

    config = options.load_project(args)
    out = _default_out(args, config)
    by_id = all_targets(config)
    built = find_built(Path(args.assemble), by_id)
    checks: dict[str, dict[str, str]] = {}
    cuobjdump = None
    for item in built:
        at_build = verify_built(item)
        if item.target.os == "linux" and not args.no_audit:
            cuobjdump = cuobjdump or toolkit.ensure_cuobjdump()
            result = audit.audit_wheel(item.wheel, item.target, cuobjdump)
            audit.raise_for_failures(result)
            at_build += f"; ok: {len(result.checks)} checks again in the assemble job"
        checks[item.wheel.name] = {"audit": at_build}
    sdist = find_sdist(Path(args.sdist_dir)) if args.sdist_dir else None
    if sdist is None:
        proc.console.print("[yellow]no --sdist-dir[/]: the release has no sdist")
    manifest = plan(config, built, sdist, tag=args.tag, commit=os.environ.get("GITHUB_SHA") or _git_commit(config.root),
                    checks=checks)
    _prepare_out(out)
    write_release(out, manifest, {item.wheel.name: item.wheel for item in built} | ({sdist.name: sdist} if sdist
                                                                                     else {}))
    manifest = _record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = _record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    write_manifest(out, manifest)
    verify_release(out)
    _print_summary(manifest, out)
    return 0


def _cmd_import_test(args: argparse.Namespace) -> int:
    from ci import options, proc

    if not args.target:
        raise UsageError("--import-test needs the wheel's target", "--target", "pass --target ID (nox -s matrix)")
    (target,) = options.resolve(args, os_name=_host_os())[:1]
    path = Path(args.import_test)
    wheels = sorted(path.glob("*.whl")) if path.is_dir() else [path]
    if len(wheels) != 1 or not wheels[0].is_file():
        raise UsageError("expected one wheel", f"{path}: {', '.join(w.name for w in wheels) or 'none'}",
                         "pass the wheel, or the folder of one target's build")
    kind = args.torch_kind
    if kind == "cpu" and not target.project.cpu_libraries:
        proc.console.print(f"[yellow]skipped[/]: {target.project.name} declares no cpu-libraries, so its wheels "
                           "need a CUDA torch")
        return 0
    result = import_test(target, kind, wheel=wheels[0], python=options.current_python(), index_url=args.torch_index,
                         cpu_torch=args.cpu_torch)
    proc.console.print(f"[green]{wheels[0].name}[/]: {result}")
    return 0


def _host_os() -> str:
    return "windows" if sys.platform == "win32" else "linux"


def _cmd_sdist(args: argparse.Namespace) -> int:
    from ci import options, proc

    sdist = build_sdist(options.load_project(args), Path(args.sdist))
    proc.console.print(f"[green]sdist[/] {sdist}")
    return 0


def _cmd_site(args: argparse.Namespace) -> int:
    from ci import index, proc

    if not args.manifests or not args.base_url:
        raise UsageError("--site needs --manifests and --base-url", args.site,
                         "pass the folder of downloaded release-manifest.json files and the releases' download URL")
    found = sorted(Path(args.manifests).rglob(MANIFEST))
    if not found:
        raise UsageError("no release manifest found", args.manifests, f"download each release's {MANIFEST} there")
    manifests = [Manifest.from_json(p.read_text(), p) for p in found]
    site = Path(args.site)
    if site.exists():
        shutil.rmtree(site)
    pages = index.write_site(site, site_index(manifests, args.base_url))
    proc.console.print(f"[green]index site[/] {site}: {len(manifests)} releases, {len(pages)} pages")
    return 0
