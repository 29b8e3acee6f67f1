"""The compile front (ci/nvcc/wrapper.py) in front of the farm's pinned ccache in front of the real nvcc 13.0: what
nvcc reads from NVCC_APPEND_FLAGS is part of the cache key (issue 45's first finding: ``-DFOO=1`` and then
``-DFOO=2`` were a hit, and the second object was the first's). sccache 0.16 hashes the variable itself."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ci.builds import arch_flags
from ci.toolchain import toolkit
from ci.toolchain.compiler_cache import ccache_log
from ci.universe import matrix

#: A kernel whose object holds FOO's value (in its SASS and in the host code).
KERNEL = "__global__ void k(int *p) { *p = FOO; }\nint foo() { return FOO; }\n"


def nvcc() -> Path:
    return toolkit.ensure_toolkit(matrix.get_cell("13.0")).nvcc


def compile_once(folder: Path, front: str, env: dict[str, str], appended: str) -> bytes:
    """One compile of the kernel as a build runs it: the wrapper first, the cache (``front``) behind it, the farm's
    deterministic flags after ``appended``."""
    source = folder / "k.cu"
    if not source.exists():
        source.write_text(KERNEL)
    (folder / "k.o").unlink(missing_ok=True)
    subprocess.run([sys.executable, "-I", str(arch_flags.WRAPPER), "-c", str(source), "-o", str(folder / "k.o"),
                    "-gencode=arch=compute_90,code=sm_90"], check=True, cwd=folder,
                   env={**os.environ, **env, "FARM_NVCC_NEXT": front, "FARM_NVCC_ARCH_LIST": "9.0",
                        "NVCC_APPEND_FLAGS": f"{appended} -objtemp -frandom-seed=k"})
    return (folder / "k.o").read_bytes()


@pytest.fixture
def ccache(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    env = {"CCACHE_DIR": str(tmp_path / "ccache"), "CCACHE_STATSLOG": str(tmp_path / "stats.log"),
           "CCACHE_BASEDIR": str(tmp_path), "CCACHE_NOHASHDIR": "1"}
    yield f"{shlex.quote(str(toolkit.ensure_ccache()))} {shlex.quote(str(nvcc()))}", env, tmp_path / "stats.log"


def hits_and_misses(stats: Path) -> tuple[int, int]:
    figures = ccache_log.counts(stats)
    stats.unlink(missing_ok=True)
    return figures["hits"], figures["misses"]


def test_ccache_misses_on_a_changed_nvcc_append_flags_and_hits_on_the_same(
        tmp_path: Path, ccache: tuple[str, dict[str, str], Path]) -> None:
    front, env, stats = ccache
    one = compile_once(tmp_path, front, env, "-DFOO=1")
    assert hits_and_misses(stats) == (0, 1)
    two = compile_once(tmp_path, front, env, "-DFOO=2")
    assert hits_and_misses(stats) == (0, 1), "a changed NVCC_APPEND_FLAGS was served from the cache"
    assert two != one
    assert compile_once(tmp_path, front, env, "-DFOO=1") == one  # equal inputs: a hit, the same object
    assert hits_and_misses(stats) == (1, 0)
    (tmp_path / "ccache").rename(tmp_path / "old-cache")
    assert compile_once(tmp_path, front, env, "-DFOO=2") == two  # the object an empty cache gives
