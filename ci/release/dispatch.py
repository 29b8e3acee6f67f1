"""What ``dispatch.yml`` (ci/gha/dispatch_jobs.py) runs: ``python -m ci release dispatch-plan``,
``release dispatch-assemble ARTIFACTS`` and ``release dispatch-merge RELEASE``
(``ci/commands/release/dispatch.py``; the old spellings ``workflows --dispatch-plan`` and so on still work for one
release).

* ``dispatch-plan``: the workflow's inputs (``FARM_DISPATCH_TARGETS``, ``_TORCH``, ``_CUDA``, ``_PYTHON``,
  ``_OS``, ``_PUBLISH``) resolved with the farm's own selection (``selection.select``, what ``python -m ci matrix``
  runs, per OS and, for filters, per Linux architecture) into ids of targets the workflows build; writes
  ``targets=<JSON list>`` to ``GITHUB_OUTPUT``. Refused, with one ``error:`` line and exit 2: no input at all; an id
  the workflows do not build (a local stand-in included); a filter that selects nothing; a named target the
  filters leave out; a build the workflows make otherwise (a stable-ABI target asked for with another torch);
  ``publish`` anywhere but on a ``v*`` tag.
* ``dispatch-assemble``: the selected wheels (``FARM_DISPATCH_SELECTED``, the plan's list) out of the downloaded
  artifacts, each report checked, the Linux wheels audited again, into a release folder (``--out``) with its
  indexes, SHA256SUMS and manifest, every index installed from with pip: what ``release assemble`` does for
  every target, for these (``ci/commands/release/dispatch.py`` requires them all).
* ``dispatch-merge``: that folder merged into the published release's manifest and SHA256SUMS (``--published``,
  downloaded from the tag's GitHub Release) in ``--out``: ``new/`` (the wheels the release lacks),
  ``release-manifest.json`` and ``SHA256SUMS`` (every file of the release), ``ATTESTED-SUMS`` (what gets build
  provenance: the new wheels and the manifest). A file the release has with the same SHA-256 is left as it is;
  one of the same name with other bytes is refused, as is another project, version or tag.

This module's top is standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import TargetError, UsageError
from ci.log import log
from ci.universe import selection
from ci.universe.selection import Selection, select

if TYPE_CHECKING:
    from ci.release.manifest import Manifest
    from ci.universe.project import ProjectConfig
    from ci.universe.targets import Target

OSES = ("all", "linux", "windows")
SELECTED_ENV = "FARM_DISPATCH_SELECTED"
NEW = "new"
ATTESTED = "ATTESTED-SUMS"
NOT_ON_PYPI = "added to the GitHub Release by dispatch.yml, which never uploads to PyPI"


# --- the plan ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Request:
    """The workflow's inputs."""

    ids: tuple[str, ...] = ()
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    os: str = "all"
    publish: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Request:
        def value(name: str) -> str | None:
            return env.get(selection.PLAN_ENV[name], "").strip() or None

        os_name = value("os") or "all"
        if os_name not in OSES:
            raise UsageError("unknown os input", os_name, f"pick one of {', '.join(OSES)}")
        publish = (value("publish") or "false").lower()
        if publish not in ("true", "false"):
            raise UsageError("the publish input is not a boolean", publish, "pass true or false")
        ids = tuple(dict.fromkeys(i for i in re.split(r"[\s,]+", value("targets") or "") if i))
        return cls(ids, value("torch"), value("cuda"), value("python"), os_name, publish == "true")

    @property
    def filters(self) -> str:
        named = [f"{k} {v}" for k, v in (("torch", self.torch), ("CUDA", self.cuda), ("Python", self.python)) if v]
        return ", ".join([*named, f"OS {self.os}"])

    @property
    def empty(self) -> bool:
        return not (self.ids or self.torch or self.cuda or self.python) and self.os == "all"


def workflow_targets(config: ProjectConfig) -> tuple[Target, ...]:
    """The targets the workflows have jobs for (wheels.yml: every architecture, no local stand-in)."""
    from ci.universe import targets

    linux, windows = targets.workflow_targets(config)
    return (*linux, *windows)


def _not_built(config: ProjectConfig, target_id: str, known: Sequence[Target]) -> UsageError:
    from ci.universe import targets

    for target in known:
        stand_in = targets.stand_in(target)
        if stand_in is not None and stand_in.id == target_id:
            return UsageError("a local stand-in, which no workflow builds", target_id,
                              f"GitHub builds {target.id} (CUDA {target.cell.cuda}) in its place: ask for that one")
    return TargetError(f"{config.name}'s workflows build no such target", target_id,
                               f"they build {', '.join(t.id for t in known)} (python -m ci matrix --os all)")


