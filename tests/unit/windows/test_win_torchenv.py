"""The Windows route's torch install (windows/torchenv.py ``ensure_torch``) through real pip against a package index
on loopback that a mirror URL with credentials names (``FARM_TORCH_INDEX_URL``): what it keeps holds no credential.
The index serves a wheel named and versioned as the target's CUDA torch, holding only ``torch/version.py`` (what
the install reads); pip, the index protocol and the install folder are real."""

from __future__ import annotations

import contextlib
import functools
import http.server
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ci.universe.targets import Target
from windows import torchenv

TOKEN = "mirrorTok" + "7c5e0a19"


def torch_wheel(folder: Path, version: str, cuda: str) -> Path:
    """A wheel of ``torch`` ``version`` whose ``torch/version.py`` says CUDA ``cuda``."""
    name = f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {"torch/__init__.py": "", "torch/version.py": f"__version__ = '{version}'\ncuda = '{cuda}'\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(folder / name, "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{p},,\n" for p in [*files, f"{info}/RECORD"]))
    return folder / name


@contextlib.contextmanager
def index_serving(root: Path) -> Iterator[int]:
    """A simple-API index of ``root`` on loopback (``/simple/torch/``), in a thread; yields its port."""
    handler = functools.partial(_Quiet, directory=str(root))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield int(server.server_address[1])
        finally:
            server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_torch_install_keeps_no_credential_of_its_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            fusedops_targets: tuple[Target, ...]) -> None:
    target = fusedops_targets[0]
    cuda = f"{target.cell.cuda_major}.0"
    project = tmp_path / "index" / "simple" / "torch"
    project.mkdir(parents=True)
    wheel = torch_wheel(project, f"{target.torch}+cu{target.cell.cuda_major}0", cuda)
    (project / "index.html").write_text(f'<a href="{wheel.name.replace("+", "%2B")}">{wheel.name}</a>\n')
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    with index_serving(tmp_path / "index") as port:
        monkeypatch.setenv("FARM_TORCH_INDEX_URL", f"http://mirror:{TOKEN}@127.0.0.1:{port}/simple/")
        folder = torchenv.ensure_torch(target, f"{sys.version_info.major}.{sys.version_info.minor}")
    assert (folder / "torch" / "version.py").is_file()
    marker = (folder / ".farm-complete").read_text()
    assert marker.startswith(f"{target.torch}+cu") and f"http://mirror:***@127.0.0.1:{port}/simple/" in marker
    kept = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert kept == []
