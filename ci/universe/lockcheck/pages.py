"""The index pip installs from, read as pip reads it: its project pages (PEP 691 JSON, or PEP 503 HTML), each
fetched once, and pip's own ``index-url`` and ``cert`` settings."""

from __future__ import annotations

import concurrent.futures
import dataclasses
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
from collections.abc import Iterable
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from ci import settings as farm_settings
from ci.errors import CommandFailed
from ci.universe.lockcheck.platforms import Environment

PYPI = "https://pypi.org/simple/"
#: PEP 691's JSON first; a PEP 503 HTML page from an index that has no JSON.
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


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
