"""The publishing plan: the built wheels a release takes (each with the build report that audited it), and
which file goes where: PyPI or not, which variant's index; a release pip could misread is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.errors import UsageError
from ci.release.manifest import Manifest, ReleaseFile, index_name
from ci.universe import shapes

if TYPE_CHECKING:
    from ci.universe.project import ProjectConfig
    from ci.universe.targets import Target


@dataclasses.dataclass(frozen=True)
class Built:
    """A target's audited wheel and the report its build wrote."""

    target: Target
    wheel: Path
    report: Mapping[str, Any]


def pypi_variant(config: ProjectConfig) -> str:
    from ci.universe import targets

    return targets.pypi_variant(config)


def pypi_target_ids(config: ProjectConfig) -> frozenset[str]:
    """The targets whose wheels PyPI may get: the release target's cell and torch, on every OS."""
    from ci.universe import targets

    default = targets.default_target(config)
    return frozenset(t.id for os_name in ("linux", "windows") for t in targets.platform_targets(config, os_name)
                     if t.cell.name == default.cell.name and t.torch == default.torch)


def all_targets(config: ProjectConfig, os_names: Iterable[str] = ("linux", "windows")) -> dict[str, Target]:
    from ci.universe import targets

    return {t.id: t for os_name in os_names for t in targets.platform_targets(config, os_name)}


def find_built(folder: Path, wanted: Mapping[str, Target], *, require_all: bool = True) -> list[Built]:
    """The built wheels under ``folder``: ``<target-id>/`` (a wheelhouse) or ``wheel-<target-id>/`` (downloaded
    workflow artifacts), each holding one wheel and its ``report.json``."""
    from ci.builds import report

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


def reusable(folder: Path, wanted: Mapping[str, Target], say: Callable[[str], None]) -> list[str]:
    """``--reuse-wheels``: the ids of ``wanted`` whose audited wheel and report in ``folder`` still verify
    (:func:`verify_built`); each one that does not is said, with why, and is built again."""
    ready = []
    for item in find_built(folder, wanted, require_all=False):
        try:
            verify_built(item)
            ready.append(item.target.id)
        except UsageError as exc:
            say(f"[yellow]rebuilding[/] {item.target.id}: {exc.line()}")
    return ready


def audit_again(built: Sequence[Built], enabled: bool = True) -> dict[str, dict[str, str]]:
    """Each wheel's build-time audit (``verify_built``) and, for Linux wheels when ``enabled``, the audit run again in
    the assemble job: what is published is held to the release's glibc floor (``FARM_GLIBC_FLOOR`` names another).
    A failed audit raises before anything is written. The release's and a dispatch's assemble share this."""
    from ci.audit import glibc_floor, wheel_audit
    from ci.toolchain import toolkit
    from ci.universe import matrix

    checks: dict[str, dict[str, str]] = {}
    cuobjdump = None
    for item in built:
        at_build = verify_built(item)
        if item.target.os == "linux" and enabled:
            cuobjdump = cuobjdump or toolkit.ensure_cuobjdump()
            floor = glibc_floor.context_floor() or matrix.RELEASE_FLOOR
            result = wheel_audit.audit_wheel(item.wheel, item.target, cuobjdump, glibc_floor=floor)
            wheel_audit.raise_for_failures(result)
            at_build += f"; ok: {len(result.checks)} checks again in the assemble job"
        checks[item.wheel.name] = {"audit": at_build}
    return checks


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
        public, local = wheelmeta.version_parts(item.wheel.name)
        versions[item.wheel.name] = public
        on_pypi, why = _place(item, local, pypi_ids, variant)
        files.append(_wheel_file(item, on_pypi, why, (checks or {}).get(item.wheel.name, {})))
    if sdist is not None:
        base = sdist.name.removesuffix(".tar.gz")
        public = base.rpartition("-")[2]
        versions[sdist.name] = public
        files.append(ReleaseFile(name=sdist.name, sha256=wheelmeta.sha256_file(sdist), size=sdist.stat().st_size,
                                 kind="sdist", pypi=True, pypi_reason="the source distribution"))
    version = _one_version(versions, tag)
    check_unique_names(files)
    check_label_order(files)
    return Manifest(project=config.name, version=version, tag=tag, commit=commit, pypi_variant=variant,
                    files=tuple(sorted(files, key=lambda f: f.name)))


