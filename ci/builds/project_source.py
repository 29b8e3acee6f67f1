"""The project's source as every build sees it: its files, their copy into a target's work folder, the values of
the build-env placeholders, the commit and its time.

* :func:`project_files`: what git knows (tracked and untracked-not-ignored files), or every file but build outputs
  outside git; never the farm's own output folders when they sit inside the project.
* :func:`git_files`: the same with every initialised git submodule's files (nested ones too); a submodule whose
  folder is empty stops the build before anything compiles (:func:`check_submodules_present`).
* :func:`sync_source`: the copy a build compiles (host, container and Windows builds), rewriting only what changed.
* :func:`git_commit`: the project's commit (``<sha>-dirty`` with uncommitted changes to tracked files), the one
  answer for the build-env placeholder ``{git_commit}`` and the release manifest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from ci import fsutil, proc, settings
from ci.errors import UsageError
from ci.universe.targets import Target

#: Folders never copied from a project outside git (build outputs, environments).
IGNORED = (".git", ".nox", ".venv", "build", "dist", "wheelhouse", "__pycache__", "test-results", "bench-results")


def project_files(root: Path, exclude: tuple[Path, ...] = ()) -> list[str]:
    """The project's source files, relative to ``root``: what git knows (tracked and untracked-not-ignored),
    never anything under ``exclude`` (the farm's own output folders, when they are inside the project)."""
    skip = tuple(str(p.resolve().relative_to(root.resolve())) + "/" for p in exclude
                 if p.resolve().is_relative_to(root.resolve()))
    return [f for f in _listed_files(root) if not f.startswith(skip)]


def _listed_files(root: Path) -> list[str]:
    inside = proc.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=root, capture=True, check=False, log=False)
    if inside.returncode == 0 and inside.stdout.strip() == "true":
        return sorted(git_files(root))
    check_submodules_present(root, gitmodules_paths(root))
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED and not d.endswith(".egg-info"))
        for name in names:
            if name.endswith((".so", ".pyd", ".o", ".whl")):
                continue
            files.append(str((Path(folder) / name).relative_to(root)))
    return sorted(files)


#: git's mode of a submodule's entry (a "gitlink": the commit of another repository) in its parent's index.
GITLINK_MODE = "160000"


def git_files(root: Path, under: str = "") -> list[str]:
    """What git lists in ``root`` (tracked, and untracked but not ignored), with every initialised submodule's files
    in place of its one gitlink entry, nested submodules too; a submodule whose folder is empty stops the listing
    (:func:`check_submodules_present`; ``under``: the submodule's folder in the top project, for that message).
    ``git ls-files --recurse-submodules`` is not used: it cannot list untracked
    files, which the build copies everywhere else."""
    listing = proc.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                       capture=True, log=False)
    staged = proc.run(["git", "ls-files", "-z", "--stage"], cwd=root, capture=True, log=False)
    # "<mode> <object> <stage>\t<path>": the gitlinks among the tracked entries.
    submodules = sorted({entry.split("\t", 1)[1] for entry in staged.stdout.split("\0")
                         if entry.startswith(GITLINK_MODE + " ") and "\t" in entry})
    check_submodules_present(root, submodules, under)
    files = [n for n in listing.stdout.split("\0") if n and (root / n).is_file() and n not in submodules]
    for sub in submodules:
        files += [f"{sub}/{name}" for name in git_files(root / sub, f"{under}{sub}/")]
    return files


def gitmodules_paths(root: Path) -> list[str]:
    """The folders ``.gitmodules`` names (``path = ...`` of each ``[submodule "..."]``), relative to ``root``."""
    try:
        text = (root / ".gitmodules").read_text(errors="replace")
    except OSError:
        return []
    found = re.findall(r"^\s*path\s*=\s*(.+?)\s*$", text, flags=re.MULTILINE)
    return [p.strip('"').rstrip("/") for p in found if p.strip('"')]


def check_submodules_present(root: Path, paths: list[str], under: str = "") -> None:
    """A submodule whose folder is missing or empty (a clone without ``--recursive``) stops the build here, before
    anything compiles: its headers would otherwise surface as a compiler's ``No such file or directory``."""
    for sub in paths:
        folder = root / sub
        if not folder.is_dir() or not any(folder.iterdir()):
            raise UsageError("a git submodule of the project is not checked out (its folder is empty)", under + sub,
                             "run `git submodule update --init --recursive` in the project's folder, then build "
                             "again")


def sync_source(root: Path, dest: Path, exclude: tuple[Path, ...] = ()) -> int:
    """Copy ``root``'s source files to ``dest``, rewriting only what changed in content; returns files copied.

    A changed file gets the current time, not its source's: another checkout's older file with other
    content must still be newer than the objects ninja built from the previous one.
    """
    dest.mkdir(parents=True, exist_ok=True)
    manifest = dest / ".farm-sources.json"
    before: set[str] = set(json.loads(manifest.read_text())) if manifest.is_file() else set()
    files = project_files(root, exclude)
    copied = 0
    for name in files:
        src, dst = root / name, dest / name
        data = src.read_bytes()
        try:
            if dst.stat().st_size == len(data) and dst.read_bytes() == data:
                continue
        except FileNotFoundError:
            pass
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        shutil.copymode(src, dst)
        copied += 1
    for gone in sorted(before - set(files)):
        (dest / gone).unlink(missing_ok=True)
    fsutil.atomic_write_text(manifest, json.dumps(files))
    return copied


def build_values(target: Target, nvcc_version: str | None) -> dict[str, str]:
    """Values for the placeholders of the project's build-env."""
    return {"cuda": target.cell.cuda, "cuda_major": str(target.cell.cuda_major), "nvcc_version": nvcc_version or "",
            "torch": target.torch, "arch_list": target.cell.arch_list, "python": target.python,
            "git_commit": git_commit(target.project.root) or "unknown"}


def source_date_epoch(root: Path) -> str | None:
    """The time of the project's last commit (reproducible archives), or SOURCE_DATE_EPOCH, or None."""
    explicit = settings.value("SOURCE_DATE_EPOCH") or ""
    if explicit:
        if not explicit.isdigit():
            raise UsageError("SOURCE_DATE_EPOCH is not a whole number of seconds", explicit,
                             "set it to a Unix time (git log -1 --format=%ct) or unset it")
        return explicit
    out = proc.run(["git", "log", "-1", "--format=%ct"], cwd=root, capture=True, check=False, log=False)
    stamp = out.stdout.strip()
    return stamp if out.returncode == 0 and stamp.isdigit() else None



def git_commit(root: Path) -> str | None:
    """The commit checked out in ``root``, with ``-dirty`` when tracked files differ from it; None outside git."""
    head = proc.run(["git", "-C", root, "rev-parse", "HEAD"], capture=True, check=False, log=False)
    if head.returncode != 0:
        return None
    # GIT_OPTIONAL_LOCKS=0: `git status` does not refresh the checkout's index (a read-only checkout builds).
    dirty = proc.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                     env={"GIT_OPTIONAL_LOCKS": "0"}, capture=True, check=False, log=False)
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
