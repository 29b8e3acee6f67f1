"""Proof that every hash-pinned lock installs, from wheels only, on every CPython and platform it serves.

``uv pip compile --universal`` resolves versions for every platform, but does not ask whether a pinned release
*has a file* for each of them: a lock can pin a version that has no win_amd64 wheel (pip then builds the sdist,
and fails without a compiler) or none that installs on an older CPython (``Requires-Python``). This module asks
the index: for each lock and each (CPython, platform) of ``pins.served``, every pin whose environment marker
applies there must have a wheel on the index whose tags that interpreter accepts, whose ``Requires-Python``
admits it, and whose SHA-256 is one of the lock's hashes (what ``pip install --require-hashes`` checks).

Wheels only (``--only-binary :all:`` semantics): an sdist would be built on the machine, with whatever compiler it
has or lacks. ``SDIST_ALLOWED`` lists the exceptions (none today).

The index is the one pip installs from: ``PIP_INDEX_URL``, else pip's configured ``index-url``, else PyPI. pip's
``extra-index-url`` and ``find-links`` are not asked: they are this machine's, not the runners' (which install from
the index alone). Pages are read once per project (PEP 691 JSON, or a PEP 503 HTML page), in parallel.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import html.parser
import json
import re
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from packaging import tags
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from ci import settings as farm_settings
from ci.errors import CommandFailed, UsageError
from ci.universe import pins

PYPI = "https://pypi.org/simple/"
#: PEP 691's JSON first; a PEP 503 HTML page from an index that has no JSON.
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
#: Pins allowed to install from an sdist (name -> why): none; a tool that needs one must say why here.
SDIST_ALLOWED: Mapping[str, str] = {}
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


@dataclasses.dataclass(frozen=True)
class IndexFile:
    """One file of a project's index page."""

    filename: str
    sha256: str | None
    requires_python: str | None
    #: Where the file is (absolute when the page's URL is known; ci/universe/torch_archs.py reads torch's wheels in
    #: place).
    #: Not part of a file's identity: the same file is the same wherever an index links it from.
    url: str = dataclasses.field(default="", compare=False)

    def admits(self, env: Environment) -> bool:
        """Whether its ``Requires-Python`` admits the interpreter (pip ignores one it cannot parse; so do we)."""
        if not self.requires_python:
            return True
        try:
            return SpecifierSet(self.requires_python).contains(env.full_version, prereleases=True)
        except InvalidSpecifier:
            return True