def _select(config: ProjectConfig, request: Request, os_name: str, named: tuple[str, ...],
            known: Sequence[Target]) -> tuple[list[Target], list[UsageError]]:
    """The farm's selection on one OS: the named ids, or the filters on each architecture the workflows build."""

    if not (named or request.torch or request.cuda or request.python):
        return [t for t in known if t.os == os_name], []
    arches: tuple[str | None, ...] = (None,)
    if not named and os_name == "linux":
        arches = tuple(dict.fromkeys(t.arch for t in known if t.os == os_name))
    found: list[Target] = []
    refusals: list[UsageError] = []
    for arch in arches:
        selection = Selection(target_ids=named, cuda=request.cuda, torch=request.torch,
                                      python=request.python, arch=arch)
        try:
            found += select(config, selection, os_name)
        except UsageError as exc:  # TargetError, or an unknown CUDA or torch version
            refusals.append(exc)
    return found, refusals


def plan(config: ProjectConfig, request: Request, env: Mapping[str, str]) -> tuple[Target, ...]:
    """The targets ``request`` selects, in the workflows' order (never empty: that is an error); ``env``: the
    run's GITHUB_REF_* (the environment the entry read)."""

    if request.publish and not (env.get("GITHUB_REF_TYPE") == "tag" and env.get("GITHUB_REF_NAME", "").startswith("v")):
        raise UsageError("publishing needs a release tag", env.get("GITHUB_REF_NAME") or "no ref",
                         "run the workflow on the v<version> tag whose GitHub Release gets the wheels, or leave "
                         "publish off")
    if request.empty:
        raise UsageError("no targets and no filters given", "targets, torch, cuda, python, os",
                         "name target ids (python -m ci matrix --os all lists them) or a filter; the release "
                         "workflow builds every target")
    known = workflow_targets(config)
    by_id = {t.id: t for t in known}
    for target_id in request.ids:
        if target_id not in by_id:
            raise _not_built(config, target_id, known)
    chosen: dict[str, Target] = {}
    refusals: list[UsageError] = []
    for os_name in ("linux", "windows") if request.os == "all" else (request.os,):
        named = tuple(i for i in request.ids if by_id[i].os == os_name)
        if request.ids and not named:
            continue
        found, refused = _select(config, request, os_name, named, known)
        refusals += refused
        for target in found:
            chosen.setdefault(target.id, target)
    for target in chosen.values():
        built = by_id.get(target.id)
        if built is None:
            raise _not_built(config, target.id, known)
        mine, theirs = target.as_dict(), built.as_dict()
        differs = next((k for k in mine if mine[k] != theirs.get(k)), None)
        if differs is not None:
            raise UsageError(f"the workflows build {target.id} with {differs} {theirs[differs]}",
                             f"{differs} {mine[differs]} asked", "leave that filter empty or pick the one they build "
                             "(python -m ci matrix --os all)")
    left_out = [i for i in request.ids if i not in chosen]
    if left_out:
        raise TargetError("the filters leave out a named target", f"{left_out[0]}: {request.filters}",
                                  "drop the filter, or the target")
    if not chosen:
        if refusals:
            raise refusals[0]
        raise TargetError("the inputs select no target", request.filters,
                                  "python -m ci matrix --os all lists the targets with their torch, CUDA and Python")
    return tuple(t for t in known if t.id in chosen)


def write_plan(chosen: Sequence[Target], env: Mapping[str, str]) -> None:
    """``targets=<JSON list>`` for the jobs; the list in the log and the run's summary."""

    ids = [t.id for t in chosen]
    if env.get("GITHUB_OUTPUT"):
        with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
            fh.write(f"targets={json.dumps(ids)}\n")
    if env.get("GITHUB_STEP_SUMMARY"):
        with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
            fh.write(f"### {len(ids)} targets\n\n" + "".join(f"- `{i}`\n" for i in ids))
    log.progress.print(f"[green]{len(ids)} targets[/]:")
    print("\n".join(ids), flush=True)


def selected_ids(text: str) -> list[str]:
    """The plan's JSON list of ids (``FARM_DISPATCH_SELECTED``)."""
    try:
        ids = json.loads(text)
    except ValueError:
        ids = None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise UsageError(f"{SELECTED_ENV} is not the plan's list of target ids", text[:80] or "empty",
                         "pass needs.plan.outputs.targets (python -m ci release dispatch-plan writes it)")
    return ids


# --- assemble and merge --------------------------------------------------------------------------------------


