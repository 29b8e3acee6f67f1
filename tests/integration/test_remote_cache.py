"""A compile cache that outgrows one machine, against real servers on loopback (tests/integration/cache_servers.py):
Debian's redis-server and nginx's WebDAV module.

* The default suite checks the shared storage's failures at sccache's start (server full: read-only, one warning)
  and ccache's and sccache's own use of both servers on a small compile, in seconds.
* ``extended``: whole farm builds. A second clone of fusedops, with an empty local cache and a build folder of its
  own, takes its CUDA objects from the redis server (sccache's own statistics say how many) and writes the same
  wheel (SHA-256); the many_kernels fixture does the same through the WebDAV store with either engine; and a build
  against a storage that is down, unresolvable or full finishes with one warning line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.toolchain import compiler_cache, toolkit
from ci.toolchain.compiler_cache import choice, sccache_server
from tests.integration import cache_servers

ROOT = Path(__file__).resolve().parents[2]
MANY = ROOT / "tests" / "fixtures" / "many_kernels"
KERNEL = ("__global__ void twice(float* x, int n) {\n"
          "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2;\n}\n")


@pytest.fixture
def sccache() -> Path:
    return sccache_server.ensure_sccache()


def nvcc() -> Path:
    from ci.universe import matrix

    return toolkit.ensure_toolkit(matrix.get_cell("13.0")).nvcc


def test_a_full_storage_is_read_only_with_one_warning(sccache: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with cache_servers.redis(tmp_path / "redis", maxmemory="1") as url:
        server = sccache_server.Server(sccache, tmp_path / "work", choice.CacheChoice("sccache",
                                                                                     choice.parse_remote(url)))
        try:
            env = server.start()
            assert env["SCCACHE_REDIS_ENDPOINT"] == url  # still read from
        finally:
            server.stop()
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"{url} takes no writes" in err


def compile_through(engine: str, launcher: Path, env: dict[str, str], folder: Path) -> None:
    source = folder / "k.cu"
    source.write_text(KERNEL)
    subprocess.run([str(launcher), str(nvcc()), "-c", str(source), "-o", str(folder / "k.o"),
                    "-gencode=arch=compute_90,code=sm_90"], env={**os.environ, **env}, check=True, cwd=folder)


@pytest.mark.parametrize("server", ["redis", "webdav"])
def test_sccache_shares_cuda_objects_through_a_real_server(sccache: Path, tmp_path: Path, server: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    starts = {"redis": cache_servers.redis, "webdav": cache_servers.webdav}
    with starts[server](tmp_path / server) as url:
        found = []
        for clone in ("one", "two"):  # two machines: own folders, own empty local caches
            folder = tmp_path / clone
            folder.mkdir()
            chosen = choice.CacheChoice("sccache", choice.parse_remote(url))
            monkeypatch.setenv("SCCACHE_DIR", str(folder / "local"))  # the server's local cache: empty
            run = sccache_server.Server(sccache, folder / "work", chosen, (folder,))
            try:
                env = run.start()
                compile_through("sccache", sccache, env, folder)
                found.append(sccache_server.counts(run.stats()))
            finally:
                run.stop()
        if server == "webdav":
            assert cache_servers.stored_files(tmp_path / server) > 0
    assert found[0]["hits"] == 0 and found[0]["misses"] > 0
    # The object (CUDA: nvcc's whole output) and its SASS (CUBIN) came from the server; the PTX step hashes the
    # source's path (cicc's --orig_src_path_name), which differs between the two folders.
    assert found[1]["hits_CUDA"] == 1 and found[1]["hits_CUBIN"] == 1


def test_ccache_shares_objects_through_nginx_webdav(tmp_path: Path) -> None:
    ccache = toolkit.ensure_ccache()
    with cache_servers.webdav(tmp_path / "dav") as url:
        for clone in ("one", "two"):
            folder = tmp_path / clone
            folder.mkdir()
            env = {"CCACHE_DIR": str(folder / "local"), "CCACHE_REMOTE_STORAGE": url, "CCACHE_BASEDIR": str(folder),
                   "CCACHE_NOHASHDIR": "1", "CCACHE_STATSLOG": str(folder / "stats.log")}
            compile_through("ccache", ccache, env, folder)
        assert cache_servers.stored_files(tmp_path / "dav") > 0
    second = (tmp_path / "two" / "stats.log").read_text().split()
    assert "remote_storage_hit" in second and "cache_miss" not in second


PASSWORD = "Pw" + "4f1d9c2e77a0"
CREDENTIAL_FORMS = {"password": f"redis://:{PASSWORD}@127.0.0.1:{{port}}",
                    "user": f"redis://alice:{PASSWORD}@127.0.0.1:{{port}}"}


@pytest.mark.parametrize("engine", ["ccache", "sccache"])
@pytest.mark.parametrize("form", sorted(CREDENTIAL_FORMS))
def test_a_redis_url_with_credentials_shares_objects_with_either_engine(tmp_path: Path, engine: str, form: str,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """FARM_CCACHE_REMOTE as a user writes it (``redis://:pw@host:port``, ``redis://user:pw@host:port``) against a
    redis-server that refuses every client without it: a second machine's compile, from an empty local cache,
    is a hit from the server, through the farm's own fronts and server."""
    with cache_servers.redis(tmp_path / "redis", password=PASSWORD,
                             user="alice" if form == "user" else None) as plain:
        monkeypatch.setenv("FARM_COMPILE_CACHE", engine)
        monkeypatch.setenv("FARM_CCACHE_REMOTE", CREDENTIAL_FORMS[form].format(port=plain.rsplit(":", 1)[1]))
        lines = []
        for machine in ("one", "two"):
            folder = tmp_path / machine
            folder.mkdir()
            (folder / "a.cpp").write_text("int twice(int x) { return 2 * x; }\n")
            monkeypatch.setenv("CCACHE_DIR", str(folder / "ccache"))
            monkeypatch.setenv("SCCACHE_DIR", str(folder / "sccache"))
            with compiler_cache.for_build("host", {"CXX": "g++"}, folder / "work", folder) as added:
                subprocess.run([added["CXX"], "-c", "a.cpp", "-o", "a.o"], cwd=folder, check=True,
                               env={**os.environ, **added})
            err = capsys.readouterr().err
            lines.append(next(x for x in err.splitlines() if x.startswith("farm-compile-cache:")))
            assert "warning:" not in err and PASSWORD not in err
    first, second = (dict(item.split("=") for item in line.split()[1:]) for line in lines)
    assert first["misses"] == "1" and second["hits"] == "1" and second["misses"] == "0", lines
    if engine == "ccache":
        assert second["remote_hits"] == "1"


# --- whole builds (extended) ---------------------------------------------------------------------------------


def clone(tmp_path: Path, name: str, source: Path = ROOT) -> Path:
    """A checkout of the farm's repository (fusedops is its default project), or of another clone of it (the same
    commit: the wheel records its commit)."""
    folder = tmp_path / name
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(source), str(folder)], check=True)
    return folder


