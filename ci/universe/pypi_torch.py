"""What PyPI says about each torch release, as a ``TorchRelease`` (``observe``), read without downloading a wheel:
the index page, one small ``.metadata`` file per wheel, and about 1.5 MB of one wheel per CPU architecture read in
place by range requests, as ``torch_archs`` does. ``Live`` reads PyPI (the index pip uses: ``pages.Index``,
pip's index-url and CA bundle, retries); ``Recorded`` a trimmed snapshot of it (``record`` writes one; the replay
test reads tests/fixtures/pypi_torch/).

* ``version``: the newest patch of each minor (minors older than the table's oldest are not the farm's);
* ``cuda``: the CUDA requirement of its manylinux x86_64 wheel's ``Requires-Dist`` (PEP 658 ``.metadata``, else the
  wheel's ``METADATA`` read in place): ``cuda-toolkit[...]==13.0.2`` (2.11 onwards), ``nvidia-cuda-runtime==13.0.x``
  or ``nvidia-cuda-runtime-cu12==12.8.90`` (2.8-2.10) give 13.0, 12.8;
* ``pythons``: the CPythons (GIL builds) with both a manylinux_2_28 x86_64 and a win_amd64 wheel;
* ``free_threaded``: the same for the free-threaded builds (``cp313-cp313t`` wheels: ``3.13``);
* ``aarch64``: whether the manylinux_2_28_aarch64 wheel's requirements pull a CUDA runtime on Linux aarch64 (2.8-2.10's
  aarch64 wheels are CPU builds: their CUDA requirements are marked ``platform_machine == "x86_64"``);
* ``sass``, ``sass_aarch64``: ``CUDA_ARCH_FLAGS`` compiled into ``libtorch_python.so`` (``torch_archs.arch_flags``);
* ``cxx``: the ``-std=c++NN`` torch's own ``torch/utils/cpp_extension.py`` passes (the value it uses most: the
  module's docstrings also show flags), read from the same wheel. torch's headers carry no ``__cplusplus`` check
  from 2.12 on (2.11's ``c10/util/C++17.h`` required C++17), so the flag torch builds extensions with is the one
  source that says which standard the headers are written for: 17 up to 2.11, 20 from 2.12.

PyTorch uploads a release's wheels over hours, platform by platform. A release read in the middle of it would be
written with no CPython or a partial set, so ``upload_incomplete`` refuses it (``UploadIncomplete``: "upload
incomplete, try later") when: no CPython has both a manylinux_2_28 x86_64 and a win_amd64 wheel; it has wheels for
fewer platforms (x86_64, aarch64, win_amd64) than the previous minor's newest patch; a platform lacks a CPython the
previous minor's has there (compared as sets, so a new CPython does not hide a missing one; one older than all of
the release's is a CPython torch dropped); or its platforms' CPythons differ, GIL or free-threaded builds (every
release PyPI has offers each CPython on every platform it has).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import re
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ci.errors import CommandFailed
from ci.universe import shapes, torch_archs
from ci.universe.lockcheck import pages

#: The platform tag of each kind of wheel read.
PLATFORM_TAGS = {"x86_64": "manylinux_2_28_x86_64", "aarch64": "manylinux_2_28_aarch64", "win_amd64": "win_amd64"}
#: The CPython whose wheel is read first (any other CPython's when it has none).
READ_PYTHON = "3.12"
#: The marker environment of a Linux machine of each architecture (CPython READ_PYTHON).
_LINUX = {"os_name": "posix", "sys_platform": "linux", "platform_system": "Linux", "python_version": READ_PYTHON,
          "python_full_version": f"{READ_PYTHON}.0", "implementation_name": "cpython",
          "platform_python_implementation": "CPython", "extra": ""}
_CUDA_PIN = re.compile(r"^(?:cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?)$")
_STD_FLAG = re.compile(r"""['"][-/]std[=:]c\+\+(\d+)['"]""")


class Source(Protocol):
    """What the adoption reads from PyPI (``Live``) or a recorded snapshot of it (``Recorded``)."""

    def files(self, project: str) -> list[pages.IndexFile]: ...

    def metadata(self, wheel: pages.IndexFile) -> str: ...

    def wheel_facts(self, wheel: pages.IndexFile) -> WheelFacts: ...


@dataclasses.dataclass(frozen=True)
class WheelFacts:
    """What one torch wheel's bytes say: ``CUDA_ARCH_FLAGS`` and the C++ standard cpp_extension passes."""

    flags: tuple[str, ...]
    cxx: int

    def as_dict(self) -> dict[str, object]:
        return {"flags": " ".join(self.flags), "cxx": self.cxx}


