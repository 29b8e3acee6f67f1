"""sccache for one build: the pinned binary, a server of the build's own, its statistics, and what happens when the
shared storage or the scheduler fails.

sccache compiles through a server process. Left to itself the client starts one that daemonises, listens on a
fixed port shared by every build of the machine, and stays up for ten minutes; so the farm starts the build's own
in the foreground (``SCCACHE_NO_DAEMON``), on a Unix socket in a private folder (a port on Windows), as a child it
owns, and stops it when the build ends, whatever happens: no server outlives a build, two builds never share one.

**A shared storage that fails never fails the build.** sccache checks its storage when its server starts: a
storage it cannot read (bad URL, server down) stops the server, and one it cannot write to (full, read-only) makes
it read-only. The farm reads which from the server's own log, says it in one warning line, and in the first case
starts the server again on the local cache alone. A storage that stops answering during the build costs those
compiles their cache, never the compile (sccache's statistics count the errors; one warning line says how many).
A server that does not answer within :data:`START_SECONDS` (a storage that accepts connections and never answers)
is stopped the same way.

**sccache-dist**: ``FARM_SCCACHE_SCHEDULER`` and ``FARM_SCCACHE_TOKEN`` go into a client configuration file
(``[dist]``, ``[dist.auth] type = "token"``) in the private folder, readable by this user only; a scheduler that
does not answer is one warning line, and every compile runs here (sccache's own fallback).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ci import proc, settings
from ci.errors import CommandFailed
from ci.log import log, mask
from ci.toolchain import toolkit
from ci.toolchain.compiler_cache.choice import CacheChoice, Remote, Scheduler
from ci.toolenv import cache_root

#: How long a starting server may take to check its storage and listen.
START_SECONDS = 30.0
_EXE = ".exe" if os.name == "nt" else ""


def ensure_sccache() -> Path:
    """The pinned sccache (``ci/requirements/sccache.txt``), installed once into the tool cache; its folder also
    holds ``sccache-dist``."""

    def verify(root: Path) -> bool:
        return (root / "bin" / f"sccache{_EXE}").is_file()

    root = toolkit.install_once("sccache", "sccache", verify=verify)
    return root / "bin" / f"sccache{_EXE}"


def dist_config(scheduler: Scheduler, toolchains: Path) -> str:
    """The client configuration of a build that sends its compiles to ``scheduler``."""
    return (f'[dist]\nscheduler_url = "{scheduler.url}"\ntoolchains = []\n'
            f'cache_dir = {json.dumps(str(toolchains))}\n\n[dist.auth]\ntype = "token"\n'
            f'token = "{scheduler.token}"\n')


def storage_failure(server_log: str) -> str | None:
    """Why sccache refused its storage (its server exited), from the server's log: the line that says so."""
    for line in server_log.splitlines():
        if "storage check failed" in line or "storage init failed" in line or "cache storage failed" in line:
            return line.split("] ", 1)[-1].strip()[:300]
    return None


def write_refused(server_log: str) -> str | None:
    """Why a storage that can be read takes no writes (full, read-only), from the server's log."""
    for line in server_log.splitlines():
        if "storage write check failed" in line:
            return line.split("failed:", 1)[-1].strip()[:300]
    return None


def dist_ready(status: str) -> bool:
    """Whether ``sccache --dist-status`` answered with a scheduler that has a build server."""
    return "SchedulerStatus" in status and '"num_servers":0' not in status.replace(" ", "")


def counts(stats: Mapping[str, Any]) -> dict[str, int]:
    """The figures a build reports, from ``sccache --show-stats --stats-format=json``: hits, misses (both per
    language too: ``hits_PTX``), compiles on build servers, and cache errors."""
    inner = stats.get("stats", {})
    out = {"hits": sum(inner.get("cache_hits", {}).get("counts", {}).values()),
           "misses": sum(inner.get("cache_misses", {}).get("counts", {}).values()),
           "dist": sum(inner.get("dist_compiles", {}).values()),
           "dist_errors": int(inner.get("dist_errors", 0)),
           "errors": int(inner.get("cache_read_errors", 0)) + int(inner.get("cache_write_errors", 0))
           + int(inner.get("cache_timeouts", 0))}
    for kind in ("hits", "misses"):
        for language, n in inner.get(f"cache_{kind}", {}).get("counts", {}).items():
            out[f"{kind}_{language}"] = int(n)
    return out


