"""The project's source as every build sees it: its files and links, their copy into a target's work folder, the
values of the build-env placeholders, the commit and its time.

* :func:`read_tree`: what git knows (tracked and untracked-not-ignored files), or every file but build outputs
  outside git, with every initialised git submodule's files (nested ones too); the symbolic links among them
  (files' and folders'), and the submodules whose folder is empty. A link that points to an absolute path or out
  of the project is refused in one line naming it: the copy could not hold what it points to.
* :func:`project_files`: the files alone (a link to a file counts as that file); never the farm's own output
  folders when they sit inside the project.
* :func:`sync_source`: the copy a build compiles (host, container and Windows builds), rewriting only what changed;
  links are made again in the copy as the project has them (relative, pointing inside the copy).
* :func:`git_commit`: the project's commit (``<sha>-dirty`` with uncommitted changes to tracked files), the one
  answer for the build-env placeholder ``{git_commit}`` and the release manifest.

Whether an empty submodule stops the build is ``ci/builds/preflight.py``'s decision (only one the build's files
name does); this module lists them.
"""

from __future__ import annotations

import dataclasses
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
#: git's mode of a submodule's entry (a "gitlink": the commit of another repository) in its parent's index.
GITLINK_MODE = "160000"


@dataclasses.dataclass(frozen=True)
class SourceTree:
    """The project's source, relative to its root: regular files, symbolic links (path -> the target as written,
    relative) and the submodules whose folder is empty (not listed: they hold nothing to copy)."""

    files: tuple[str, ...]
    links: dict[str, str]
    empty_submodules: tuple[str, ...]


def read_tree(root: Path, exclude: tuple[Path, ...] = ()) -> SourceTree:
    """The project's files, links and empty submodules, never anything under ``exclude`` (the farm's own output
    folders, when they are inside the project); a link out of the project is refused (:func:`check_link`)."""
    skip = tuple(str(p.resolve().relative_to(root.resolve())) + "/" for p in exclude
                 if p.resolve().is_relative_to(root.resolve()))
    inside = proc.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=root, capture=True, check=False, log=False)
    if inside.returncode == 0 and inside.stdout.strip() == "true":
        entries, empty = _git_listing(root)
    else:
        entries, empty = _walk_listing(root), [p for p in gitmodules_paths(root) if _empty(root / p)]
    entries = sorted(e for e in entries if not e.startswith(skip))
    links = {e: check_link(root, e) for e in entries if (root / e).is_symlink()}
    return SourceTree(tuple(e for e in entries if e not in links), links, tuple(empty))


def project_files(root: Path, exclude: tuple[Path, ...] = ()) -> list[str]:
    """The project's source files, relative to ``root`` (a link to a file counts as that file; a link to a folder
    does not), never anything under ``exclude``."""
    tree = read_tree(root, exclude)
    return sorted([*tree.files, *(name for name in tree.links if (root / name).is_file())])


def check_link(root: Path, name: str) -> str:
    """The target of the link ``name`` as written, when it stays inside the project; else one line naming it."""
    written = os.readlink(root / name)
    if os.path.isabs(written) or re.match(r"^[A-Za-z]:[\\/]", written):
        raise UsageError("a symbolic link of the project points to an absolute path, which the build's copy of the "
                         "project does not hold", f"{name} -> {written}",
                         "make it a relative link to a file or folder inside the project, or copy what it points "
                         "to into the project")
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(root / name)]) != real_root:
        raise UsageError("a symbolic link of the project points out of the project, which the build's copy of it "
                         "does not hold", f"{name} -> {written}",
                         "make it point to a file or folder inside the project, or copy what it points to into "
                         "the project")
    return written


def _empty(folder: Path) -> bool:
    return not folder.is_dir() or not any(folder.iterdir())