def cxx_of(cpp_extension: str) -> int:
    """The C++ standard ``torch/utils/cpp_extension.py`` passes: its most frequent ``'-std=c++NN'`` literal."""
    counts = collections.Counter(int(m) for m in _STD_FLAG.findall(cpp_extension))
    if not counts:
        raise CommandFailed("torch's cpp_extension.py names no -std=c++ flag", "torch/utils/cpp_extension.py",
                            "PyTorch changed how it builds extensions: record cxx in TORCH_RELEASES by hand")
    return max(counts, key=lambda std: (counts[std], std))


def _get(url: str, index: pages.Index) -> bytes | None:
    """A URL's body (None on 404), three attempts, with pip's CA bundle."""
    request = urllib.request.Request(url, headers={"User-Agent": "cuda-ext-farm adopt-torch"})
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=60, context=index.ssl_context) as response:
                body: bytes = response.read()
                return body
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            error: Exception = exc
        except (urllib.error.URLError, OSError) as exc:
            error = exc
        if attempt == 2:
            raise CommandFailed(f"could not read {url.rsplit('/', 1)[-1]} ({error})", url,
                                "check the network, or PIP_INDEX_URL / pip's index-url and cert") from None
    return None


class Live:
    """PyPI (the index pip uses) and torch's wheels read in place."""

    def __init__(self, index: pages.Index | None = None) -> None:
        self.index = index or pages.Index()

    def files(self, project: str) -> list[pages.IndexFile]:
        return self.index.files(project)

    def _zip(self, wheel: pages.IndexFile) -> zipfile.ZipFile:
        remote = torch_archs.RangeFile(wheel.url, self.index.ssl_context)
        return zipfile.ZipFile(io.BufferedReader(remote, buffer_size=1 << 16))

    def metadata(self, wheel: pages.IndexFile) -> str:
        body = _get(wheel.url + ".metadata", self.index)  # PEP 658; PyPI's file host has it for most wheels
        if body is not None:
            return body.decode()
        with self._zip(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            return zf.read(member).decode()

    def wheel_facts(self, wheel: pages.IndexFile) -> WheelFacts:
        with self._zip(wheel) as zf:
            library = next((n for n in zf.namelist() if n.endswith("/lib/libtorch_python.so")), None)
            if library is None:
                raise CommandFailed("no libtorch_python.so in the torch wheel", wheel.filename,
                                    "PyTorch changed its layout")
            flags = tuple(torch_archs.arch_flags(zf.read(library)))
            cxx = cxx_of(zf.read("torch/utils/cpp_extension.py").decode())
        return WheelFacts(flags, cxx)


class Recorded:
    """A snapshot of PyPI (``record`` writes it): ``simple/<project>.json`` (PEP 691 pages, trimmed),
    ``metadata/<wheel>.metadata`` (its requirements), ``wheels.json`` (each read wheel's ``WheelFacts``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.facts = json.loads((folder / "wheels.json").read_text())

    def files(self, project: str) -> list[pages.IndexFile]:
        page = self.folder / "simple" / f"{project}.json"
        if not page.is_file():
            return []
        return pages.parse_page(page.read_bytes(), "application/vnd.pypi.simple.v1+json",
                                    f"https://files.example/{project}/")

    def metadata(self, wheel: pages.IndexFile) -> str:
        return (self.folder / "metadata" / f"{wheel.filename}.metadata").read_text()

    def wheel_facts(self, wheel: pages.IndexFile) -> WheelFacts:
        found = self.facts[wheel.filename]
        return WheelFacts(tuple(found["flags"].split()), int(found["cxx"]))


# --- reading a release -------------------------------------------------------------------------------------------


def wheel_tags(filename: str) -> tuple[Version, int, set[tuple[str, str, str]]] | None:
    try:
        _, version, build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return version, build[0] if build else 0, {(t.interpreter, t.abi, t.platform) for t in tags}


def torch_versions(source: Source) -> list[str]:
    """Every final torch release with wheels on the index, oldest first."""
    found = set()
    for f in source.files("torch"):
        parsed = wheel_tags(f.filename)
        if parsed and not parsed[0].is_prerelease and not parsed[0].local:
            found.add(parsed[0])
    return [str(v) for v in sorted(found)]


def newest_patches(versions: Sequence[str], floor: str) -> list[str]:
    """The newest patch of each minor from ``floor`` (``2.8``) on."""
    newest: dict[str, str] = {}
    for version in sorted(versions, key=Version):
        if shapes.version_key(version) >= shapes.version_key(floor):
            newest[shapes.minor_of(version)] = version
    return list(newest.values())


def cpythons(files: Sequence[pages.IndexFile], version: str, platform: str, free_threaded: bool = False) -> set[str]:
    """The CPythons (``3.12``) with a torch ``version`` wheel for ``platform``: GIL builds (``cp312-cp312``), or
    with ``free_threaded`` the free-threaded ones (``cp313-cp313t``: ``3.13``)."""
    found = set()
    for f in files:
        parsed = wheel_tags(f.filename)
        if parsed is None or str(parsed[0]) != version:
            continue
        for interpreter, abi, tag in parsed[2]:
            wanted = interpreter + "t" if free_threaded else interpreter
            if tag == platform and abi == wanted and interpreter.startswith("cp"):
                found.add(f"{interpreter[2]}.{interpreter[3:]}")
    return found


def wheel_for(files: Sequence[pages.IndexFile], version: str, arch: str) -> pages.IndexFile | None:
    """The wheel read for ``arch``: CPython READ_PYTHON's (else the newest CPython's), the highest build number (the
    one pip installs)."""
    platform = PLATFORM_TAGS[arch]
    best: tuple[tuple[int, ...], int, pages.IndexFile] | None = None
    for f in files:
        parsed = wheel_tags(f.filename)
        if parsed is None or str(parsed[0]) != version:
            continue
        for interpreter, abi, tag in parsed[2]:
            if tag != platform or abi != interpreter or not interpreter.startswith("cp"):
                continue
            python = f"{interpreter[2]}.{interpreter[3:]}"
            rank = (python == READ_PYTHON, *shapes.version_key(python))
            if best is None or (rank, parsed[1]) > (best[0], best[1]):
                best = (rank, parsed[1], f)
    return best[2] if best else None


def cuda_of(metadata: str, machine: str) -> str | None:
    """The CUDA version (``13.0``) of the runtime a wheel's requirements pull on Linux ``machine``; None for none."""
    environment = {**_LINUX, "platform_machine": machine}
    for line in HeaderParser().parsestr(metadata).get_all("Requires-Dist") or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if not _CUDA_PIN.match(requirement.name.lower()):
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        pinned = [s.version for s in requirement.specifier if s.operator == "=="]
        if pinned:
            return ".".join(pinned[0].split(".")[:2])
    return None