class Server:
    """The build's own sccache server (see the module's docstring). ``folder`` keeps its log and statistics."""

    def __init__(self, binary: Path, folder: Path, choice: CacheChoice, basedirs: tuple[Path, ...] = ()) -> None:
        self.binary = binary
        self.folder = folder
        self.choice = choice
        self.basedirs = basedirs
        self.private = Path(tempfile.mkdtemp(prefix="farm-sccache-"))  # a Unix socket's path is short
        self.child: subprocess.Popen[str] | None = None
        self.warned = False
        self.client_env: dict[str, str] = {}

    def warn(self, text: str) -> None:
        if not self.warned:
            log.warn(text)
            self.warned = True

    def _env(self, remote: Remote | None) -> dict[str, str]:
        env = {"SCCACHE_IDLE_TIMEOUT": "0"}
        if os.name == "nt":  # pragma: no cover - Windows hosts: no Unix socket
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                env["SCCACHE_SERVER_PORT"] = str(probe.getsockname()[1])
        else:
            env["SCCACHE_SERVER_UDS"] = str(self.private / "server.sock")
        if self.basedirs:
            env["SCCACHE_BASEDIRS"] = os.pathsep.join(str(p) for p in self.basedirs)
        if remote is not None:
            env |= remote.env("sccache")
        if self.choice.scheduler is not None:
            conf = self.private / "client.conf"
            conf.touch(mode=0o600)
            conf.write_text(dist_config(self.choice.scheduler, cache_root() / "sccache-dist-toolchains"))
            env["SCCACHE_CONF"] = str(conf)
        return env

    def _listening(self, env: Mapping[str, str]) -> bool:
        try:
            if "SCCACHE_SERVER_UDS" in env:
                with socket.socket(socket.AF_UNIX) as client:  # type: ignore[attr-defined,unused-ignore]
                    client.connect(env["SCCACHE_SERVER_UDS"])
            else:  # pragma: no cover - Windows hosts
                with socket.create_connection(("127.0.0.1", int(env["SCCACHE_SERVER_PORT"])), timeout=1):
                    pass
        except OSError:
            return False
        return True

    def _launch(self, remote: Remote | None) -> str | None:
        """Start the server; None when it listens, else why it did not (it is stopped then)."""
        env = self._env(remote)
        # At info its log says why a storage was refused; SCCACHE_LOG=debug adds every compile's time
        # (ci/toolchain/scaling.py reads them) and the storage's settings as given, a password among them: it is
        # written in the private folder and kept, masked, in the work folder when the server stops.
        server_log = self.private / "server.log"
        self.folder.mkdir(parents=True, exist_ok=True)
        with server_log.open("w") as out:
            level = settings.current().environ.get("SCCACHE_LOG") or "info"
            self.child = proc.spawn([self.binary, "--start-server"], env={
                **env, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": level}, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self._listening(env):
                self.client_env = env
                return None
            # The launcher exits once the server it started (in its process group) listens, or failed.
            if self.child.poll() is not None and not self._listening(env):
                text = server_log.read_text(errors="replace")
                return storage_failure(text) or (text.strip().splitlines() or ["the server exited"])[-1][:300]
            time.sleep(0.1)
        self._kill()
        return f"no answer in {START_SECONDS:.0f} s"

    def start(self) -> dict[str, str]:
        """Start the server (falling back to the local cache, see the docstring); the clients' environment."""
        remote = self.choice.remote
        reason = self._launch(remote)
        if reason is not None and remote is not None:
            self.warn(f"the shared compile cache {remote.shown()} cannot be used ({reason}): building with "
                      "sccache's local cache only")
            reason = self._launch(None)
        if reason is not None:
            self.stop()
            raise CommandFailed("sccache's server did not start", reason,
                                f"its log is {self.folder / 'sccache-server.log'}; FARM_COMPILE_CACHE=off builds "
                                "without it")
        refused = write_refused((self.private / "server.log").read_text(errors="replace"))
        if refused and remote is not None:
            self.warn(f"the shared compile cache {remote.shown()} takes no writes ({refused}): reading from it, "
                      "writing nothing")
        if self.choice.scheduler is not None:
            self._check_scheduler(self.choice.scheduler)
        return self.client_env

    def _check_scheduler(self, scheduler: Scheduler) -> None:
        out = proc.run([self.binary, "--dist-status"], env=self.client_env, capture=True, check=False, log=False)
        status = out.stdout.strip()
        if out.returncode != 0 or not dist_ready(status):
            self.warn(f"the sccache-dist scheduler {scheduler.url} cannot take compiles "
                      f"({(status or out.stderr.strip() or 'no answer')[:200]}): compiling here")

    def stats(self) -> dict[str, Any]:
        """sccache's own statistics of this build (``--show-stats --stats-format=json``), also kept in
        ``sccache-stats.json`` beside the server's log."""
        if not self.client_env:
            return {}
        out = proc.run([self.binary, "--show-stats", "--stats-format=json"], env=self.client_env, capture=True,
                       check=False, log=False)
        try:
            found: dict[str, Any] = json.loads(out.stdout)
        except json.JSONDecodeError:
            return {}
        (self.folder / "sccache-stats.json").write_text(json.dumps(found, indent=1) + "\n")
        return found

    def stop(self) -> None:
        """Stop the server (and one a client may have started on the same socket), keep its log with its secrets
        masked (``<work>/sccache-server.log``), remove the private folder."""
        if self.client_env:
            proc.run([self.binary, "--stop-server"], env=self.client_env, capture=True, check=False, log=False)
        self._kill()
        running_log = self.private / "server.log"
        if running_log.is_file():
            (self.folder / "sccache-server.log").write_text(mask(running_log.read_text(errors="replace")))
        shutil.rmtree(self.private, ignore_errors=True)

    def _kill(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            # proc's own end of a child it started: SIGTERM to its group, a bounded wait, SIGKILL, unregistered.
            proc.release(child)
