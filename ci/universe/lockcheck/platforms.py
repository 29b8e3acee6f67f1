"""The environments a lock must install in: each (CPython, platform) it serves (``pins.served``), with the
wheel tags that interpreter accepts and the PEP 508 marker values pip evaluates there -- derived for machines we are
not on, as ``packaging.tags`` derives them for the running one."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

from packaging import tags

from ci.universe import pins

#: The oldest glibc the Linux platforms stand for: the builder images' manylinux_2_28.
MANYLINUX_GLIBC_MINOR = 28


def manylinux_platforms(arch: str, glibc_minor: int = MANYLINUX_GLIBC_MINOR) -> tuple[str, ...]:
    """The platform tags a manylinux system with glibc ``2.<glibc_minor>`` accepts, newest first (PEP 600, and the
    legacy names of PEP 513/571/599 for the glibc each stands for) -- what ``packaging.tags`` derives for the
    running machine, for a machine we are not on."""
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    found: list[str] = []
    for minor in range(glibc_minor, 4, -1):
        found.append(f"manylinux_2_{minor}_{arch}")
        # manylinux1/2010 were defined for x86 only; manylinux2014 for every architecture.
        if minor in legacy and (minor == 17 or arch in ("x86_64", "i686")):
            found.append(f"{legacy[minor]}_{arch}")
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class Platform:
    """An OS and machine: the marker values pip evaluates there and the platform tags it accepts."""

    name: str
    sys_platform: str
    platform_system: str
    platform_machine: str
    os_name: str
    platform_tags: tuple[str, ...]


PLATFORMS: Mapping[str, Platform] = {
    pins.LINUX_X86_64: Platform(pins.LINUX_X86_64, "linux", "Linux", "x86_64", "posix",
                                manylinux_platforms("x86_64")),
    pins.LINUX_AARCH64: Platform(pins.LINUX_AARCH64, "linux", "Linux", "aarch64", "posix",
                                 manylinux_platforms("aarch64")),
    pins.WIN_AMD64: Platform(pins.WIN_AMD64, "win32", "Windows", "AMD64", "nt", ("win_amd64",)),
}


@functools.cache
def _supported_tags(version: tuple[int, int], platforms: tuple[str, ...]) -> frozenset[tags.Tag]:
    # abis given: packaging would otherwise add the *running* interpreter's debug ABI variants.
    interpreter = f"cp{version[0]}{version[1]}"
    return frozenset([*tags.cpython_tags(version, abis=[interpreter], platforms=platforms),
                      *tags.compatible_tags(version, interpreter, platforms)])


@dataclasses.dataclass(frozen=True)
class Environment:
    """CPython ``python`` (``"3.12"``, GIL build) on ``platform``."""

    python: str
    platform: Platform

    def __str__(self) -> str:
        return f"CPython {self.python} on {self.platform.name}"

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.python.split(".")[:2]
        return int(major), int(minor)

    @property
    def full_version(self) -> str:
        # The oldest patch release: a lock that serves 3.12 serves 3.12.0.
        return f"{self.python}.0"

    def tags(self) -> frozenset[tags.Tag]:
        """Every wheel tag this interpreter installs (cp312-cp312, cp312-abi3 ... py3-none-any)."""
        return _supported_tags(self.version, self.platform.platform_tags)

    def markers(self) -> dict[str, str]:
        """PEP 508 marker values of this interpreter (what pip evaluates a lock's ``; marker`` against)."""
        return {
            "implementation_name": "cpython", "implementation_version": self.full_version,
            "os_name": self.platform.os_name, "platform_machine": self.platform.platform_machine,
            "platform_python_implementation": "CPython", "platform_release": "",
            "platform_system": self.platform.platform_system, "platform_version": "",
            "python_full_version": self.full_version, "python_version": self.python,
            "sys_platform": self.platform.sys_platform, "extra": "",
        }


def environments(name: str) -> list[Environment]:
    """Every (CPython, platform) lock ``name`` serves."""
    served = pins.served(name)
    return [Environment(python, PLATFORMS[platform]) for platform in served.platforms for python in served.pythons]
