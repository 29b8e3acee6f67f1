"""The platforms and CPU architectures a target is built for, and this machine's (standard library only)."""

from __future__ import annotations

import platform
import sys

from ci.errors import TargetError

PLATFORMS = {"linux": "linux_x86_64", "windows": "win_amd64"}
#: The CPU architectures of each OS the farm builds for; the first is the default (the one a plain ``build`` makes).
ARCHS = {"linux": ("x86_64", "aarch64"), "windows": ("amd64",)}


def current_python() -> str:
    """The running CPython's ``X.Y``: the default Python of a per-Python target."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def host_arch() -> str:
    """This machine's CPU architecture as the farm spells it (``x86_64``, ``aarch64``)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def check_arch(os: str, arch: str) -> None:
    if os not in PLATFORMS:
        raise TargetError("unknown platform", os, f"use one of {', '.join(PLATFORMS)}")
    if arch not in ARCHS[os]:
        raise TargetError(f"the farm builds no {os} wheels for this architecture", arch,
                          f"use one of {', '.join(ARCHS[os])}")
