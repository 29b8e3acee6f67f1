"""A wheel's size: the project's budget, checked by the audit, and the bytes each GPU architecture adds.

PyPI refuses a file over its limit (100 MiB unless the project was granted more), and a CUDA wheel grows with
every architecture it carries SASS for. ``wheel-size`` fails a wheel over the project's ``max-wheel-size``
(project.py: default 100 MiB) and names its ten largest members. The report attributes the CUDA code to
architectures: the size of each SASS cubin and PTX image in the libraries' fatbinaries, as ``cuobjdump``
extracts them (uncompressed: the wheel's compression and nvcc's fatbin compression act on all of them alike,
so the shares hold).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ci import proc, wheelmeta
from ci.audit.checks import Check

_EXTRACTED = re.compile(r"\.(sm_\d+[a-z]?)\.(cubin|ptx)$")


def mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


def largest_members(wheel: Path, count: int = 10) -> list[tuple[str, int]]:
    """The wheel's `count` largest members by their compressed size, largest first."""
    with wheelmeta.open_wheel(wheel) as zf:
        sizes = [(info.filename, info.compress_size) for info in zf.infolist() if not info.is_dir()]
    return sorted(sizes, key=lambda item: (-item[1], item[0]))[:count]


def check_size(wheel: Path, budget: int) -> Check:
    size = wheel.stat().st_size
    if size <= budget:
        return Check("wheel-size", True, f"{mib(size)} of the {mib(budget)} budget")
    members = "; ".join(f"{name} {mib(n)}" for name, n in largest_members(wheel))
    return Check("wheel-size", False,
                 f"{mib(size)} is over the {mib(budget)} budget (max-wheel-size; fewer cuda-archs, or PTX instead "
                 f"of SASS for old ones, make it smaller); the ten largest members, compressed: {members}")


def arch_bytes(cuobjdump: Path, libraries: Sequence[Path]) -> dict[str, int]:
    """Bytes of CUDA code per architecture in ``libraries``: ``sm_90`` for SASS, ``sm_120 PTX`` for PTX."""
    totals: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="farm-fatbin-") as tmp:
        for index, library in enumerate(libraries):
            # Each library in a folder of its own: cuobjdump names the files it extracts after the library.
            out = Path(tmp) / str(index)
            out.mkdir()
            for flag in ("--extract-elf", "--extract-ptx"):
                proc.run([cuobjdump, flag, "all", library.resolve()], cwd=out, capture=True, check=False)
            for item in out.iterdir():
                match = _EXTRACTED.search(item.name)
                if match:
                    key = match.group(1) + (" PTX" if match.group(2) == "ptx" else "")
                    totals[key] = totals.get(key, 0) + item.stat().st_size
    return dict(sorted(totals.items(), key=lambda kv: (kv[0].endswith("PTX"), _sm_number(kv[0]), kv[0])))


def _sm_number(key: str) -> int:
    digits = re.search(r"\d+", key)
    return int(digits.group()) if digits else 0
