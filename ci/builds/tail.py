"""Where builds write, and the tail every build shares: staging -> repair -> final metadata -> audit ->
atomic move -> report.

Host builds, container builds and Windows builds differ in how they compile and
repair; what happens to the wheel afterwards is this module, once. A wheel
reaches ``<wheelhouse>/<target-id>/`` only when every audit check passed; a
failed or interrupted build leaves nothing there (its staging folder is
removed, and a staging folder whose process is gone is removed by the next
build of that target).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ci import fsutil, settings, toolenv, wheelmeta
from ci.audit import describe, gpu_code
from ci.audit.checks import AuditResult, Check
from ci.audit.wheel_audit import raise_for_failures
from ci.builds import abi3, arch_flags, debug_split, report
from ci.builds.failure import pure
from ci.errors import CommandFailed
from ci.log import log
from ci.testing import gil_probe
from ci.universe.targets import Target


@dataclasses.dataclass(frozen=True)
class Outputs:
    """The folders a build writes to, resolved once (option, else environment variable, else the project)."""

    wheelhouse: Path
    build_root: Path

    @classmethod
    def resolve(cls, project_root: Path, wheelhouse: str | None = None, build_dir: str | None = None,
                name: str | None = None) -> Outputs:
        """Wheels go to the project (``<project>/wheelhouse``); builds happen in the farm's cache
        (``<cache>/build/<project>``), not the checkout: a read-only checkout builds, and every checkout of a
        project compiles in the same place, so its objects (and the wheel's bytes) do not depend on where
        the checkout lives."""
        default_build = toolenv.cache_root() / "build" / (name or project_root.name)
        return cls(
            wheelhouse=settings.path_option(wheelhouse, "FARM_WHEELHOUSE", project_root / "wheelhouse"),
            build_root=settings.path_option(build_dir, "FARM_BUILD_DIR", default_build),
        )

    def check_writable(self) -> None:
        fsutil.writable_dir(self.build_root, "build folder", "--build-dir", "FARM_BUILD_DIR")
        fsutil.writable_dir(self.wheelhouse, "wheelhouse", "--wheelhouse", "FARM_WHEELHOUSE")

    def target_dir(self, target: Target) -> Path:
        return self.wheelhouse / target.id

    def work_dir(self, target: Target) -> Path:
        """Sources and objects of the target's builds, kept for incremental rebuilds."""
        return self.build_root / target.id

    def lock(self, target: Target) -> Path:
        return self.build_root / "locks" / f"{target.id}.lock"

    def staging_root(self) -> Path:
        return self.build_root / "staging"


@contextmanager
def no_empty_wheelhouse(outputs: Outputs) -> Iterator[None]:
    """A wheelhouse this build creates is removed again when the build fails or is interrupted and left it
    empty: a failed first build leaves no empty folder behind."""
    created = not outputs.wheelhouse.exists()
    try:
        yield
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                outputs.wheelhouse.rmdir()  # only when empty
        raise


def find_wheel(outputs: Outputs, target: Target) -> Path | None:
    wheels = sorted(outputs.target_dir(target).glob("*.whl"), key=lambda p: p.stat().st_mtime)
    return wheels[-1] if wheels else None


def find_built(outputs: Outputs, chosen: Sequence[Target]) -> tuple[Target, Path | None]:
    """The first of ``chosen`` (the targets a command line selects, best first) whose wheel the wheelhouse holds,
    with that wheel; none built: the first target and None. ``test`` without ``--python`` then tests the cp312
    wheel that was built rather than asking for the cp311 one that was not."""
    for target in chosen:
        wheel = find_wheel(outputs, target)
        if wheel is not None:
            return target, wheel
    return chosen[0], None


@contextmanager
def staging(outputs: Outputs, target: Target) -> Iterator[Path]:
    """A staging folder for one build of ``target``, removed however the build ends."""
    root = outputs.staging_root()
    root.mkdir(parents=True, exist_ok=True)
    for stale in fsutil.stale_staging(root):
        log.note("removing", f"the staging folder of an interrupted build: {stale}")
        shutil.rmtree(stale, ignore_errors=True)
    folder = root / f"{target.id}-pid{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def one_wheel(folder: Path, what: str) -> Path:
    found = sorted(folder.glob("*.whl"))
    if len(found) != 1:
        raise CommandFailed(f"{what} did not produce exactly one wheel", ", ".join(p.name for p in found) or "none",
                            "its output is above")
    return found[0]


def publish_debug_files(staged: Path, dest: Path) -> None:
    """The wheel's debug files (``<build-id>.debug``) into ``dest``, which then holds those of this build only."""
    current = {p.name for p in staged.glob("*.debug")} if staged.is_dir() else set()
    for name in sorted(current):
        fsutil.publish_file(staged / name, dest / name)
    if dest.is_dir():
        for old in dest.glob("*.debug"):
            if old.name not in current:
                old.unlink()


def place(final: Path, stage: Path, dest_dir: Path, target: Target) -> Path:
    """Move the audited wheel into the target's folder of the wheelhouse, in place of an earlier build's, with its
    debug files (``debug/``)."""
    published = fsutil.publish_file(final, dest_dir / final.name)
    for old in dest_dir.glob("*.whl"):
        if old.name != published.name:
            log.note("replaced", f"{old.name} (an earlier build of {target.id})")
            old.unlink()
    publish_debug_files(stage / debug_split.DEBUG_FOLDER, dest_dir / debug_split.DEBUG_FOLDER)
    return published


def with_gil_import(result: AuditResult, target: Target, output: str) -> AuditResult:
    """A free-threaded wheel's import test in the build (the container's, ci/builds/free_threaded_cibw.py): its line
    said, and kept in the report as the check ``gil-import`` (a warning where the import turned the GIL back on)."""
    gil = gil_probe.parse(output) if target.free_threaded else None
    if gil is None:
        return result
    log.info(gil.line())
    return dataclasses.replace(result, checks=(*result.checks, Check("gil-import", True, gil.line(),
                                                                     warn=not gil.stayed_disabled)))


def publish(
    target: Target,
    built: Path,
    stage: Path,
    outputs: Outputs,
    *,
    repair: Callable[[Path, Path], Path],
    audit: Callable[[Path, Target], AuditResult],
    mode: str,
    nvcc: str | None,
    started: float,
    image: str | None = None,
    epoch: str | None = None,
    cuobjdump: Path | None = None,
    build_output: Path | None = None,
) -> report.BuildReport:
    """Refuse a wheel with no compiled library (``failure/pure.py``: the variables its ``ext_modules`` hang on),
    split the libraries' debug info off (ci/builds/debug_split.py; ``strip-debug``), repair, describe
    (ci/audit/describe.py: the torch range from the binary, the coverage file), set the final metadata, audit,
    move into the wheelhouse (the debug files into its ``debug/``), write the report. ``audit`` is given the
    target with the architectures the wheel must hold (``arch_flags.audited_target``: ``project-arch-flags``) read
    from the build's output in ``build_output``, whose nvcc lines also name the flags a failed ``sass``/``ptx``
    check was given instead."""
    pure.check_wheel(built, target.project.root, cpu=target.cpu)
    output = arch_flags.read_log(build_output) if build_output is not None else ""
    split = None
    if target.project.strip_debug:
        split = debug_split.split_wheel(built, stage / "stripped", stage / debug_split.DEBUG_FOLDER, target.arch)
        log.note("debug info", split.summary(), style="bold")
        built = split.wheel
    with log.stage("repair"):
        repaired = repair(built, stage / "repaired")
    described = describe.describe_wheel(repaired, target, cuobjdump)
    log.note("torch requirement", described.note, style="bold")
    final = wheelmeta.rewrite(repaired, stage / "final", local_version=target.local_version,
                              torch_pin=described.requirement, epoch=int(epoch) if epoch else None,
                              dist_info_files={describe.FILE: described.document})
    with log.stage("audit"):
        result, fix = gpu_code.name_arch_flags(audit(final, arch_flags.audited_target(target, output)),
                                               arch_flags.arch_flags_advice(output, target))
        raise_for_failures(result, fix)
    floor_note = abi3.mismatch(target, result.tags)
    if floor_note:
        log.warn(floor_note)
    result = with_gil_import(result, target, output)
    dest_dir = outputs.target_dir(target)
    digest = wheelmeta.sha256_file(final)
    result = dataclasses.replace(result, wheel=place(final, stage, dest_dir, target))
    rep = report.make_report(
        target.id, target.project.name, result, sha256=digest, mode=mode, nvcc=nvcc, torch=target.torch,
        python=target.python, seconds=time.monotonic() - started, image=image,
        debug_split=split.report() if split is not None else None,
        abi3_floor=abi3.built_floor(result.tags) if target.abi3 else None,
        archs_from=None if target.cpu else arch_flags.whose_list(target),
    )
    report.write_report(rep, dest_dir)
    return rep
