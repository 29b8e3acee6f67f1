"""PyPI as pip sees it, without downloads: a local page server for ``pip install --dry-run`` checks
(``ci/release/install_lines/pip_check.py``).

pip resolves from each file's PEP 658 metadata, which PyPI serves next to the file (``<file>.metadata``). Where
the index pages do not announce it (a mirror or proxy that drops the attribute; pip then downloads every
candidate wheel: torch and its CUDA libraries are several GB), :class:`PyPIView` serves pages over PyPI's JSON
simple API that announce it, serves PyPI's ``.metadata`` file, or reads the wheel's METADATA with HTTP range
requests where PyPI has none, and refuses whole-file downloads (a dry run needs none; one asked for fails the
check). Standard library only: no well-kept library serves this (pip's own ``fast-deps`` still downloaded whole
wheels here, 4.7 GB in 50 s).
"""
from __future__ import annotations

import base64
import functools
import hashlib
import html
import http.server
import json
import os
import ssl
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci import settings
from ci.errors import UsageError

if TYPE_CHECKING:
    pass




PYPI_SIMPLE = "https://pypi.org/simple"

@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The CA bundle pip uses (``pages.pip_settings``: PIP_CERT, then pip's configuration), as lockcheck."""
    from ci.universe.lockcheck import pages

    cafile = pages.pip_settings().get("cert") or settings.current().environ.get("SSL_CERT_FILE")
    return ssl.create_default_context(cafile=cafile if cafile and Path(cafile).is_file() else None)


def _get(url: str, headers: Mapping[str, str] | None = None) -> tuple[bytes, Mapping[str, str]]:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    with urllib.request.urlopen(request, timeout=120, context=_ssl_context()) as response:
        return response.read(), {k.lower(): v for k, v in response.headers.items()}


def _range(url: str, spec: str) -> tuple[bytes, int]:
    data, headers = _get(url, {"Range": f"bytes={spec}"})
    total = headers.get("content-range", "").rpartition("/")[2]
    return data, int(total) if total.isdigit() else len(data)


def remote_wheel_metadata(url: str) -> bytes:
    """A remote wheel's ``*.dist-info/METADATA``, read with HTTP range requests (the zip's end, its central
    directory, the one member), never the whole file."""
    tail, total = _range(url, "-65536")
    start = total - len(tail)
    end = tail.rfind(b"PK\x05\x06")
    if end < 0:
        raise UsageError("not a zip archive at its end", url, "the file is no wheel")
    cd_size, cd_offset = struct.unpack("<II", tail[end + 12:end + 20])
    if cd_offset == 0xFFFFFFFF:
        locator = tail.rfind(b"PK\x06\x07")
        record = struct.unpack("<Q", tail[locator + 8:locator + 16])[0]
        z64 = tail[record - start:record - start + 56] if record >= start else _range(url, f"{record}-{record + 55}")[0]
        cd_size, cd_offset = struct.unpack("<QQ", z64[40:56])
    if cd_offset >= start:
        directory = tail[cd_offset - start:cd_offset - start + cd_size]
    else:
        directory = _range(url, f"{cd_offset}-{cd_offset + cd_size - 1}")[0]
    pos = 0
    while directory[pos:pos + 4] == b"PK\x01\x02":
        method, = struct.unpack("<H", directory[pos + 10:pos + 12])
        comp, uncomp, name_len, extra_len, comment_len = struct.unpack("<IIHHH", directory[pos + 20:pos + 34])
        offset, = struct.unpack("<I", directory[pos + 42:pos + 46])
        name = directory[pos + 46:pos + 46 + name_len].decode("utf-8")
        extra = directory[pos + 46 + name_len:pos + 46 + name_len + extra_len]
        if 0xFFFFFFFF in (uncomp, comp, offset):
            comp, offset = _zip64_sizes(extra, uncomp, comp, offset)
        if name.endswith(".dist-info/METADATA") and name.count("/") == 1:
            head = _range(url, f"{offset}-{offset + 29}")[0]
            local_name, local_extra = struct.unpack("<HH", head[26:30])
            first = offset + 30 + local_name + local_extra
            data = _range(url, f"{first}-{first + comp - 1}")[0] if comp else b""
            return zlib.decompressobj(-15).decompress(data) if method == 8 else data
        pos += 46 + name_len + extra_len + comment_len
    raise UsageError("the wheel has no .dist-info/METADATA", url, "the file is no sound wheel")


def _zip64_sizes(extra: bytes, uncomp: int, comp: int, offset: int) -> tuple[int, int]:
    """The compressed size and local header offset from a ZIP64 extra field (its values come in the order
    uncompressed size, compressed size, offset, each present only when its 32-bit field is 0xFFFFFFFF)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack("<HH", extra[pos:pos + 4])
        if tag == 1:
            values = list(struct.unpack(f"<{size // 8}Q", extra[pos + 4:pos + 4 + size // 8 * 8]))
            if uncomp == 0xFFFFFFFF and values:
                values.pop(0)
            if comp == 0xFFFFFFFF and values:
                comp = values.pop(0)
            if offset == 0xFFFFFFFF and values:
                offset = values.pop(0)
            return comp, offset
        pos += 4 + size
    return comp, offset


class PyPIView:
    """PyPI's simple index as pip sees it at ``url`` (``http://127.0.0.1:PORT/simple/``): project pages from
    PyPI's JSON simple API, each wheel announcing its PEP 658 metadata, which this server serves (PyPI's own
    ``.metadata`` file; else read from the wheel with range requests), cached under ``cache``. A whole file is
    refused (404) and recorded in :attr:`downloads`: a dry run needs none."""

    def __init__(self, upstream: str = PYPI_SIMPLE, cache: Path | None = None) -> None:
        from ci import toolenv

        self.upstream = upstream.rstrip("/")
        self.cache = cache or toolenv.cache_root() / "pypi-metadata"
        self.downloads: list[str] = []
        self.metadata_reads = {"pypi": 0, "range": 0, "cache": 0}
        self._pages: dict[str, bytes] = {}
        self._lock = threading.Lock()
        view = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                try:
                    status, body = view.answer(self.path)
                except (urllib.error.URLError, OSError, UsageError) as exc:
                    status, body = 502, str(exc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if self.path.startswith("/simple/") else
                                 "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/simple/"

    def __enter__(self) -> PyPIView:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str) -> tuple[int, bytes]:
        parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(path).path.split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            return self._page(parts[1])
        if len(parts) == 3 and parts[0] == "f":
            original = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
            if parts[2].endswith(".metadata"):
                return 200, self._metadata(original)
            with self._lock:
                self.downloads.append(parts[2])
            return 404, b"whole files are not served: the check resolves from metadata"
        return 404, b""

    def _page(self, project: str) -> tuple[int, bytes]:
        with self._lock:
            cached = self._pages.get(project)
        if cached is not None:
            return 200, cached
        try:
            raw, _ = _get(f"{self.upstream}/{project}/", {"Accept": "application/vnd.pypi.simple.v1+json"})
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        data = json.loads(raw)
        links = []
        for item in data.get("files", []):
            token = base64.urlsafe_b64encode(item["url"].encode()).decode().rstrip("=")
            attrs = f'href="/f/{token}/{urllib.parse.quote(item["filename"])}#sha256={item["hashes"]["sha256"]}"'
            if item.get("requires-python"):
                attrs += f' data-requires-python="{html.escape(item["requires-python"])}"'
            if item.get("yanked"):
                attrs += ' data-yanked=""'
            if item["filename"].endswith(".whl"):
                attrs += ' data-dist-info-metadata="true" data-core-metadata="true"'
            links.append(f"<a {attrs}>{html.escape(item['filename'])}</a><br>")
        body = ("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()
        with self._lock:
            self._pages[project] = body
        return 200, body

    def _metadata(self, url: str) -> bytes:
        path = self.cache / hashlib.sha256(url.encode()).hexdigest()[:32]
        if path.is_file():
            self.metadata_reads["cache"] += 1
            return path.read_bytes()
        try:
            data, _ = _get(url + ".metadata")
            self.metadata_reads["pypi"] += 1
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            data = remote_wheel_metadata(url)
            self.metadata_reads["range"] += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        part.write_bytes(data)
        os.replace(part, path)
        return data