def assemble(config: ProjectConfig, artifacts: Path, ids: Sequence[str], out: Path, tag: str | None, *,
             reaudit: bool = True, commit: str | None = None) -> Manifest:
    """The release folder of the selected targets, checked as ``release assemble`` checks a release's
    (``reaudit``: the Linux wheels audited again, as there; the tests' fake wheels are not; ``commit``: the
    run's GITHUB_SHA)."""
    from ci.release.assembly import prepare_out, verify_release, write_release
    from ci.release.install_checks import check_extra_index, check_index_install
    from ci.release.install_lines.pip_check import check_install_lines
    from ci.release.manifest import record_checks, record_install_lines, write_manifest
    from ci.release.plan import audit_again, find_built
    from ci.release.plan import plan as release_plan

    known = workflow_targets(config)
    by_id = {t.id: t for t in known}
    for target_id in ids:
        if target_id not in by_id:
            raise _not_built(config, target_id, known)
    built = find_built(artifacts, {i: by_id[i] for i in ids})
    checks = audit_again(built, reaudit)
    manifest = release_plan(config, built, None, tag=tag, commit=commit, checks=checks)
    prepare_out(out)
    write_release(out, manifest, {item.wheel.name: item.wheel for item in built})
    manifest = record_checks(manifest, check_index_install(out, manifest), "index-install")
    manifest = record_checks(manifest, check_extra_index(out, manifest), "extra-index")
    manifest = record_install_lines(manifest, check_install_lines(out, manifest))
    write_manifest(out, manifest)
    verify_release(out)
    log.progress.print(f"[green]assembled[/] {len(built)} wheels of {config.name} {manifest.version} -> {out}")
    return manifest


def merge(release: Path, published: Path, out: Path) -> list[str]:
    """``release`` (a release folder of some targets) added to the published release (``published``: its
    release-manifest.json and SHA256SUMS) in ``out``; the names of the files the published release lacked."""
    import shutil

    from ci import fsutil, wheelmeta
    from ci.release.assembly import verify_release
    from ci.release.index import METADATA_SUFFIX
    from ci.release.manifest import MANIFEST, SUMS, Manifest, parse_sums, sums_text
    from ci.release.plan import check_label_order

    (release / "pypi").mkdir(exist_ok=True)  # an artifact keeps no empty folder
    new = verify_release(release)
    for name in (MANIFEST, SUMS):
        if not (published / name).is_file():
            raise UsageError(f"the published release has no {name}", published / name,
                             "only a release the release workflow made can be added to")
    old = Manifest.from_json((published / MANIFEST).read_text(encoding="utf-8"), published / MANIFEST)
    old_sums = parse_sums((published / SUMS).read_text(encoding="utf-8"))
    for field in ("project", "version", "tag", "pypi_variant"):
        if getattr(old, field) != getattr(new, field):
            raise UsageError(f"the wheels are of another {field} than the release", f"{getattr(new, field)} vs "
                             f"{getattr(old, field)}", "build them from the release's tag")
    for item in old.files:
        if old_sums.get(item.name) != item.sha256:
            raise UsageError("the published manifest and SHA256SUMS disagree", item.name,
                             "repair the release by hand (or publish it again with the release workflow)")
    published_files = {f.name: f for f in old.files}
    added = []
    for item in new.files:
        before = published_files.get(item.name)
        if before is not None and before.sha256 != item.sha256:
            raise UsageError("the release has a file of that name with other bytes", item.name,
                             "a published file is never replaced (pip caches and lock files hold its hash): "
                             "release a new version")
        if before is None:
            # PyPI gets the release workflow's files only: a file added here is on the GitHub Release and its index.
            added.append(dataclasses.replace(item, pypi=False, pypi_reason=NOT_ON_PYPI) if item.pypi else item)
    files = sorted((*old.files, *added), key=lambda f: f.name)
    check_label_order(files)
    merged = dataclasses.replace(old, files=tuple(files))
    if out.exists():
        if any(out.iterdir()) and not (out / MANIFEST).is_file():
            raise UsageError("the merge folder exists and is not an earlier merge", out, "pass a new folder with --out")
        shutil.rmtree(out)
    (out / NEW).mkdir(parents=True)
    # Each added wheel's METADATA goes beside it (PEP 658: the indexes announce <wheel>.metadata).
    new_files = [(f.name, f.sha256) for f in added]
    new_files += [(f.name + METADATA_SUFFIX, f.metadata_sha256) for f in added if f.metadata_sha256]
    for name, _ in new_files:
        shutil.copy2(release / "assets" / name, out / NEW / name)
    fsutil.atomic_write_text(out / MANIFEST, merged.to_json())
    manifest_digest = wheelmeta.sha256_file(out / MANIFEST)
    sums = {**{k: v for k, v in old_sums.items() if k != MANIFEST}, **dict(new_files), MANIFEST: manifest_digest}
    fsutil.atomic_write_text(out / SUMS, sums_text(sums.items()))
    fsutil.atomic_write_text(out / ATTESTED, sums_text([*new_files, (MANIFEST, manifest_digest)]))
    return [f.name for f in added]