class UploadIncomplete(CommandFailed):
    """PyPI has some of a release's wheels, not all of them yet: an upload in progress (``upload_incomplete``)."""


def _platforms(files: Sequence[pages.IndexFile], version: str) -> dict[str, set[str]]:
    """The CPythons of ``version``'s wheels on each platform it has any for (``x86_64``, ``aarch64``, ``win_amd64``)."""
    found = {arch: cpythons(files, version, tag) for arch, tag in PLATFORM_TAGS.items()}
    return {arch: pythons for arch, pythons in found.items() if pythons}


def _python_gaps(before: dict[str, set[str]], have: dict[str, set[str]]) -> list[str]:
    """Each platform's CPythons the previous minor has wheels for and this release has not (``manylinux_2_28_aarch64
    CPython 3.12``), on the platforms both have; a CPython older than every one of this release's is one it dropped
    (torch 2.15 leaves 3.10 out), not a gap."""
    every = [p for pythons in have.values() for p in pythons]
    if not every:
        return []
    floor = shapes.version_key(min(every, key=shapes.version_key))
    gaps = []
    for arch, pythons in before.items():
        missing = sorted((p for p in pythons - have.get(arch, pythons) if shapes.version_key(p) >= floor),
                         key=shapes.version_key)
        if missing:
            gaps.append(f"{PLATFORM_TAGS[arch]} CPython {' '.join(missing)}")
    return gaps


def _differ(pythons: dict[str, set[str]]) -> str:
    """Each platform's CPythons (``manylinux_2_28_x86_64 3.12 3.13; win_amd64 3.12``) when they differ, else ``""``."""
    if len({frozenset(found) for found in pythons.values()}) < 2:
        return ""
    return "; ".join(f"{PLATFORM_TAGS[a]} {' '.join(sorted(p, key=shapes.version_key)) or 'none'}"
                     for a, p in pythons.items())


def _free_threaded(files: Sequence[pages.IndexFile], version: str, platforms: Iterable[str]) -> dict[str, set[str]]:
    """The free-threaded CPythons of ``version``'s wheels on each of ``platforms`` (``x86_64``, ...)."""
    return {arch: cpythons(files, version, PLATFORM_TAGS[arch], True) for arch in platforms}