def _place(item: Built, local: str, pypi_ids: frozenset[str], variant: str) -> tuple[bool, str]:
    """Whether the wheel goes to PyPI, and why (or why not): only the PyPI variant's wheels without a local
    version; another variant's wheel without a local label is refused (pip would take it for PyPI's)."""
    target = item.target
    if target.id not in pypi_ids:
        if target.variant != variant and not local:
            raise UsageError(
                f"the {target.variant} wheel has no local version, so pip would take it for PyPI's "
                f"{variant} build", item.wheel.name,
                f"give wheels of variants other than {variant} a local label (+{target.variant}); "
                "see docs/releasing.md 'Variants and local versions'")
        return False, f"variant {target.variant} (PyPI has {variant}): GitHub Release and index only"
    if local:
        return False, f"local version +{local}: PyPI refuses local versions; GitHub Release and index"
    return True, f"the PyPI variant {variant}"


def _wheel_file(item: Built, on_pypi: bool, why: str, checks: Mapping[str, str]) -> ReleaseFile:
    """The manifest's record of a built wheel."""
    from ci import wheelmeta

    target = item.target
    parsed = wheelmeta.parse_name(item.wheel)
    return ReleaseFile(
        name=item.wheel.name, sha256=wheelmeta.sha256_file(item.wheel), size=item.wheel.stat().st_size,
        kind="wheel", pypi=on_pypi, pypi_reason=why, target=target.id, os=target.os, variant=target.variant,
        cuda=target.cell.cuda, torch=target.torch, python=target.oldest_python, tags=parsed.tags,
        requires_python=_requires_python(item.wheel), checks=tuple(sorted(checks.items())),
        index=index_name(target.project.abi, target.variant, target.torch), abi=target.project.abi,
        metadata_sha256=hashlib.sha256(wheelmeta.metadata_bytes(item.wheel)).hexdigest(),
    )


def _one_version(versions: Mapping[str, str], tag: str | None) -> str:
    """The release's version: every file's, and the tag's when there is one."""
    distinct = sorted(set(versions.values()))
    if len(distinct) != 1:
        raise UsageError("the release's files have different versions", ", ".join(
            f"{n}: {v}" for n, v in sorted(versions.items())), "build every target from one commit")
    version = distinct[0]
    if tag is not None and tag.removeprefix("v") != version:
        raise UsageError("the tag does not name the version of the wheels", f"{tag} vs {version}",
                         f"tag the release v{version}, or bump [project] version")
    return version


def check_unique_names(files: Iterable[ReleaseFile]) -> None:
    """Refuse two targets whose wheels share a file name (a GitHub Release is one flat folder)."""
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


def check_label_order(files: Iterable[ReleaseFile]) -> None:
    """Refuse classic wheels whose versions sort against their torch releases: pip takes the highest version
    it may install and changes torch to fit it, so with ``+pt29cu124`` above ``+pt210cu124`` (PEP 440 compares
    that segment as a string) a torch 2.10 user would get torch 2.9. The farm's labels (``+pt2.10.cu124``,
    ci/wheelmeta.py classic_label) put the torch minor in a numeric segment of its own."""
    from ci import wheelmeta

    groups: dict[tuple[str | None, tuple[str, ...]], list[ReleaseFile]] = {}
    for item in files:
        if item.kind == "wheel" and item.abi == "classic" and item.torch:
            groups.setdefault((item.variant, item.tags), []).append(item)
    for group in groups.values():
        by_torch = sorted(group, key=lambda f: shapes.version_key(str(f.torch)))
        for older, newer in itertools.pairwise(by_torch):
            if shapes.minor_of(str(older.torch)) == shapes.minor_of(str(newer.torch)):
                continue
            if wheelmeta.parse_name(Path(older.name)).version >= wheelmeta.parse_name(Path(newer.name)).version:
                raise UsageError(
                    "classic wheels' local labels sort against their torch releases",
                    f"+{wheelmeta.version_parts(older.name)[1]} (torch {older.torch}) sorts above "
                    f"+{wheelmeta.version_parts(newer.name)[1]} (torch {newer.torch})",
                    "pip takes the highest label and changes torch to fit it: label classic builds "
                    "+pt2.10.cu124 (ci/wheelmeta.py classic_label), whose torch minor PEP 440 compares as a number")
