"""The ``_MSC_VER`` range a CUDA toolkit accepts, read from its ``crt/host_config.h``.

The ``#if defined(_WIN32)`` block of that header stops the compilation with
``#error -- unsupported Microsoft Visual Studio version!`` when
``_MSC_VER < LOW || _MSC_VER >= HIGH``. Only the ``#if`` line counts: the
comment on its ``#endif`` is stale in CUDA 13 (it still says 1910 while the
check says 1920). CUDA 12.x also has an ``#elif`` range that only warns
("support ... has been deprecated").

The ranges found in NVIDIA's wheels are in ``ci/universe/matrix.py`` (``WindowsFacts.msc_ver``);
a build checks the installed toolkit against its cell, so the matrix cannot
drift from the headers unnoticed.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ci.errors import UsageError
from ci.universe import shapes

_WIN32_BLOCK = re.compile(r"#\s*if\s+defined\s*\(\s*_WIN32\s*\)(?P<body>.*?)#\s*endif\s*/\*\s*_WIN32\s*\*/", re.S)
_RANGE = re.compile(r"#\s*if\s+_MSC_VER\s*<\s*(?P<low>\d+)\s*\|\|\s*_MSC_VER\s*>=\s*(?P<high>\d+)")
_DEPRECATED = re.compile(r"#\s*elif\s+_MSC_VER\s*>=\s*(?P<low>\d+)\s*&&\s*_MSC_VER\s*<\s*(?P<high>\d+)")
_MESSAGE = re.compile(r"#\s*error\s+--\s+unsupported Microsoft Visual Studio version!\s*(?P<text>[^\n]*?\(inclusive\)"
                      r"[^\n!.]*)")


@dataclasses.dataclass(frozen=True)
class HostConfig:
    #: Half-open ``_MSC_VER`` range nvcc accepts.
    msc_ver: tuple[int, int]
    #: Half-open range that is accepted with a deprecation message (None: none, or an empty one).
    deprecated: tuple[int, int] | None = None
    #: NVIDIA's own words ("Only the versions between 2019 and 2022 (inclusive) are supported").
    message: str = ""


def parse(text: str) -> HostConfig:
    """The Windows host-compiler check of a ``host_config.h``."""
    block = _WIN32_BLOCK.search(text)
    body = block.group("body") if block else text
    found = _RANGE.search(body)
    if found is None:
        raise UsageError("no _MSC_VER check found in host_config.h", "#if _MSC_VER < ... || _MSC_VER >= ...",
                         "the header layout changed: read its _WIN32 block and update windows/hostconfig.py")
    deprecated = None
    dep = _DEPRECATED.search(body)
    if dep is not None and int(dep.group("low")) < int(dep.group("high")):
        deprecated = (int(dep.group("low")), int(dep.group("high")))
    message = _MESSAGE.search(body)
    return HostConfig(msc_ver=(int(found.group("low")), int(found.group("high"))), deprecated=deprecated,
                      message=message.group("text").strip() if message else "")


def header_path(cuda_home: Path) -> Path:
    return cuda_home / "include" / "crt" / "host_config.h"


def read(cuda_home: Path) -> HostConfig:
    path = header_path(cuda_home)
    try:
        return parse(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        raise UsageError("the CUDA toolkit has no crt/host_config.h", path,
                         "reinstall the toolkit (the nvidia-cuda-crt wheel, or the installer's nvcc package)") from None


def check_cell(cell: shapes.Cell, found: HostConfig) -> None:
    """Refuse a toolkit whose header disagrees with the cell's recorded range."""
    if cell.windows is None or cell.windows.msc_ver == found.msc_ver:
        return
    low, high = found.msc_ver
    raise UsageError(
        f"CUDA {cell.cuda}'s host_config.h accepts _MSC_VER {low}-{high - 1}, but ci/universe/matrix.py records "
        f"{cell.windows.msc_ver[0]}-{cell.windows.msc_ver[1] - 1}", cell.name,
        f"set WindowsFacts(msc_ver=({low}, {high})) for the cell in ci/universe/matrix.py (and check its toolset)",
    )
