"""Distributed CUDA compilation on sccache-dist: a scheduler and one build server on loopback (bubblewrap sandbox,
token auth for the client, a JWT for the server), the farm pointed at the scheduler with FARM_SCCACHE_SCHEDULER and
FARM_SCCACHE_TOKEN. sccache 0.16 splits each nvcc call into cudafe++, one cicc + ptxas pair per architecture and the
host compile, and sends each part to the build server (it packages the local toolkit as the server's toolchain).

Extended (``nox -s tests-extended``): whole farm builds. Where this machine cannot sandbox the build server's
compiles, the tests skip with the reason it gives (``cache_servers.sandbox_blocked``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ci.toolchain.compiler_cache import sccache_server
from tests.integration import cache_servers
from tests.integration.test_remote_cache import MANY, farm_build, sha256

pytestmark = [pytest.mark.slow, pytest.mark.extended]


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[tuple[str, str]]:
    dist = sccache_server.ensure_sccache().with_name("sccache-dist")
    with cache_servers.sccache_dist(tmp_path / "dist", dist) as found:
        yield found


def dist_env(scheduler: tuple[str, str]) -> dict[str, str]:
    url, token = scheduler
    return {"FARM_SCCACHE_SCHEDULER": url, "FARM_SCCACHE_TOKEN": token}


def test_many_kernels_compiles_on_the_build_server_and_writes_the_local_wheel(
        scheduler: tuple[str, str], tmp_path: Path) -> None:
    project = tmp_path / "many"
    shutil.copytree(MANY, project)
    # The local build runs through sccache too (its own empty cache): sccache names nvcc's intermediate files its
    # own way, so its objects differ from an uncached build's by that name (compiler_cache.sccache_nvcc_flags).
    build = tmp_path / "build"  # one build folder path for both (farm_build empties it)
    _, local, _ = farm_build(project, tmp_path / "local", {"FARM_COMPILE_CACHE": "sccache"}, build=build)
    said, remote, stats = farm_build(project, tmp_path / "dist", dist_env(scheduler), build=build)
    figures = sccache_server.counts(stats)
    print(f"dist: {figures}\nlocal {sha256(local)}\ndist  {sha256(remote)}")
    # 8 kernel files x 4 architectures: a cicc and a ptxas each, and cudafe++ per file, on the build server. The
    # host compiles (8, and module.cpp) stay here: they run through the sysroot's wrapper script
    # (ci/linux/sysroot.py), which sccache cannot package as a toolchain ("Failed to analyse .../gcc with ldd: Elf
    # magic not found"), so it compiles them locally: counted as failed distributed compiles.
    assert figures["dist"] == 8 * (4 * 2 + 1) and figures["dist_errors"] <= 8 + 1
    assert not [line for line in said.splitlines() if "warning:" in line and "compile" in line]
    assert sha256(local) == sha256(remote)


def test_fusedops_compiles_on_the_build_server_and_writes_the_local_wheel(
        scheduler: tuple[str, str], tmp_path: Path) -> None:
    from tests.integration.test_remote_cache import clone

    project = clone(tmp_path, "fusedops")
    archs = ("--arch-list", "9.0+PTX")
    build = tmp_path / "build"
    _, local, _ = farm_build(project, tmp_path / "local", {"FARM_COMPILE_CACHE": "sccache"}, *archs, build=build)
    _, remote, stats = farm_build(project, tmp_path / "dist", dist_env(scheduler), *archs, build=build)
    figures = sccache_server.counts(stats)
    print(f"dist: {figures}\nlocal {sha256(local)}\ndist  {sha256(remote)}")
    assert figures["dist"] > 0  # the device code; host compiles stay here (see above)
    assert sha256(local) == sha256(remote)


def test_a_scheduler_that_is_down_is_one_warning_and_a_local_build(tmp_path: Path) -> None:
    project = tmp_path / "many"
    shutil.copytree(MANY, project)
    down = (f"http://127.0.0.1:{cache_servers.free_port()}", "token")
    said, _, stats = farm_build(project, tmp_path / "a", dist_env(down), "--arch-list", "9.0")
    assert [line for line in said.splitlines() if "warning:" in line and "sccache-dist" in line] != []
    assert sum(1 for line in said.splitlines() if "warning:" in line and "compile" in line) == 1
    assert sccache_server.counts(stats)["dist"] == 0
