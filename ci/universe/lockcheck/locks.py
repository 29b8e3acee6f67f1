"""A lock's pins: ``name==version ; marker`` with its hashes, read from a ``pip-compile``-style file."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from ci.errors import UsageError
from ci.universe.lockcheck.platforms import Environment


@dataclasses.dataclass(frozen=True)
class Pin:
    """One requirement of a lock: ``name==version ; marker`` and its hashes."""

    name: NormalizedName
    version: Version
    marker: Marker | None
    hashes: frozenset[str]

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"

    def applies(self, env: Environment) -> bool:
        return self.marker is None or self.marker.evaluate(env.markers())


def read_lock(path: Path) -> list[Pin]:
    """The pins of a ``pip-compile``-style lock (continuation lines joined, comments and options skipped)."""
    found: list[Pin] = []
    for line in path.read_text().replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        hashes = frozenset(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
        text = line.split(" --hash=")[0].strip()
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise UsageError(f"a line of {path.name} is not a requirement ({exc})", text,
                             "run `nox -s lock` to write the lock again") from None
        exact = [s.version for s in requirement.specifier if s.operator == "=="]
        if len(exact) != 1 or "*" in exact[0]:
            raise UsageError(f"a requirement of {path.name} is not pinned to one version", text,
                             "run `nox -s lock` to write the lock again")
        found.append(Pin(canonicalize_name(requirement.name), Version(exact[0]), requirement.marker, hashes))
    return found
