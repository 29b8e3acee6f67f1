"""PEP 658/714 in the farm's own indexes, proved with real pip over HTTP: a release folder's index announces each
wheel's ``.metadata`` file, so ``pip install --dry-run --report`` resolves from it and downloads no wheel; the
same index without the files makes pip download the wheel (so the test can fail).

The server is Python's ``http.server`` on 127.0.0.1 (a free port), in a thread; its log is what pip fetched.
pip runs from a venv with the pip the farm's install checks use (``install_lines.pip_check.PIP``, from PyPI): pip
23.2 downloads every wheel it resolved even in a dry run, metadata or not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from ci.release import assembly, index
from ci.release.install_lines import pip_check
from ci.release.manifest import Manifest, ReleaseFile, local_index

NAME = "tinymeta"
VERSION = "0.1.0"
VARIANT = "cu130"


def pure_wheel(folder: Path) -> Path:
    """A dependency-free pure wheel with ~256 KiB of incompressible payload, so a wheel download shows."""
    import base64

    def record_hash(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    info = f"{NAME}-{VERSION}.dist-info"
    blob = b"".join(hashlib.sha256(i.to_bytes(4, "little")).digest() for i in range(8192))
    files = {
        f"{NAME}/__init__.py": b"",
        f"{NAME}/payload.bin": blob,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\nRequires-Python: >=3.8\n\n"
                            .encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = ("".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in files.items())
                               + f"{info}/RECORD,,\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return path


def release(tmp_path: Path) -> Path:
    """A release folder (assets/, index/cu130/, ...) of the one wheel, written by the farm's own assembly."""
    from ci import wheelmeta

    wheel = pure_wheel(tmp_path / "built")
    item = ReleaseFile(name=wheel.name, sha256=wheelmeta.sha256_file(wheel), size=wheel.stat().st_size,
                       kind="wheel", pypi=True, pypi_reason="test", target="t", os="linux", variant=VARIANT,
                       cuda="13.0", python="3.8", tags=("py3-none-any",), requires_python=">=3.8",
                       metadata_sha256=hashlib.sha256(wheelmeta.metadata_bytes(wheel)).hexdigest())
    manifest = Manifest(project=NAME, version=VERSION, tag=None, commit=None, pypi_variant=VARIANT, files=(item,))
    out = tmp_path / "release"
    assembly.prepare_out(out)
    assembly.write_release(out, manifest, {wheel.name: wheel})
    assert assembly.verify_release(out) == manifest
    return out


class _Logged(http.server.SimpleHTTPRequestHandler):
    served: list[tuple[str, int]]

    def copyfile(self, source: BinaryIO, outputfile: Any) -> None:  # type: ignore[override]
        data = source.read()
        outputfile.write(data)
        self.served.append((self.path, len(data)))

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    log: list[tuple[str, int]] = []
    handler = type("Handler", (_Logged,), {"served": log})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def new_pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("new-pip") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return pip_check.with_new_pip(venv / "bin" / "python")


def dry_run(python: Path, base: str, tmp_path: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("PIP_")}
    env.update(PIP_CONSTRAINT=os.devnull, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               NO_PROXY="127.0.0.1")
    result = subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--report", "-", "--quiet",
                             "--no-deps", "--no-cache-dir", "--index-url", f"{base}/index/{VARIANT}/", NAME],
                            env=env, cwd=tmp_path, text=True, capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def fetched(log: list[tuple[str, int]], suffix: str) -> list[tuple[str, int]]:
    return [(path, size) for path, size in log if path.split("#")[0].endswith(suffix)]


def test_pip_resolves_from_the_metadata_file_and_downloads_no_wheel(tmp_path: Path, new_pip: Path) -> None:
    out = release(tmp_path)
    wheel = next((out / "assets").glob("*.whl"))
    with serve(out) as (base, log):
        report = dry_run(new_pip, base, tmp_path)
    [installed] = report["install"]
    assert installed["metadata"]["name"] == NAME and installed["download_info"]["url"].endswith(wheel.name)
    with_metadata = sum(size for _, size in log)
    version = subprocess.run([str(new_pip), "-m", "pip", "--version"], capture_output=True, text=True).stdout.split()[1]
    print(f"\npip {version}, with .metadata: pip fetched {with_metadata} bytes: {log}")
    assert fetched(log, ".whl") == []
    assert [size for _, size in fetched(log, ".whl.metadata")] == [(out / "assets" / f"{wheel.name}.metadata")
                                                                   .stat().st_size]

    # The same release without PEP 658: the pages carry no attribute and the files are gone; pip takes the wheel.
    (out / "assets" / f"{wheel.name}.metadata").unlink()
    manifest = Manifest.from_json((out / "assets" / "release-manifest.json").read_text())
    bare = dataclasses.replace(manifest, files=tuple(dataclasses.replace(f, metadata_sha256=None)
                                                     for f in manifest.files))
    shutil.rmtree(out / "index")
    index.write_site(out / "index", local_index(bare))
    assert "data-core-metadata" not in (out / "index" / VARIANT / NAME / "index.html").read_text()
    with serve(out) as (base, log):
        report = dry_run(new_pip, base, tmp_path)
    assert report["install"][0]["metadata"]["name"] == NAME
    without_metadata = sum(size for _, size in log)
    print(f"without .metadata: pip fetched {without_metadata} bytes: {log}")
    assert [size for _, size in fetched(log, ".whl")] == [wheel.stat().st_size]
    assert without_metadata > with_metadata + wheel.stat().st_size // 2