def farm_build(project: Path, work: Path, env: dict[str, str], *args: str,
               build: Path | None = None) -> tuple[str, Path, dict[str, object]]:
    """``python -m ci build`` of ``project`` with the local caches, the wheelhouse and (unless ``build`` names
    another) the build folder in ``work``: its output, the wheel, sccache's statistics.

    Two machines that share a cache build in the same build folder path (the default ``<cache>/build/<project>``
    on runners of one image): nvcc writes the source's absolute path into anonymous-namespace names and the
    compile flags carry it (``-ffile-prefix-map``), so another path is other objects (docs/reproducible-builds.md).
    A test of a second machine empties ``build`` first."""
    build = build or work / "build"
    shutil.rmtree(build, ignore_errors=True)
    full = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250", "SCCACHE_DIR": str(work / "sccache"),
            "CCACHE_DIR": str(work / "ccache"), **env}
    out = subprocess.run([sys.executable, "-m", "ci", "build", "--project", str(project), "--build-dir",
                          str(build), "--wheelhouse", str(work / "wheelhouse"), *args], cwd=ROOT, env=full,
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=3600)
    assert out.returncode == 0, out.stdout[-4000:]
    wheel = next((work / "wheelhouse").glob("*/*.whl"))
    stats = next(build.glob("*/sccache-stats.json"), None)
    return out.stdout, wheel, json.loads(stats.read_text()) if stats else {}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.extended
