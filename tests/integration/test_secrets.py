"""A secret the farm is given is never printed or written (issue 45, item 6): a shared compile cache's URL with a
password, against a real redis-server on loopback that requires it (``requirepass``), and sccache-dist's token.

* The default suite: the build's own sccache server started against that server (its launch line, its log kept
  masked at debug level), and the container route's cibuildwheel run up to its echo of ``CIBW_ENVIRONMENT`` (real
  cibuildwheel; a ``docker`` that refuses stops it there).
* ``extended``: whole farm builds of tests/fixtures/tiny_ext (CPU-only, one C++ file) through ccache and through
  sccache (with ``FARM_SCCACHE_TOKEN`` too), the password in ``FARM_CCACHE_REMOTE``; every output stream and every
  file the build wrote (work folder, wheelhouse, report, the caches' folders and logs, what changed in the farm's
  cache folder and the temporary folder) is searched for the secrets: zero occurrences. The objects did go through
  redis (its keys).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from ci import proc
from ci.builds import tail
from ci.errors import CommandFailed
from ci.linux import container, images
from ci.toolchain.compiler_cache import choice, sccache_server
from ci.toolenv import cache_root
from ci.universe import targets
from ci.universe.project import reading
from tests.integration import cache_servers

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
TINY_TARGET = "tiny_ext-torch2.13-cpu-cp311-linux_x86_64"


def new_secret(kind: str) -> str:
    return f"{kind}{uuid.uuid4().hex[:16]}"


@contextlib.contextmanager
def redis_with_password(folder: Path, password: str) -> Iterator[int]:
    """Debian's redis-server on loopback that refuses every client without ``password``; yields its port."""
    program = cache_servers.require("redis-server", "redis-server")
    port = cache_servers.free_port()
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
           str(folder), "--requirepass", password]
    with cache_servers.running(cmd, port, folder / "redis.log"):
        yield port


def redis_keys(port: int, password: str) -> int:
    out = subprocess.run([cache_servers.require("redis-cli", "redis-tools"), "-p", str(port), "DBSIZE"],
                         capture_output=True, text=True, check=True, env={**os.environ, "REDISCLI_AUTH": password})
    return int(out.stdout.strip())


def files_holding(secrets: Iterable[str], folders: Iterable[Path], since: float | None = None) -> list[str]:
    """Every file under ``folders`` (changed after ``since``, when given) that holds one of ``secrets``; files that
    other processes remove meanwhile (the temporary folder is shared) are passed over."""
    wanted = [s.encode() for s in secrets]
    found = []
    for folder in folders:
        for parent, _, names in os.walk(folder, onerror=lambda _: None):
            for name in names:
                path = Path(parent) / name
                try:
                    stat = path.lstat()
                    if not path.is_file() or path.is_symlink() or stat.st_size > 256 * 2**20 or (
                            since is not None and stat.st_mtime < since):
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue
                found += [f"{path}: {s.decode()}" for s in wanted if s in data]
    return found


