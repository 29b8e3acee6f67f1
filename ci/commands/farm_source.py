"""Where this farm came from: its version, and the repository and commit its code was built from.

The installable distribution records them when it is built: ``farm/hatch_build.py`` calls :func:`record` and puts
the result beside this module as ``farm_source.json`` (from the checkout's git metadata; a wheel built from the
sdist keeps the sdist's record; built from neither, the commit is unknown). A checkout of the farm reads its own git
metadata. ``--version`` prints them, and ``workflows render`` pins a project's workflows to them
(``--farm-repository``, ``--farm-ref``) unless told otherwise.

Git's files are read directly (``HEAD``, the refs, ``packed-refs``, ``config``): the launcher runs before any tool
environment exists, and ``--version`` must answer without starting a process.

Standard library only: the launcher and the distribution's build hook import it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

#: The record a distribution carries, beside this module.
RECORD = Path(__file__).with_name("farm_source.json")
#: The farm's root in a checkout (ci/ sits in it).
ROOT = Path(__file__).resolve().parents[2]
PROG = "cuda-ext-farm"
_SHA = re.compile(r"[0-9a-f]{40}")
#: https://github.com/OWNER/NAME(.git), git@github.com:OWNER/NAME(.git), ssh://git@github.com/OWNER/NAME(.git)
_GITHUB = re.compile(r"^(?:https?://(?:[^@/]*@)?|ssh://git@|git@)github\.com[/:]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


@dataclasses.dataclass(frozen=True)
class Source:
    version: str
    #: The repository's URL, without credentials (None: not known, or not a URL another machine can reach).
    repository: str | None = None
    #: The full commit SHA (None: built outside a git checkout).
    commit: str | None = None

    @property
    def github(self) -> str | None:
        """``OWNER/NAME`` when the repository is on GitHub (what the workflows' checkout step takes)."""
        found = _GITHUB.match(self.repository or "")
        return f"{found.group(1)}/{found.group(2)}" if found else None

    def describe(self) -> str:
        """``--version``'s line."""
        if self.commit is None:
            return f"{PROG} {self.version} (commit unknown: built outside a git checkout)"
        where = f" of {self.repository}" if self.repository else ""
        return f"{PROG} {self.version} (commit {self.commit}{where})"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def current(root: Path = ROOT) -> Source:
    """The running farm's source: the distribution's record, else the checkout's git metadata."""
    if RECORD.is_file() and root == ROOT:
        return _from_record(RECORD)
    repository, commit = git_metadata(root)
    return Source(_checkout_version(root), repository, commit)


def record(root: Path, version: str) -> dict[str, Any]:
    """What a distribution built from ``root`` records (``root``: a checkout, or an unpacked sdist that holds
    ``ci/commands/farm_source.json``)."""
    repository, commit = git_metadata(root)
    kept = root / "ci" / "commands" / RECORD.name
    if commit is None and kept.is_file():  # a wheel built from the sdist: the sdist's record
        old = _from_record(kept)
        repository, commit = old.repository, old.commit
    return Source(version, repository, commit).as_dict()


def _from_record(path: Path) -> Source:
    data = json.loads(path.read_text(encoding="utf-8"))
    return Source(str(data.get("version") or "unknown"), data.get("repository"), data.get("commit"))


def _checkout_version(root: Path) -> str:
    found = re.search(r'^version\s*=\s*"([^"]+)"', _read(root / "farm" / "pyproject.toml"), re.MULTILINE)
    return found.group(1) if found else "unknown"


# --- git's own files ---------------------------------------------------------------------------------------------


def git_metadata(root: Path) -> tuple[str | None, str | None]:
    """(origin's URL without credentials, HEAD's commit) of the checkout at ``root``; None for what is not there."""
    dirs = _git_dirs(root)
    if dirs is None:
        return None, None
    own, common = dirs
    return public_url(_origin_url(common)), _head_commit(own, common)


def _git_dirs(root: Path) -> tuple[Path, Path] | None:
    """(the worktree's git folder, the repository's common one): the same for a plain clone."""
    dot = root / ".git"
    if dot.is_dir():
        return dot, dot
    text = _read(dot).strip()
    if not text.startswith("gitdir:"):
        return None
    own = (root / text.removeprefix("gitdir:").strip()).resolve()
    common = own / _read(own / "commondir").strip() if (own / "commondir").is_file() else own
    return own, common.resolve()


def _head_commit(own: Path, common: Path) -> str | None:
    head = _read(own / "HEAD").strip()
    if not head.startswith("ref:"):
        return head if _SHA.fullmatch(head) else None
    ref = head.removeprefix("ref:").strip()
    for folder in (own, common):
        found = _read(folder / ref).strip()
        if _SHA.fullmatch(found):
            return found
    for line in _read(common / "packed-refs").splitlines():
        sha, _, name = line.partition(" ")
        if name.strip() == ref and _SHA.fullmatch(sha):
            return sha
    return None


def _origin_url(common: Path) -> str | None:
    section = ""
    for raw in _read(common / "config").splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section == '[remote "origin"]' and re.match(r"url\s*=", line):
            return line.partition("=")[2].strip()
    return None


def public_url(url: str | None) -> str | None:
    """``url`` as another machine can use it, without credentials: GitHub's in its https form, other https and ssh
    URLs without their user part; a local path is no one else's (None)."""
    if not url:
        return None
    github = _GITHUB.match(url)
    if github:
        return f"https://github.com/{github.group(1)}/{github.group(2)}"
    found = re.match(r"^(https?|ssh)://(?:[^@/]*@)?([^/]+)(/.*)$", url)
    return f"{found.group(1)}://{found.group(2)}{found.group(3)}" if found else None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