def _walk_listing(root: Path) -> list[str]:
    """Every file and link below ``root`` but build outputs (a project outside git); links to folders are listed,
    not followed."""
    found = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        found += [str((here / d).relative_to(root)) for d in dirs if (here / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in IGNORED and not d.endswith(".egg-info")
                         and not (here / d).is_symlink())
        found += [str((here / n).relative_to(root)) for n in names if not n.endswith((".so", ".pyd", ".o", ".whl"))]
    return found


def git_files(root: Path) -> list[str]:
    """What git lists in ``root`` (tracked, and untracked but not ignored: files and links), with every initialised
    submodule's files in place of its one gitlink entry, nested submodules too."""
    return _git_listing(root)[0]


def _git_listing(root: Path, under: str = "") -> tuple[list[str], list[str]]:
    """(:func:`git_files`, the submodules whose folder is empty, as paths from the top project: ``under`` is the
    submodule's folder there). ``git ls-files --recurse-submodules`` is not used: it cannot list untracked files,
    which the build copies everywhere else."""
    listing = proc.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                       capture=True, log=False)
    staged = proc.run(["git", "ls-files", "-z", "--stage"], cwd=root, capture=True, log=False)
    # "<mode> <object> <stage>\t<path>": the gitlinks among the tracked entries.
    submodules = sorted({entry.split("\t", 1)[1] for entry in staged.stdout.split("\0")
                         if entry.startswith(GITLINK_MODE + " ") and "\t" in entry})
    files = [n for n in dict.fromkeys(listing.stdout.split("\0")) if n and n not in submodules
             and ((root / n).is_symlink() or (root / n).is_file())]
    empty: list[str] = []
    for sub in submodules:
        if _empty(root / sub):
            empty.append(under + sub)
            continue
        inner, inner_empty = _git_listing(root / sub, f"{under}{sub}/")
        files += [f"{sub}/{name}" for name in inner]
        empty += inner_empty
    return files, empty


def gitmodules_paths(root: Path) -> list[str]:
    """The folders ``.gitmodules`` names (``path = ...`` of each ``[submodule "..."]``), relative to ``root``."""
    try:
        text = (root / ".gitmodules").read_text(errors="replace")
    except OSError:
        return []
    found = re.findall(r"^\s*path\s*=\s*(.+?)\s*$", text, flags=re.MULTILINE)
    return [p.strip('"').rstrip("/") for p in found if p.strip('"')]


def sync_source(root: Path, dest: Path, exclude: tuple[Path, ...] = ()) -> int:
    """Copy ``root``'s source files to ``dest`` and make its links again there, rewriting only what changed in
    content; returns files copied and links made.

    A changed file gets the current time, not its source's: another checkout's older file with other
    content must still be newer than the objects ninja built from the previous one. In a first copy (no manifest,
    no build folder: a clean build) every file gets the commit's time (``SOURCE_DATE_EPOCH``; outside git, its
    source's time) instead: nvcc writes a source's modification time into the device code's line table
    (``-lineinfo``, ``-G``), so a clean build's bytes must not depend on when the copy was made, and nothing was
    built from the copy yet.
    """
    dest.mkdir(parents=True, exist_ok=True)
    manifest = dest / ".farm-sources.json"
    before: set[str] = set(json.loads(manifest.read_text())) if manifest.is_file() else set()
    tree = read_tree(root, exclude)
    clean = not manifest.is_file() and not (dest / "build").exists()
    epoch = source_date_epoch(root) if clean else None
    for name in sorted(before | set(tree.links)):  # links first: a file must never be written through an old one
        if (dest / name).is_symlink() and tree.links.get(name) != os.readlink(dest / name):
            (dest / name).unlink()
    copied = 0
    for name in tree.files:
        src, dst = root / name, dest / name
        data = src.read_bytes()
        try:
            if not dst.is_symlink() and dst.stat().st_size == len(data) and dst.read_bytes() == data:
                continue
        except FileNotFoundError:
            pass
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        shutil.copymode(src, dst)
        if clean:
            stamp = int(epoch) if epoch else int(src.stat().st_mtime)
            os.utime(dst, (stamp, stamp))
        copied += 1
    for name, written in tree.links.items():
        dst = dest / name
        if dst.is_symlink():
            continue  # the same link (others were removed above)
        if dst.is_dir():
            shutil.rmtree(dst)  # a folder in an earlier copy is a link now
        dst.unlink(missing_ok=True)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.symlink(written, dst, target_is_directory=(root / name).is_dir())
        except OSError:  # Windows without the symlink privilege (no Developer Mode): the copy holds what it points to
            if (root / name).is_dir():
                shutil.copytree(root / name, dst)
            elif (root / name).is_file():
                shutil.copy2(root / name, dst)
        copied += 1
    names = [*tree.files, *tree.links]
    replaced = tuple(f"{name}/" for name in tree.links)  # went with the folder a link took the place of
    for gone in sorted(before - set(names)):
        if not gone.startswith(replaced) and ((dest / gone).is_symlink() or not (dest / gone).is_dir()):
            (dest / gone).unlink(missing_ok=True)
    fsutil.atomic_write_text(manifest, json.dumps(sorted(names)))
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
