"""Two clean builds of one commit, from two clones in different paths, must give the same bytes.

``python -m ci reproduce [--container] [selection]`` clones the project's repository twice (the second
path has a space and non-ASCII characters), builds the same target in each with an empty build folder
(and, for container builds, no compiler cache), and compares the wheels' SHA-256. When they differ it
says which files of the wheel differ and, for libraries, which ELF sections; ``diffoscope`` runs too
when it is on PATH.

Host builds compile in the farm's cache (``<cache>/build/<project>``), not in the checkout, so the
checkout's path never reaches the compiler; container builds compile in ``/project``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ci import proc
from ci.errors import CommandFailed, UsageError
from ci.log import log
from ci.universe.project import FARM_ROOT
from ci.universe.targets import Target


@dataclasses.dataclass(frozen=True)
class Built:
    label: str
    wheel: Path
    sha256: str
    seconds: float


def git(root: Path, *args: str) -> str:
    return proc.run(["git", *args], cwd=root, capture=True, log=False).stdout.strip()


def repository_of(project_root: Path) -> tuple[Path, Path, str]:
    """(repository top, project folder inside it, HEAD commit); the project must be in git."""
    out = proc.run(["git", "rev-parse", "--show-toplevel"], cwd=project_root, capture=True, check=False, log=False)
    if out.returncode != 0:
        raise UsageError("reproduce clones the project's git repository, and this project is not in one",
                         project_root, "commit the project to git first")
    top = Path(out.stdout.strip()).resolve()
    commit = git(top, "rev-parse", "HEAD")
    if git(top, "status", "--porcelain", "--untracked-files=no", "--", str(project_root)):
        log.warn(f"uncommitted changes are not in the clones; reproducing commit {commit[:12]}")
    return top, project_root.resolve().relative_to(top), commit


def clone_at(top: Path, commit: str, dest: Path) -> Path:
    """A clone of the repository ``top`` at ``commit`` in ``dest`` (no hard links: the checkout is never touched);
    the builds of reproduce and the benchmarks run in such clones."""
    proc.run(["git", "clone", "--quiet", "--no-hardlinks", str(top), str(dest)])
    proc.run(["git", "-C", str(dest), "checkout", "--quiet", commit])
    return dest


def section_digests(path: Path) -> dict[str, str]:
    try:
        with path.open("rb") as fh:
            elf = ELFFile(fh)
            return {s.name: hashlib.sha256(s.data()).hexdigest()[:16] for s in elf.iter_sections()
                    if s.header["sh_type"] != "SHT_NOBITS"}
    except ELFError:
        return {}


def explain(first: Path, second: Path, folder: Path) -> list[str]:
    """What differs between two wheels: files, and for ELF files their sections."""
    lines: list[str] = []
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(second) as b:
        names = sorted(set(a.namelist()) | set(b.namelist()))
        for name in names:
            if name not in a.namelist() or name not in b.namelist():
                lines.append(f"{name}: only in {'the first' if name in a.namelist() else 'the second'} wheel")
                continue
            da, db = a.read(name), b.read(name)
            if da == db:
                continue
            lines.append(f"{name}: differs ({len(da)} vs {len(db)} bytes)")
            pa, pb = folder / "a" / name, folder / "b" / name
            for path, data in ((pa, da), (pb, db)):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            sa, sb = section_digests(pa), section_digests(pb)
            for section in sorted(set(sa) | set(sb)):
                if sa.get(section) != sb.get(section):
                    lines.append(f"    section {section or '(null)'} differs")
        if a.namelist() != b.namelist():
            lines.append("the archives list their files in different orders")
    diffoscope = proc.which("diffoscope")
    if diffoscope:
        report = folder / "diffoscope.txt"
        proc.run([diffoscope, "--text", str(report), str(first), str(second)], check=False)
        lines.append(f"diffoscope's report: {report}")
    return lines


def build_once(target: Target, clone_root: Path, label: str, *, container: bool, build_dir: Path, wheelhouse: Path,
               base_image: str | None) -> Built:
    project_dir = clone_root
    work = build_dir / target.id
    shutil.rmtree(work, ignore_errors=True)  # a clean build: no objects of the previous one
    command = "build-cuda" if container else "build"
    cmd = [sys.executable, "-m", "ci", command, "--project", str(project_dir), "--target", target.id,
           "--arch-list", target.cell.arch_list, "--wheelhouse", str(wheelhouse), "--build-dir", str(build_dir),
           *(["--base-image", base_image] if base_image else [])]
    env = {"FARM_CCACHE": "off", "PYTHONPATH": str(FARM_ROOT)}
    started = time.monotonic()
    proc.run(cmd, env=env, what=f"the {label} build failed", hint="its output is above")
    seconds = time.monotonic() - started
    report = json.loads((wheelhouse / target.id / "report.json").read_text())
    return Built(label, wheelhouse / target.id / report["wheel"], report["sha256"], seconds)


def reproduce(target: Target, *, container: bool, base_image: str | None, keep: bool) -> list[Built]:
    top, inside, commit = repository_of(target.project.root)
    folder = Path(tempfile.mkdtemp(prefix="farm-reproduce-"))
    try:
        builds: list[Built] = []
        build_dir = folder / "build"
        for label, clone in (("first", folder / "first clone"), ("second", folder / "second clone é ü")):
            clone_at(top, commit, clone)
            builds.append(build_once(target, clone / inside, label, container=container, build_dir=build_dir,
                                     wheelhouse=folder / f"wheelhouse-{label}", base_image=base_image))
        first, second = builds
        for built in builds:
            log.result(f"{built.label}: {built.wheel.name} sha256 {built.sha256} ({built.seconds:.0f} s)")
        if first.sha256 != second.sha256:
            details = explain(first.wheel, second.wheel, folder / "diff")
            keep = True
            raise CommandFailed("the two builds of one commit differ", f"{first.sha256[:12]} != {second.sha256[:12]}",
                                f"see what differs above; the builds are kept in {folder}",
                                details="\n".join(details))
        log.result(f"[green]reproducible[/]: both builds of {commit[:12]} give {first.sha256}", markup=True)
        return builds
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            log.info(f"kept {folder}")
