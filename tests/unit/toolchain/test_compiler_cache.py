"""The compile cache's choices, fronts, statistics and the sccache server's fallbacks (real sccache where it runs)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ci import errors, proc
from ci.toolchain import compiler_cache, toolkit
from ci.toolchain.compiler_cache import ccache_log, choice, fronts, in_container, sccache_server

CACHE_VARIABLES = ("FARM_COMPILE_CACHE", "FARM_CCACHE", "FARM_CCACHE_REMOTE", "FARM_SCCACHE_SCHEDULER",
                   "FARM_SCCACHE_TOKEN")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_each_route_keeps_the_cache_it_had_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {r: choice.choose(r).engine for r in choice.ROUTES} == dict(choice.ROUTE_DEFAULT)
    monkeypatch.setenv("FARM_COMPILE_CACHE", "sccache")
    assert {choice.choose(r).engine for r in choice.ROUTES} == {"sccache"}
    monkeypatch.setenv("FARM_CCACHE", "off")
    assert {choice.choose(r).engine for r in choice.ROUTES} == {None}


def test_a_scheduler_or_the_gha_cache_picks_sccache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CCACHE_REMOTE", "gha")
    assert choice.choose("host").engine == "sccache"
    assert choice.choose("host").remote == choice.Remote("gha", "gha")
    monkeypatch.setenv("FARM_COMPILE_CACHE", "ccache")
    with pytest.raises(errors.UsageError, match="FARM_CCACHE_REMOTE=gha needs sccache"):
        choice.choose("host")
    monkeypatch.delenv("FARM_CCACHE_REMOTE")
    monkeypatch.setenv("FARM_SCCACHE_SCHEDULER", "http://127.0.0.1:10600")
    monkeypatch.setenv("FARM_SCCACHE_TOKEN", "t0ken")
    with pytest.raises(errors.UsageError, match="FARM_SCCACHE_SCHEDULER needs sccache"):
        choice.choose("host")
    monkeypatch.delenv("FARM_COMPILE_CACHE")
    assert choice.choose("host") == choice.CacheChoice("sccache", None, choice.Scheduler("http://127.0.0.1:10600",
                                                                                          "t0ken"))


@pytest.mark.parametrize(("name", "value", "message"), [
    ("FARM_COMPILE_CACHE", "distcc", "names no compile cache"),
    ("FARM_CCACHE_REMOTE", "redis:/nohost", "not a compile cache storage URL"),
    ("FARM_CCACHE_REMOTE", "s3://bucket", "not a compile cache storage URL"),
    ("FARM_SCCACHE_SCHEDULER", "10.0.0.1:10600", "not an sccache-dist scheduler URL"),
    ("FARM_SCCACHE_SCHEDULER", "http://10.0.0.1:10600", "needs the scheduler's client token"),
])
def test_bad_settings_are_one_line_naming_the_value(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                                     message: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(errors.UsageError, match=message) as caught:
        choice.choose("host")
    assert value in str(caught.value) or name == "FARM_SCCACHE_SCHEDULER"


def test_sccache_takes_no_file_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CCACHE_REMOTE", "file:///srv/cache")
    assert choice.choose("host").engine == "ccache"  # a storage alone turns the host route's cache on
    monkeypatch.setenv("FARM_COMPILE_CACHE", "sccache")
    with pytest.raises(errors.UsageError, match="sccache cannot use this FARM_CCACHE_REMOTE"):
        choice.choose("host")


def test_each_engine_gets_the_storage_in_its_own_variables() -> None:
    redis = choice.parse_remote("redis://u:secret@10.1.2.3:6379/2")
    assert redis.env("sccache") == {"SCCACHE_REDIS_ENDPOINT": "redis://10.1.2.3:6379", "SCCACHE_REDIS_DB": "2",
                                    "SCCACHE_REDIS_USERNAME": "u", "SCCACHE_REDIS_PASSWORD": "secret"}
    assert redis.env("ccache")["CCACHE_REMOTE_STORAGE"] == "redis://u:secret@10.1.2.3:6379/2"
    assert redis.shown() == "redis://u:***@10.1.2.3:6379/2"
    assert choice.parse_remote("http://h:8080/c").env("sccache") == {"SCCACHE_WEBDAV_ENDPOINT": "http://h:8080/c"}
    assert choice.parse_remote("GHA").env("sccache") == {"SCCACHE_GHA_ENABLED": "on"}
    dav = choice.parse_remote("https://u:p%3Aw@dav.example/c")
    assert dav.env("sccache") == {"SCCACHE_WEBDAV_ENDPOINT": "https://dav.example/c", "SCCACHE_WEBDAV_USERNAME": "u",
                                  "SCCACHE_WEBDAV_PASSWORD": "p:w"}


@pytest.mark.parametrize(("url", "ccache", "password"), [
    ("redis://:pw%40x@h:1", "redis://pw%40x@h:1", "pw@x"),  # ccache 4.14 refuses an empty user name
    ("redis://pw1@h:1", "redis://pw1@h:1", "pw1"),  # a lone user part is the password (redis-cli, ccache)
    ("rediss://:p:q@h:1", "rediss://default:p:q@h:1", "p:q"),  # the lone form would split p:q
])
def test_a_password_without_a_user_reaches_each_engine_as_it_reads_one(url: str, ccache: str, password: str) -> None:
    remote = choice.parse_remote(url)
    assert remote.env("ccache") == {"CCACHE_REMOTE_STORAGE": ccache}
    assert remote.env("sccache") == {"SCCACHE_REDIS_ENDPOINT": url.split("://")[0] + "://h:1",
                                     "SCCACHE_REDIS_PASSWORD": password}
    assert password not in remote.shown() and remote.shown().endswith("***@h:1")


def test_the_dist_token_stays_out_of_reach_of_other_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = choice.Scheduler("http://127.0.0.1:10600", "t0ken")
    server = sccache_server.Server(Path("/nonexistent/sccache"), tmp_path, choice.CacheChoice("sccache", None,
                                                                                               scheduler))
    env = server._env(None)
    conf = Path(env["SCCACHE_CONF"])
    assert conf.stat().st_mode & 0o077 == 0
    assert 'token = "t0ken"' in conf.read_text() and 'scheduler_url = "http://127.0.0.1:10600"' in conf.read_text()
    assert "t0ken" not in json.dumps(env)
    server.stop()
    assert not server.private.exists()


def test_fronts_run_the_real_compiler_through_the_engine(tmp_path: Path) -> None:
    cxx = fronts.cxx_front(tmp_path, "sccache", "/opt/sccache", "/sysroot/bin/gcc/g++")
    assert cxx.name == "g++" and cxx.stat().st_mode & 0o111
    assert cxx.read_text().splitlines()[-1] == 'exec /opt/sccache /sysroot/bin/gcc/g++ "$@"'
    nvcc = fronts.nvcc_front(tmp_path, "ccache", "/usr/bin/ccache", "/cuda home/bin/nvcc")
    assert "exec /usr/bin/ccache '/cuda home/bin/nvcc'" in nvcc.read_text()
    before = nvcc.stat().st_mtime_ns
    fronts.nvcc_front(tmp_path, "ccache", "/usr/bin/ccache", "/cuda home/bin/nvcc")
    assert nvcc.stat().st_mtime_ns == before  # unchanged: ninja sees no new compiler


def test_the_ccache_nvcc_front_spells_dependency_options_as_ccache_knows_them(tmp_path: Path) -> None:
    echo = tmp_path / "echo-args"
    echo.write_text('#!/bin/sh\nshift\nprintf "%s\\n" "$@"\n')
    echo.chmod(0o755)
    nvcc = fronts.nvcc_front(tmp_path / "f", "ccache", str(echo), "nvcc")
    out = subprocess.run([str(nvcc), "-c", "a.cu", "--generate-dependencies-with-compile", "--dependency-output",
                          "a.d"], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["-c", "a.cu", "-MD", "-MF", "a.d"]


def test_no_cache_means_no_change_to_the_build(tmp_path: Path) -> None:
    with compiler_cache.for_build("host", {"CXX": "g++"}, tmp_path, tmp_path) as added:
        assert added == {}
    assert not any(tmp_path.iterdir())


def test_ccache_counts_come_from_the_builds_stats_log(tmp_path: Path) -> None:
    log = tmp_path / "stats.log"
    log.write_text("# a.cpp\ndirect_cache_hit\n# b.cu\ncache_miss\nremote_storage_miss\n# c.cu\n"
                   "remote_storage_hit\npreprocessed_cache_hit\n# d.cu\nremote_storage_error\ncache_miss\n")
    assert ccache_log.counts(log) == {"hits": 2, "misses": 2, "remote_hits": 1, "errors": 1, "dist": 0}
    assert ccache_log.counts(tmp_path / "none.log")["hits"] == 0


def test_sccache_figures_come_from_its_json_statistics() -> None:
    stats = {"stats": {"cache_hits": {"counts": {"PTX": 2, "CUBIN": 2}}, "cache_misses": {"counts": {"CUDA": 1,
             "PTX": 1}}, "dist_compiles": {"127.0.0.1:10501": 3}, "cache_read_errors": 1, "cache_write_errors": 2,
             "cache_timeouts": 0, "dist_errors": 0}}
    figures = sccache_server.counts(stats)
    assert figures["hits"] == 4 and figures["misses"] == 2 and figures["dist"] == 3 and figures["errors"] == 3
    assert figures["hits_PTX"] == 2 and figures["misses_CUDA"] == 1


def test_storage_refusals_are_read_from_the_servers_log() -> None:
    refused = ("[2026-01-01T00:00:00Z ERROR sccache::server] storage check failed for: cache storage failed to "
               "read: Unexpected (persistent) at read, context: { service: redis } => Connection refused")
    assert "Connection refused" in (sccache_server.storage_failure(refused) or "")
    assert sccache_server.storage_failure("[INFO] server has setup with ReadWrite") is None
    full = "storage write check failed: Unexpected (persistent) at write => OOM command not allowed"
    assert sccache_server.write_refused(full) == "Unexpected (persistent) at write => OOM command not allowed"


@pytest.fixture
def sccache() -> Path:
    try:
        return sccache_server.ensure_sccache()
    except errors.FarmError as exc:  # no index reachable
        pytest.skip(f"the pinned sccache cannot be installed here: {exc}")


def test_an_unreachable_storage_is_one_warning_and_the_local_cache(sccache: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    chosen = choice.CacheChoice("sccache", choice.parse_remote(f"redis://127.0.0.1:{closed}"))
    server = sccache_server.Server(sccache, tmp_path / "work", chosen)
    try:
        env = server.start()
        assert server._listening(env) and "SCCACHE_REDIS_ENDPOINT" not in env
        assert "Local disk" in server.stats().get("cache_location", "")
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"redis://127.0.0.1:{closed} cannot be used" in err
    assert not Path(env["SCCACHE_SERVER_UDS"]).exists() and server.child is None


def test_a_storage_that_never_answers_does_not_hang_the_build(sccache: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sccache_server, "START_SECONDS", 5.0)
    started: list[subprocess.Popen[str]] = []
    spawn = proc.spawn

    def record(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        started.append(spawn(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(proc, "spawn", record)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}"
        server = sccache_server.Server(sccache, tmp_path / "work", choice.CacheChoice("sccache",
                                                                                     choice.parse_remote(url)))
        try:
            env = server.start()
            assert "SCCACHE_REDIS_ENDPOINT" not in env
        finally:
            server.stop()
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"{url} cannot be used (no answer in 5 s)" in err
    servers = [child for child in started if "--start-server" in child.args]
    assert len(servers) == 2 and all(child.poll() is not None for child in servers)  # both servers are gone


def test_containers_keep_their_ccache_unless_sccache_is_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               sccache: Path) -> None:
    image_env = {"CXX": "/opt/farm/sysroot/bin/g++-1/g++", "PYTORCH_NVCC": in_container.IMAGE_NVCC_WRAPPER,
                 "CCACHE_DIR": "/home/build/.cache/ccache"}
    assert in_container.route(tmp_path, image_env) == in_container.ContainerCache()
    assert compiler_cache.cache_settings() == {}
    monkeypatch.setenv("FARM_COMPILE_CACHE", "sccache")
    monkeypatch.setenv("FARM_CCACHE_REMOTE", "redis://10.0.0.2:6379")
    cache = in_container.route(tmp_path, image_env)
    added, mounts = cache.env, cache.create_args
    assert compiler_cache.cache_settings() == {"CCACHE_DISABLE": "1"}  # the image's ccache passes through
    assert added["CXX"] == f"{in_container.CONTAINER_TOOLS}/fronts/g++"
    assert added["SCCACHE_DIR"] == "/home/build/.cache/ccache/sccache"
    assert added["SCCACHE_REDIS_ENDPOINT"] == "redis://10.0.0.2:6379"
    fronts_dir = tmp_path / "compile-cache-fronts"
    assert f"--volume={fronts_dir}:{in_container.CONTAINER_TOOLS}/fronts:ro" in mounts
    assert f"--volume={sccache.parent}:{in_container.CONTAINER_TOOLS}/bin:ro" in mounts
    launcher = f"{in_container.CONTAINER_TOOLS}/bin/sccache"
    assert f"exec {launcher} /usr/local/cuda/bin/nvcc" in (fronts_dir / "nvcc").read_text()  # not the ccache one
    assert f"exec {launcher} /opt/farm/sysroot/bin/g++-1/g++" in (fronts_dir / "g++").read_text()


def test_windows_runs_cl_through_sccache_as_a_command_and_nvcc_through_a_batch_file(tmp_path: Path) -> None:
    """cl as torch takes CXX on Windows (a command); nvcc as one program (the nvcc wrapper runs the command after
    it as one path): tests/unit/windows/test_win_compile_cache.py follows it through the wrapper."""
    added = compiler_cache._fronts("sccache", r"C:\t 1\sccache.exe", {"FARM_NVCC_NEXT": r"C:\cu%da\bin\nvcc.exe"},
                                   tmp_path, scripts=False)
    assert added["CXX"].startswith('"C:\\t 1\\sccache.exe" ')
    front = Path(added["PYTORCH_NVCC"])
    assert front == tmp_path / "nvcc.cmd"
    assert front.read_bytes() == b'@"C:\\t 1\\sccache.exe" "C:\\cu%%da\\bin\\nvcc.exe" %*\r\n@exit /b %ERRORLEVEL%\r\n'


def test_ccache_is_no_windows_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_COMPILE_CACHE", "ccache")
    assert choice.choose("windows").engine is None and choice.choose("host").engine == "ccache"


def test_sccache_builds_drop_objtemp_only() -> None:
    env = {"NVCC_APPEND_FLAGS": '-objtemp --threads 0 -frandom-seed=t -Xcompiler="-ffile-prefix-map=/a b=."'}
    assert compiler_cache.sccache_nvcc_flags(env) == {
        "NVCC_APPEND_FLAGS": '--threads 0 -frandom-seed=t -Xcompiler="-ffile-prefix-map=/a b=."'}
    assert compiler_cache.sccache_nvcc_flags({"NVCC_APPEND_FLAGS": "--threads 0"}) == {}


@pytest.mark.parametrize(("name", "value"), [("FARM_COMPILE_CACHE", "off"), ("FARM_CCACHE", "off")])
def test_develop_runs_no_cache_when_it_is_off(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert compiler_cache.find_launcher() is None


def test_a_ccache_hit_never_carries_another_folders_comp_dir(tmp_path: Path) -> None:
    """develop's compiles run in its build folder's temp/, outside the checkout (CCACHE_BASEDIR): the real ccache
    compiles the same ``-g`` source in two such folders; the second object names its own folder, not the first's."""
    source = tmp_path / "project" / "k.cpp"
    source.parent.mkdir()
    source.write_text("int twice(int x) { return 2 * x; }\n")
    ccache = str(toolkit.ensure_ccache())
    objects = []
    for name in ("release", "debug"):
        cwd = tmp_path / "build" / name / "temp"
        cwd.mkdir(parents=True)
        env = {**compiler_cache._path_independence("ccache", source.parent, cwd), "CCACHE_DIR": str(tmp_path / "cc"),
               "CCACHE_CONFIGPATH": str(tmp_path / "ccache.conf")}
        proc.run([ccache, proc.which("g++") or "g++", "-g", "-c", source, "-o", cwd / "k.o"], env=env, cwd=cwd)
        objects.append((cwd, (cwd / "k.o").read_bytes()))
    (first, _), (second, data) = objects
    assert str(second).encode() in data and str(first).encode() not in data
