"""Read the CUDA architectures of torch's own wheels from PyPI (``nox -s torch-archs``), to record them once per
release in ``ci/universe/matrix.py`` (``TorchRelease.sass``, ``sass_aarch64``) and to say when that table is stale.

``torch.cuda.get_arch_list()`` is ``torch._C._cuda_getArchFlags()`` split, and that is a string compiled into
``libtorch_python.so`` (``CUDA_ARCH_FLAGS``, ``sm_75 sm_80 ...``): reading it needs neither a GPU nor an install of
the 1-4 GB wheel. The wheel is read in place with HTTP range requests (PyPI's file host serves them, as pip's
lazy-wheel does): the zip directory at its end, then the one compressed member, about 10 MB of a ~900 MB file.
Standard library only (rich only to print); pip's own lazy wheel is internal API, hence this small reader.
"""

from __future__ import annotations

import dataclasses
import io
import re
import ssl
import urllib.request
import zipfile
from collections.abc import Iterable

from ci.errors import CommandFailed, MatrixError
from ci.universe import shapes
from ci.universe.lockcheck import pages

PLATFORMS = {"x86_64": "manylinux_2_28_x86_64", "aarch64": "manylinux_2_28_aarch64"}
_FLAGS = re.compile(rb"(?:sm|compute)_\d+[af]?(?: (?:sm|compute)_\d+[af]?)+")


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a URL, fetched in ranges as it is read."""

    def __init__(self, url: str, context: ssl.SSLContext | None = None) -> None:
        self.url = url
        self.context = context
        self.position = 0
        self.fetched = 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60,
                                    context=context) as response:
            self.size = int(response.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = base + offset
        return self.position

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self.position >= self.size or not len(buffer):
            return 0
        end = min(self.position + len(buffer), self.size) - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.position}-{end}"})
        with urllib.request.urlopen(request, timeout=120, context=self.context) as response:
            data = response.read()
        buffer[:len(data)] = data
        self.position += len(data)
        self.fetched += len(data)
        return len(data)


@dataclasses.dataclass(frozen=True)
class ReadArchs:
    version: str
    arch: str
    wheel: str
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    fetched: int


def wheel_url(index: pages.Index, version: str, arch: str, python: str = "3.12") -> tuple[str, str]:
    """(file name, URL) of torch ``version``'s CPython ``python`` wheel for ``arch`` on the index pip uses."""
    tag = "cp" + python.replace(".", "")
    for entry in index.files("torch"):
        if entry.filename.startswith(f"torch-{version}-{tag}-{tag}-") and entry.filename.endswith(
                f"{PLATFORMS[arch]}.whl") and entry.url:
            return entry.filename, entry.url
    raise CommandFailed("the index has no such torch wheel", f"torch {version} {tag} {PLATFORMS[arch]} ({index.url})",
                        "check the release in ci/universe/matrix.py TORCH_RELEASES")


def sm_to_arch(sm: str) -> str:
    m = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([af]?)", sm)
    return f"{m.group(1)}.{m.group(2)}{m.group(3)}" if m else sm


def arch_flags(library: bytes) -> list[str]:
    """The ``CUDA_ARCH_FLAGS`` string compiled into ``libtorch_python.so`` (``sm_75``, ..., ``compute_90``): the
    longest run of such flags in its bytes."""
    found = sorted(set(_FLAGS.findall(library)), key=len)
    return found[-1].decode().split() if found else []


def read_archs(version: str, arch: str, index: pages.Index | None = None) -> ReadArchs:
    """torch ``version``'s own architecture list for ``arch``, read from its wheel on the index pip uses."""
    index = index or pages.Index()
    name, url = wheel_url(index, version, arch)
    remote = RangeFile(url, index.ssl_context)
    with zipfile.ZipFile(io.BufferedReader(remote, buffer_size=1 << 16)) as zf:
        member = next((n for n in zf.namelist() if n.endswith("/lib/libtorch_python.so")), None)
        if member is None:
            raise CommandFailed("no libtorch_python.so in the torch wheel", name, "PyTorch changed its layout")
        data = zf.read(member)
    flags = arch_flags(data)
    return ReadArchs(version, arch, name, tuple(sm_to_arch(f) for f in flags if f.startswith("sm_")),
                     tuple(sm_to_arch(f) for f in flags if f.startswith("compute_")), remote.fetched)


def compare(releases: Iterable[shapes.TorchRelease], arch: str) -> list[tuple[ReadArchs, tuple[str, ...]]]:
    """Each release's list on PyPI beside the one recorded (aarch64: only releases with aarch64 CUDA builds)."""
    rows = []
    index = pages.Index()
    for release in releases:
        if arch == "aarch64" and not release.aarch64:
            continue
        rows.append((read_archs(release.version, arch, index), release.archs_for(arch)))
    return rows


def check(releases: Iterable[shapes.TorchRelease]) -> None:
    """Print each release's lists as PyPI's wheels have them; one line and a failure when the table differs.
   """
    from rich.markup import escape

    from ci.log import log  # here: ci/cli.py imports the universe, and must not import rich

    stale = []
    for arch in ("x86_64", "aarch64"):
        for read, recorded in compare(releases, arch):
            same = read.sass == recorded
            log.result(escape(f"torch {read.version} {arch}: SASS {' '.join(read.sass) or '-'}"
                              f"{' PTX ' + ' '.join(read.ptx) if read.ptx else ''} ({read.wheel}, "
                              f"{read.fetched / 2**20:.1f} MiB read)")
                       + ("" if same else f" [red]recorded: {escape(' '.join(recorded) or '-')}[/]"), markup=True)
            if not same:
                stale.append(f"{read.version} {arch}")
    if stale:
        raise MatrixError("ci/universe/matrix.py's torch architecture lists differ from PyPI's wheels",
                ", ".join(stale),
                          "copy the lists above into TORCH_RELEASES (sass, sass_aarch64)")
    log.result("every recorded list matches torch's own wheels")