class _Links(html.parser.HTMLParser):
    """The anchors of a PEP 503 project page: (href, data-requires-python)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            if found.get("href"):
                self.links.append((found["href"] or "", found.get("data-requires-python")))


def parse_page(body: bytes, content_type: str, base: str = "") -> list[IndexFile]:
    """The files of a project page (``base``: its URL, which relative links resolve against): PEP 691 JSON, or
    PEP 503 HTML (hash in the link's ``#sha256=`` fragment)."""
    if "json" in content_type:
        data = json.loads(body)
        return [IndexFile(f["filename"], f.get("hashes", {}).get("sha256"), f.get("requires-python"),
                          urllib.parse.urljoin(base, f.get("url", ""))) for f in data.get("files", [])]
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    files = []
    for href, requires_python in parser.links:
        url = urllib.parse.urlsplit(href)
        digest = dict(urllib.parse.parse_qsl(url.fragment)).get("sha256")
        files.append(IndexFile(urllib.parse.unquote(url.path.rsplit("/", 1)[-1]), digest, requires_python,
                               urllib.parse.urljoin(base, href.split("#", 1)[0])))
    return files


def pip_settings() -> dict[str, str]:
    """pip's ``index-url`` and ``cert`` as ``pip install`` reads them: the environment, then the ``install``
    section of its configuration, then ``global`` (``pip config list``; nothing when pip is not there)."""
    settings: dict[str, str] = {}
    try:
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                check=False, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        listed = ""
    rank = {"global": 0, "install": 1, ":env:": 2}
    best: dict[str, int] = {}
    for line in listed.splitlines():
        m = re.match(r"^([^.=]+)\.(index-url|cert)='(.*)'$", line.strip())
        if m and m.group(1) in rank and rank[m.group(1)] >= best.get(m.group(2), -1):
            best[m.group(2)] = rank[m.group(1)]
            settings[m.group(2)] = m.group(3)
    environ = farm_settings.current().environ  # the environment the entry read (pip's own variables)
    for key, variable in (("index-url", "PIP_INDEX_URL"), ("cert", "PIP_CERT")):
        if environ.get(variable, "").strip():
            settings[key] = environ[variable].strip()
    return settings


class Index:
    """A package index's project pages, each fetched once (thread-safe; share one across checks)."""

    def __init__(self, url: str | None = None, cafile: str | None = None) -> None:
        settings = pip_settings() if url is None or cafile is None else {}
        self.url = (url or settings.get("index-url") or PYPI).rstrip("/") + "/"
        cafile = cafile or settings.get("cert")
        self._ssl = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()
        #: For reading the index's files too (ci/universe/torch_archs.py): pip's CA bundle.
        self.ssl_context = self._ssl
        self._pages: dict[str, list[IndexFile]] = {}
        self._guard = threading.Lock()

    def _fetch(self, name: str) -> list[IndexFile]:
        url = f"{self.url}{name}/"
        if url.startswith("file:"):
            # A folder index (pip reads <project>/index.html): no content negotiation, always HTML.
            page = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path)) / "index.html"
            return parse_page(page.read_bytes(), "text/html", url) if page.is_file() else []
        request = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "cuda-ext-farm lockcheck"})
        for attempt in range(3):
            try:
                with urllib.request.urlopen(request, timeout=60, context=self._ssl) as response:
                    return parse_page(response.read(), response.headers.get("Content-Type", ""), response.geturl())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return []
                error: Exception = exc
            except (urllib.error.URLError, OSError) as exc:
                error = exc
            if attempt == 2:
                raise CommandFailed(f"could not read the index page of {name} ({error})", url,
                                    "check the network, or PIP_INDEX_URL / pip's index-url and cert") from None
        return []  # not reached: the last attempt returns or raises

    def files(self, name: str) -> list[IndexFile]:
        """The files of project ``name`` (none when the index does not have it)."""
        key = canonicalize_name(name)
        with self._guard:
            if key in self._pages:
                return self._pages[key]
        files = self._fetch(key)
        with self._guard:
            return self._pages.setdefault(key, files)

    def prefetch(self, names: Iterable[str]) -> None:
        """Fetch the pages of ``names`` in parallel (an index answers about a hundred pages in seconds)."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(self.files, sorted(set(names))))


@dataclasses.dataclass(frozen=True)
class Problem:
    """A pin that does not install from a wheel in an environment its lock serves."""

    lock: str
    env: Environment
    pin: Pin
    why: str

    def __str__(self) -> str:
        return f"{self.lock}.txt: {self.pin} on {self.env}: {self.why}"


def why_not(pin: Pin, env: Environment, files: Sequence[IndexFile]) -> str | None:
    """None when one of ``files`` is a wheel of ``pin`` that installs in ``env`` with a hash the lock holds;
    otherwise why not."""
    accepted = env.tags()
    unhashed: list[str] = []
    sdists: list[IndexFile] = []
    for f in files:
        if not f.filename.endswith(".whl"):
            try:
                name, version = parse_sdist_filename(f.filename)
            except InvalidSdistFilename:
                continue
            if name == pin.name and version == pin.version and f.admits(env) and f.sha256 in pin.hashes:
                sdists.append(f)
            continue
        try:
            name, version, _, wheel_tags = parse_wheel_filename(f.filename)
        except InvalidWheelFilename:
            continue
        if name != pin.name or version != pin.version or not f.admits(env) or accepted.isdisjoint(wheel_tags):
            continue
        if f.sha256 in pin.hashes:
            return None
        unhashed.append(f.filename)
    if unhashed:
        return f"its wheel {unhashed[0]} installs here, but the lock lacks its hash: run `nox -s lock`"
    if sdists and pin.name in SDIST_ALLOWED:
        return None
    if sdists:
        return "no wheel installs here, only the sdist (pip would build it): pin another version, or add a marker"
    return "no file of it installs here: pin another version, or add a marker"


def check(names: Sequence[str] | None = None, index: Index | None = None,
          folder: Path = pins.REQUIREMENTS) -> list[Problem]:
    """Every pin of the locks ``names`` (all by default) that does not install from a wheel in an environment its
    lock serves; an empty list when every lock is good."""
    index = index or Index()
    locks = {name: read_lock(folder / f"{name}.txt") for name in (names or pins.all_locks())}
    index.prefetch(pin.name for found in locks.values() for pin in found)
    problems = []
    for name, found in locks.items():
        # The pinned release's files, found once: a page can list thousands (every numpy ever).
        releases = {pin: [f for f in index.files(pin.name) if _release_of(f.filename) == (pin.name, pin.version)]
                    for pin in found}
        for env in environments(name):
            for pin in found:
                if pin.applies(env):
                    why = why_not(pin, env, releases[pin])
                    if why:
                        problems.append(Problem(name, env, pin, why))
    return problems


@functools.cache
def _release_of(filename: str) -> tuple[NormalizedName, Version] | None:
    """(project, version) of a wheel or sdist file name; None for anything else."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[:2]
        return parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def require(names: Sequence[str] | None = None, index: Index | None = None) -> None:
    """``check``, raising with the problems listed when there are any."""
    problems = check(names, index)
    if problems:
        raise CommandFailed(f"{len(problems)} pins do not install from a wheel where their lock is used",
                            problems[0], "pin versions with wheels there, or mark Linux-only tools "
                            '(`; sys_platform == "linux"`) in the .in file, then run `nox -s lock`',
                            details="\n".join(map(str, problems)))