def test_the_sccache_servers_launch_line_and_log_hold_no_password(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The URL's password goes to sccache in its own SCCACHE_REDIS_PASSWORD (sccache 0.16 does not authenticate
    with a URL's credentials), masked on the server's launch line; the server takes the storage, no warning."""
    password = new_secret("Rp")
    binary = sccache_server.ensure_sccache()
    with redis_with_password(tmp_path / "redis", password) as port:
        url = f"redis://default:{password}@127.0.0.1:{port}"
        server = sccache_server.Server(binary, tmp_path / "work", choice.CacheChoice("sccache",
                                                                                    choice.parse_remote(url)))
        try:
            server.start()
        finally:
            server.stop()
    out, err = capsys.readouterr()
    assert "warning:" not in err
    assert f"SCCACHE_REDIS_ENDPOINT=redis://127.0.0.1:{port} SCCACHE_REDIS_PASSWORD=***" in err  # the launch line
    assert "SCCACHE_REDIS_USERNAME=***" in err  # a secret by its name
    assert password not in out + err
    assert files_holding([password], [tmp_path / "work"]) == []


def test_the_sccache_servers_debug_log_is_kept_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SCCACHE_LOG=debug writes the storage's settings as sccache has them (here the caller's own
    SCCACHE_REDIS_ENDPOINT with a password, which a redis without one accepts) into the server's log: the log the
    work folder keeps has it masked."""
    password = new_secret("Lp")
    monkeypatch.setenv("SCCACHE_LOG", "debug")
    with cache_servers.redis(tmp_path / "redis") as url:
        monkeypatch.setenv("SCCACHE_REDIS_ENDPOINT", url.replace("://", f"://u:{password}@"))
        server = sccache_server.Server(sccache_server.ensure_sccache(), tmp_path / "work",
                                       choice.CacheChoice("sccache"))
        try:
            server.start()
        finally:
            server.stop()
    kept = (tmp_path / "work" / "sccache-server.log").read_text()
    assert f"redis://u:***@{url.split('://')[1]}" in kept  # sccache did log it
    assert files_holding([password], [tmp_path / "work"]) == []


def test_the_container_routes_cibuildwheel_echo_holds_no_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The container route hands ccache the URL in CIBW_ENVIRONMENT and cibuildwheel prints its options, that one
    among them: its echo and the kept output are masked by the farm, the route unchanged."""
    password = new_secret("Cp")
    monkeypatch.setenv("FARM_CCACHE_REMOTE", f"redis://:{password}@cache.internal:6379")
    target = targets.default_target(reading.load(ROOT))
    spec = images.spec_for(target.cell, f"{images.BASE_REPO}:bookworm")
    job = container.ContainerBuild(target=target, spec=spec, image=spec.tag, job="secrets",
                                   outputs=tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "build"))
    python = container.build_python(target, job.spec)
    env = container.cibuildwheel_env(job, python, container.torch_volume(target, python), None)
    assert password in env["CIBW_ENVIRONMENT"]  # ccache in the container needs it
    refusing = tmp_path / "bin"
    refusing.mkdir()
    (refusing / "docker").write_text("#!/bin/sh\necho 'docker: not here' >&2\nexit 1\n")
    (refusing / "docker").chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    (project / "setup.py").write_text("from setuptools import setup\nsetup(name='x')\n")
    env["PATH"] = proc.path_with(refusing)
    with pytest.raises(CommandFailed):
        proc.run(container.cibuildwheel_command(project, tmp_path / "out"), env=env, cwd=project,
                 tee=tmp_path / "build-output.log")
    out, err = capsys.readouterr()
    kept = (tmp_path / "build-output.log").read_text()
    # ccache's form of redis://:pw@host (choice.Remote), masked
    assert 'CCACHE_REMOTE_STORAGE="redis://***@cache.internal:6379"' in kept and "environment:" in out
    assert password not in out + err + kept


# --- whole builds (extended) ---------------------------------------------------------------------------------


def farm_build(project: Path, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", "build", "--project", str(project), "--cpu", "--max-jobs", "1",
                           "--build-dir", str(work / "build"), "--wheelhouse", str(work / "wheelhouse")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250", **env}, text=True,
                          capture_output=True, timeout=1800)


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("engine", ["ccache", "sccache"])
def test_a_build_with_a_password_for_its_cache_leaves_it_nowhere(tmp_path: Path, engine: str) -> None:
    """The password in FARM_CCACHE_REMOTE as users write it (``redis://:<password>@host``; the farm hands each
    engine its form), with sccache-dist's token in FARM_SCCACHE_TOKEN for sccache (a scheduler that is not there:
    the build compiles here)."""
    password, token = new_secret("Bp"), new_secret("Tk")
    project = tmp_path / "project"
    shutil.copytree(TINY, project, ignore=shutil.ignore_patterns("build", "wheelhouse", "*.egg-info"))
    work = tmp_path / "work"
    started = time.time() - 1
    with redis_with_password(tmp_path / "redis", password) as port:
        env = {"FARM_COMPILE_CACHE": engine, "CCACHE_DIR": str(work / "ccache"), "SCCACHE_DIR": str(work / "sccache"),
               # the resolved settings printed, GitHub's annotations and step summary written
               "FARM_DEBUG": "1", "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(work / "summary.md")}
        env["FARM_CCACHE_REMOTE"] = f"redis://:{password}@127.0.0.1:{port}"
        if engine == "sccache":
            env |= {"FARM_SCCACHE_SCHEDULER": f"http://127.0.0.1:{cache_servers.free_port()}",
                    "FARM_SCCACHE_TOKEN": token}
        built = farm_build(project, work, env)
        stored = redis_keys(port, password)
    said = built.stdout + built.stderr
    assert built.returncode == 0, said[-5000:]
    assert "FARM_CCACHE_REMOTE     = redis://" in said  # --show-settings' lines (FARM_DEBUG)
    assert stored > 0, said[-5000:]  # the objects went through the password-protected server
    [wheel] = (work / "wheelhouse" / TINY_TARGET).glob("*.whl")
    assert (wheel.parent / "report.json").is_file()
    secrets = [password, token] if engine == "sccache" else [password]
    print(f"{engine}: {stored} keys in redis; output {len(said)} characters")
    assert [s for s in secrets if s in said] == []
    assert files_holding(secrets, [project, work]) == []
    # What the build changed elsewhere: the farm's cache folder (environments, tools, probes), the temporary folder.
    assert files_holding(secrets, [cache_root(), Path(tempfile.gettempdir())], since=started) == []
