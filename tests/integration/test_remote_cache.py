"""A compile cache that outgrows one machine: with FARM_CCACHE_REMOTE pointing at an HTTP server, a second
clean build with an empty local cache gets its objects from the server.

The server is a small GET/PUT/HEAD store on loopback (what nginx's WebDAV module or any object store with
HTTP does for a team); the build is the tiny fixture's in-place build, CPU-only, through the pinned ccache.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from ci.toolchain import toolkit

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"

pytestmark = [pytest.mark.slow, pytest.mark.extended]


class Store(http.server.BaseHTTPRequestHandler):
    objects: ClassVar[dict[str, bytes]] = {}
    gets_found = 0
    puts = 0

    def do_GET(self) -> None:
        data = self.objects.get(self.path)
        if data is None:
            self.send_response(404)
            self.end_headers()
            return
        type(self).gets_found += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:
        self.send_response(200 if self.path in self.objects else 404)
        self.end_headers()

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.objects[self.path] = self.rfile.read(length)
        type(self).puts += 1
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/ccache"
    finally:
        httpd.shutdown()


def develop(project: Path, cache: Path, remote: str, build: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250", "FARM_CCACHE_REMOTE": remote,
           "CCACHE_DIR": str(cache), "FARM_BUILD_DIR": str(build)}
    return subprocess.run([sys.executable, "-m", "ci", "develop", "--project", str(project), "--cpu", "--clean"],
                          cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def stats(cache: Path) -> str:
    ccache = toolkit.ensure_ccache()
    return subprocess.run([str(ccache), "--print-stats"], env={**os.environ, "CCACHE_DIR": str(cache)},
                          capture_output=True, text=True, check=True).stdout


def test_second_clean_build_hits_the_remote_cache(server: str, tmp_path: Path) -> None:
    import shutil

    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    first = develop(project, tmp_path / "cache-one", server, tmp_path / "build-one")
    assert first.returncode == 0, first.stdout[-3000:]
    assert Store.puts > 0  # the objects went to the server
    for lib in project.rglob("*.so"):
        lib.unlink()
    second = develop(project, tmp_path / "cache-two", server, tmp_path / "build-two")
    assert second.returncode == 0, second.stdout[-3000:]
    assert Store.gets_found > 0
    counters = dict(line.split("\t", 1) for line in stats(tmp_path / "cache-two").splitlines() if "\t" in line)
    assert int(counters["remote_storage_hit"]) >= 1 and int(counters.get("local_storage_hit", "0")) == 0