def test_a_second_clone_of_fusedops_takes_its_cuda_objects_from_redis(tmp_path: Path) -> None:
    archs = ("--arch-list", "8.0;9.0+PTX")
    with cache_servers.redis(tmp_path / "redis") as url:
        env = {"FARM_COMPILE_CACHE": "sccache", "FARM_CCACHE_REMOTE": url}
        build = tmp_path / "build"  # the same path on both machines, emptied in between
        first_clone = clone(tmp_path, "clone-a")
        _, first, cold = farm_build(first_clone, tmp_path / "a", env, *archs, build=build)
        assert cache_servers.redis_keys(url) > 0
        said, second, warm = farm_build(clone(tmp_path, "clone-b", first_clone), tmp_path / "b", env, *archs,
                                        build=build)
    figures = sccache_server.counts(warm)
    print(f"cold: {sccache_server.counts(cold)}\nsecond clone: {figures}\n{sha256(first)} {first.name}\n"
          f"{sha256(second)} {second.name}")
    # fusedops has five .cu files: each nvcc call's object (CUDA) and its two architectures' PTX and SASS.
    assert figures["hits_CUDA"] == 5 and figures["hits_PTX"] >= 5 and figures["hits_CUBIN"] >= 5
    assert figures["misses"] == 0 and not [line for line in said.splitlines() if "compile cache" in line
                                           and "warning:" in line]
    assert sha256(first) == sha256(second)


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("engine", ["ccache", "sccache"])
def test_many_kernels_through_the_webdav_store_in_a_second_folder(tmp_path: Path, engine: str) -> None:
    with cache_servers.webdav(tmp_path / "dav") as url:
        env = {"FARM_COMPILE_CACHE": engine, "FARM_CCACHE_REMOTE": url}
        first_copy, second_copy = tmp_path / "p1", tmp_path / "p2"
        shutil.copytree(MANY, first_copy)
        shutil.copytree(MANY, second_copy)
        build = tmp_path / "build"
        _, first, _ = farm_build(first_copy, tmp_path / "a", env, "--arch-list", "9.0", build=build)
        said, second, stats = farm_build(second_copy, tmp_path / "b", env, "--arch-list", "9.0", build=build)
    line = next(x for x in said.splitlines() if x.startswith("farm-compile-cache:"))
    figures = dict(item.split("=") for item in line.split()[1:])
    assert int(figures["hits"]) >= 8 and sha256(first) == sha256(second)
    if engine == "ccache":
        assert int(figures["remote_hits"]) >= 8
    else:
        assert sccache_server.counts(stats)["hits_PTX"] == 8


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("fault", ["down", "unresolvable", "full", "hangs"])
def test_a_failing_shared_storage_is_one_warning_and_the_build_finishes(tmp_path: Path, fault: str) -> None:
    project = tmp_path / "p"
    shutil.copytree(MANY, project)
    with cache_servers.redis(tmp_path / "redis", maxmemory="1") as full, cache_servers.black_hole() as hole:
        url = {"down": f"redis://127.0.0.1:{cache_servers.free_port()}", "full": full, "hangs": hole,
               "unresolvable": "redis://no-such-host.invalid:6379"}[fault]
        said, _, _ = farm_build(project, tmp_path / "a", {"FARM_COMPILE_CACHE": "sccache", "FARM_CCACHE_REMOTE": url},
                                "--arch-list", "9.0")
    warnings = [line for line in said.splitlines() if "warning:" in line and "compile cache" in line]
    assert len(warnings) == 1, said[-3000:]