def upload_incomplete(source: Source, version: str, previous: str | None) -> UploadIncomplete | None:
    """Why torch ``version``'s wheels on the index look like an upload in progress (None: they do not), against
    ``previous`` (the previous minor's newest patch; None for the oldest release read)."""
    files = [f for f in source.files("torch") if f.filename.startswith((f"torch-{version}-", f"torch-{previous}-"))]
    have = _platforms(files, version)
    reasons = []
    if previous is not None:
        before = _platforms(files, previous)
        lacking = [PLATFORM_TAGS[a] for a in before if a not in have]
        if lacking:
            reasons.append(f"no {' or '.join(lacking)} wheel yet (torch {previous} has them)")
        gaps = _python_gaps(before, have)
        if gaps:
            reasons.append(f"no {', '.join(gaps)} wheel yet (torch {previous} has them)")
    if not have.get("x86_64", set()) & have.get("win_amd64", set()):
        reasons.append("no CPython with both a manylinux_2_28_x86_64 and a win_amd64 wheel")
    elif _differ(have):
        reasons.append(f"its platforms' CPythons differ ({_differ(have)})")
    elif _differ(threaded := _free_threaded(files, version, have)):
        reasons.append(f"its platforms' free-threaded CPythons differ ({_differ(threaded)})")
    if not reasons:
        return None
    return UploadIncomplete(f"upload incomplete, try later: torch {version} is on PyPI with {', '.join(reasons)}",
                            version, "nothing was written; run `cuda-ext-farm adopt-torch` again when PyTorch's upload "
                            "has finished (the scheduled run does each day)")


def observe(version: str, source: Source) -> shapes.TorchRelease:
    """torch ``version`` as PyPI has it, as a ``TorchRelease`` (read it only once ``upload_incomplete`` says
    nothing)."""
    files = [f for f in source.files("torch") if f.filename.startswith(f"torch-{version}-")]
    x86 = wheel_for(files, version, "x86_64")
    if x86 is None:
        raise UploadIncomplete("upload incomplete, try later: PyPI has no manylinux_2_28 x86_64 wheel of this torch",
                               version, "nothing was written; run `cuda-ext-farm adopt-torch` again when PyTorch's "
                               "upload has finished")
    cuda = cuda_of(source.metadata(x86), "x86_64")
    if cuda is None:
        raise CommandFailed("torch's x86_64 wheel requires no CUDA runtime", x86.filename,
                            "PyTorch changed how its wheels pull CUDA: record the release by hand")
    pythons = cpythons(files, version, PLATFORM_TAGS["x86_64"]) & cpythons(files, version, "win_amd64")
    threaded = cpythons(files, version, PLATFORM_TAGS["x86_64"], True) & cpythons(files, version, "win_amd64", True)
    facts = source.wheel_facts(x86)
    arm = wheel_for(files, version, "aarch64")
    aarch64 = arm is not None and cuda_of(source.metadata(arm), "aarch64") is not None
    sass_aarch64 = _sass(source.wheel_facts(arm).flags) if aarch64 and arm is not None else ()
    return shapes.TorchRelease(version, cuda, tuple(sorted(pythons, key=shapes.version_key)), aarch64=aarch64,
                               sass=_sass(facts.flags), sass_aarch64=sass_aarch64, cxx=facts.cxx,
                               free_threaded=tuple(sorted(threaded, key=shapes.version_key)))


def _sass(flags: Sequence[str]) -> tuple[str, ...]:
    return tuple(torch_archs.sm_to_arch(f) for f in flags if f.startswith("sm_"))


def record(folder: Path, versions: Sequence[str], source: Live | None = None) -> None:
    """Write a snapshot ``Recorded`` reads: torch's index page trimmed to ``versions``' Linux and Windows wheels, the
    read wheels' requirements (``Requires-Dist`` only) and facts."""
    source = source or Live()
    keep = [f for f in source.files("torch") if any(f.filename.startswith(f"torch-{v}-") for v in versions)
            and f.filename.endswith(tuple(f"{tag}.whl" for tag in PLATFORM_TAGS.values()))]
    (folder / "simple").mkdir(parents=True, exist_ok=True)
    (folder / "metadata").mkdir(exist_ok=True)
    page = {"meta": {"api-version": "1.1"}, "name": "torch",
            "files": [{"filename": f.filename, "url": f.filename, "hashes": {"sha256": f.sha256},
                       "requires-python": f.requires_python} for f in keep]}
    (folder / "simple" / "torch.json").write_text(json.dumps(page, indent=1) + "\n")
    facts = {}
    for version in versions:
        for arch in ("x86_64", "aarch64"):
            wheel = wheel_for(keep, version, arch)
            if wheel is None:
                continue
            wheel = next(f for f in source.files("torch") if f.filename == wheel.filename)
            requirements = HeaderParser().parsestr(source.metadata(wheel)).get_all("Requires-Dist") or []
            (folder / "metadata" / f"{wheel.filename}.metadata").write_text(
                "Metadata-Version: 2.1\nName: torch\nVersion: " + version + "\n"
                + "".join(f"Requires-Dist: {r}\n" for r in requirements))
            if arch == "x86_64" or cuda_of(source.metadata(wheel), "aarch64"):
                facts[wheel.filename] = source.wheel_facts(wheel).as_dict()
    (folder / "wheels.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
