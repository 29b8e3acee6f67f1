"""NVIDIA's CUDA 12 installer for Windows: the folder it fills and the variable it sets, its silent command with
the cell's sub-packages, and the download checked against the checksum the matrix pins."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from urllib.parse import urlparse

from ci.errors import CommandFailed, MissingRequirement, UsageError
from ci.log import log
from ci.universe import shapes

DEFAULT_INSTALL_ROOT = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA"
HASH_ALGORITHMS = ("sha256", "md5")


def installer_variable(cell: shapes.Cell) -> str:
    """The variable NVIDIA's installer sets to the cell's CUDA folder (``CUDA_PATH_V12_4``)."""
    major, minor = cell.cuda.split(".")[:2]
    return f"CUDA_PATH_V{major}_{minor}"


def installer_dir(cell: shapes.Cell, env: Mapping[str, str]) -> PureWindowsPath:
    """Where NVIDIA's installer put the cell's CUDA: ``CUDA_PATH_V12_4``, else its default folder."""
    major, minor = cell.cuda.split(".")[:2]
    value = env.get(installer_variable(cell), "").strip()
    return PureWindowsPath(value) if value else PureWindowsPath(DEFAULT_INSTALL_ROOT, f"v{major}.{minor}")


def installer_command(cell: shapes.Cell, installer: str = "cuda_installer.exe") -> list[str]:
    """NVIDIA's installer, silent (``-s``), only the cell's sub-packages, no reboot (``-n``)."""
    facts = cell.windows
    if facts is None or facts.toolkit != "nvidia-installer" or not facts.packages:
        raise UsageError(f"cell {cell.name} lists no NVIDIA installer sub-packages", cell.cuda,
                         "add them to its WindowsFacts.packages in ci/universe/matrix.py")
    return [installer, "-s", *facts.packages, "-n"]


def installer_hint(cell: shapes.Cell) -> str:
    url = cell.windows.installer if cell.windows is not None and cell.windows.installer else "NVIDIA's CUDA " \
        f"{cell.cuda} network installer"
    return (f"run `python -m ci toolkit --cuda {cell.cuda}` (as administrator: it runs NVIDIA's installer, only what "
            f"builds need: {' '.join(installer_command(cell, PureWindowsPath(url).name))}, from {url}); "
            f"or point FARM_CUDA_HOME at a CUDA {cell.cuda} toolkit")


def _installer_facts(cell: shapes.Cell) -> shapes.WindowsFacts:
    facts = cell.windows
    if facts is None or facts.toolkit != "nvidia-installer" or not facts.installer:
        raise UsageError(f"cell {cell.name} names no NVIDIA installer", cell.cuda,
                         "set WindowsFacts.installer in ci/universe/matrix.py")
    return facts


def parse_hash(pin: str) -> tuple[str, str]:
    """``sha256:<hex>`` -> (algorithm, hex); the algorithms the matrix may pin."""
    algorithm, _, digest = pin.partition(":")
    if algorithm not in HASH_ALGORITHMS or not re.fullmatch(r"[0-9a-f]+", digest) or \
            len(digest) != hashlib.new(algorithm).digest_size * 2:
        raise UsageError("an installer checksum must be <algorithm>:<lowercase hex>", pin or "none",
                         f"pin one of {', '.join(HASH_ALGORITHMS)} in WindowsFacts.installer_hash "
                         "(ci/universe/matrix.py)")
    return algorithm, digest


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: Path) -> None:
    """Stream ``url`` into ``dest``; the pinned checksum, not the transport, is what makes the file trusted."""
    with urllib.request.urlopen(url, timeout=120) as response, dest.open("wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)


def fetch_installer(cell: shapes.Cell, folder: Path, fetch: Callable[[str, Path], None] = download) -> Path:
    """NVIDIA's installer of the cell in ``folder``, downloaded once and checked against the matrix's pin before
    anything runs it (a cached copy is checked again)."""
    facts = _installer_facts(cell)
    algorithm, expected = parse_hash(facts.installer_hash)
    target = folder / PurePosixPath(urlparse(facts.installer).path).name
    if target.is_file() and file_digest(target, algorithm) == expected:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-pid{os.getpid()}")
    try:
        log.info(f"downloading {facts.installer}")
        try:
            fetch(facts.installer, tmp)
        except OSError as exc:
            raise MissingRequirement(f"NVIDIA's CUDA {cell.cuda} installer could not be downloaded",
                                     f"{facts.installer}: {exc}", "check the network (developer.download.nvidia.com)"
                                     " or download it yourself into " + str(folder)) from exc
        got = file_digest(tmp, algorithm)
        # Printed so that an md5 pin (NVIDIA publishes no other) can be replaced by a SHA-256 one.
        log.info(f"{target.name}: sha256 {file_digest(tmp, 'sha256')}")
        if got != expected:
            raise CommandFailed(f"NVIDIA's CUDA {cell.cuda} installer does not match the checksum the matrix pins",
                                f"{algorithm} {got}, pinned {expected}",
                                "the file changed on NVIDIA's site or in transit; compare it with NVIDIA's checksums "
                                "before changing WindowsFacts.installer_hash in ci/universe/matrix.py")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
