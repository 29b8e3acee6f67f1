"""Real servers for the compile-cache tests, on loopback, stopped when the test ends: Debian's ``redis-server``, nginx's
WebDAV module for the ``http://`` form, and sccache-dist's scheduler and build server. A test that needs a missing
program is skipped with the package that brings it (``.ci/run`` installs them)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def require(program: str, package: str) -> str:
    found = shutil.which(program) or next((p for p in (f"/usr/sbin/{program}", f"/usr/bin/{program}")
                                           if Path(p).is_file()), None)
    if found is None:
        pytest.skip(f"{program} is not installed (apt-get install {package})")
    return found


def wait_listening(port: int, child: subprocess.Popen[bytes], log: Path, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the server did not listen on {port} in {seconds} s: {log.read_text(errors='replace')[-2000:]}")


@contextlib.contextmanager
def running(cmd: list[str], port: int, log: Path, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` in the foreground as our child, until the block ends (then SIGTERM, SIGKILL after 10 s)."""
    with log.open("wb") as out:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    try:
        wait_listening(port, child, log)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextlib.contextmanager
def redis(folder: Path, maxmemory: str | None = None, password: str | None = None,
          user: str | None = None) -> Iterator[str]:
    """A redis-server on loopback, no persistence; ``maxmemory="1"`` (bytes, noeviction): full, every write refused.
    With ``password`` it refuses every client without it (``requirepass``, the default user's); with ``user`` too,
    that password is the user's (an ACL user with every right) and the default user has none."""
    program = require("redis-server", "redis-server")
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
           "--dir", str(folder), "--protected-mode", "yes"]
    if maxmemory is not None:
        cmd += ["--maxmemory", maxmemory, "--maxmemory-policy", "noeviction"]
    if password is not None and user is None:
        cmd += ["--requirepass", password]
    elif password is not None:
        cmd += ["--user", "default", "off", "--user", user, "on", f">{password}", "~*", "&*", "+@all"]
    with running(cmd, port, folder / "redis.log"):
        yield f"redis://127.0.0.1:{port}"


def redis_keys(url: str) -> int:
    """How many keys the server holds (redis-cli DBSIZE)."""
    port = url.rsplit(":", 1)[1]
    out = subprocess.run([require("redis-cli", "redis-tools"), "-p", port, "DBSIZE"], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip())


#: The dav-ext module (Debian's libnginx-mod-http-dav-ext) adds PROPFIND, which sccache's WebDAV client (opendal)
#: asks before it writes; nginx's own dav module has PUT, MKCOL and DELETE.
DAV_EXT = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"
NGINX_DAV = """load_module {dav_ext};
daemon off;
user root;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log info;
events {{ worker_connections 64; }}
http {{
  access_log {folder}/access.log;
  client_body_temp_path {folder}/body;
  proxy_temp_path {folder}/proxy;
  fastcgi_temp_path {folder}/fastcgi;
  uwsgi_temp_path {folder}/uwsgi;
  scgi_temp_path {folder}/scgi;
  server {{
    listen 127.0.0.1:{port};
    root {folder}/store;
    client_max_body_size 0;
    location / {{
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }}
  }}
}}
"""


@contextlib.contextmanager
def webdav(folder: Path) -> Iterator[str]:
    """nginx with its WebDAV module (PUT, MKCOL, DELETE) on loopback, storing under ``folder/store``."""
    program = require("nginx", "nginx-light")
    if not Path(DAV_EXT).is_file():
        pytest.skip("nginx's dav-ext module is not installed (apt-get install libnginx-mod-http-dav-ext)")
    port = free_port()
    (folder / "store").mkdir(parents=True, exist_ok=True)
    conf = folder / "nginx.conf"
    conf.write_text(NGINX_DAV.format(folder=folder, port=port, dav_ext=DAV_EXT))
    with running([program, "-c", str(conf), "-e", str(folder / "error.log")], port, folder / "nginx.out"):
        yield f"http://127.0.0.1:{port}/cache"


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A port that accepts connections and never answers (a server that hangs)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}"


def stored_files(folder: Path) -> int:
    return sum(1 for p in (folder / "store").rglob("*") if p.is_file())


def sandbox_blocked() -> str | None:
    """Why sccache-dist's build server cannot sandbox compiles here (None: it can): its overlay builder runs every
    compile in bubblewrap, as root."""
    import os

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if os.geteuid() != 0:
        return "sccache-dist's overlay builder must run as root (bubblewrap and overlay mounts), this test is not"
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
                            "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bubblewrap cannot make a sandbox on this machine: {probe.stderr.strip() or probe.returncode}"
    return None


@contextlib.contextmanager
def sccache_dist(folder: Path, dist: Path) -> Iterator[tuple[str, str]]:
    """sccache-dist's scheduler and one build server (overlay builder, bubblewrap) on loopback, authenticated as
    sccache-dist requires: clients by a token, the build server by a JWT the scheduler's key signs. Yields the
    scheduler's URL and the client token."""
    blocked = sandbox_blocked()
    if blocked is not None:
        pytest.skip(f"blocked: {blocked}")
    folder.mkdir(parents=True, exist_ok=True)
    key = subprocess.run([str(dist), "auth", "generate-jwt-hs256-key"], capture_output=True, text=True,
                         check=True).stdout.strip()
    scheduler_port, server_port = free_port(), free_port()
    server_token = subprocess.run([str(dist), "auth", "generate-jwt-hs256-server-token", "--secret-key", key,
                                   "--server", f"127.0.0.1:{server_port}"], capture_output=True, text=True,
                                  check=True).stdout.strip()
    client_token = "farm-test-" + key[:16]
    (folder / "scheduler.conf").write_text(
        f'public_addr = "127.0.0.1:{scheduler_port}"\n\n[client_auth]\ntype = "token"\ntoken = "{client_token}"\n\n'
        f'[server_auth]\ntype = "jwt_hs256"\nsecret_key = "{key}"\n')
    (folder / "server.conf").write_text(
        f'cache_dir = "{folder}/toolchains"\npublic_addr = "127.0.0.1:{server_port}"\n'
        f'scheduler_url = "http://127.0.0.1:{scheduler_port}"\n\n[builder]\ntype = "overlay"\n'
        f'build_dir = "{folder}/builds"\nbwrap_path = "{shutil.which("bwrap")}"\n\n'
        f'[scheduler_auth]\ntype = "jwt_token"\ntoken = "{server_token}"\n')
    import os

    env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
    with running([str(dist), "scheduler", "--config", str(folder / "scheduler.conf")], scheduler_port,
                 folder / "scheduler.log", env=env), \
            running([str(dist), "server", "--config", str(folder / "server.conf")], server_port,
                    folder / "server.log", env=env):
        yield f"http://127.0.0.1:{scheduler_port}", client_token
