"""Where Debian comes from: the mirror that bootstraps base images, the bullseye sysroot and qemu's arm64 root.

One decision: ``FARM_DEBIAN_MIRROR``, else the mirror this machine's apt already uses (an air-gapped farm reuses its
own), else Debian's public one.
"""

from __future__ import annotations

import re
from pathlib import Path

from ci import settings

#: Debian's public mirror: the default where neither FARM_DEBIAN_MIRROR nor this machine's apt names one.
DEFAULT_MIRROR = "http://deb.debian.org/debian"

_DEB822_URI = re.compile(r"^URIs:\s*(\S+)", re.MULTILINE)
_ONE_LINE_URI = re.compile(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", re.MULTILINE)


def host_debian_mirror(etc: Path = Path("/etc/apt")) -> str | None:
    """The Debian mirror this machine's apt uses (so air-gapped farms reuse their own mirror)."""
    texts = []
    for path in [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.sources")),
                 *sorted((etc / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            texts.append(path.read_text())
    for text in texts:
        for uri in _DEB822_URI.findall(text):
            if str(uri).rstrip("/").endswith("/debian"):
                return str(uri)
        for uri, _suite in _ONE_LINE_URI.findall(text):
            if str(uri).rstrip("/").endswith("/debian"):
                return str(uri)
    return None


def mirror(default: str | None = DEFAULT_MIRROR) -> str | None:
    """FARM_DEBIAN_MIRROR, else the host's apt mirror, else ``default``."""
    return settings.current().environ.get("FARM_DEBIAN_MIRROR") or host_debian_mirror() or default
