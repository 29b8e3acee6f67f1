"""sccache in a container build (``ci/linux/container.py``; ccache needs nothing here: the images carry it).

The pinned sccache and the fronts (written into the target's work folder) are mounted read-only; the engine's
variables go into the build's environment. sccache's client in the container starts the container's own server
on a Unix socket (``docker run --network=host`` would otherwise share sccache's fixed port with the machine),
which ends with the container; its local cache is a folder of the ccache volume. What needs more than variables:

* **GitHub's cache** (``FARM_CCACHE_REMOTE=gha``) reads the runner's cache service URL and token
  (:data:`GHA_VARIABLES`). They go into the container by name (``docker create --env NAME``: the docker client
  hands on the value it has), so no command line, ``CIBW_*`` option or log holds the token. Without them (the
  workflow's step before the build exports them) one warning says so and the build keeps sccache's local cache.
* **A storage's credentials** (``redis://:pw@host``: sccache's ``SCCACHE_REDIS_PASSWORD``, ``choice.Remote``) go
  in the same way.
* **sccache-dist** (``FARM_SCCACHE_SCHEDULER``): the scheduler and its token go in the same way, and before the
  build :data:`DIST_CLIENT` writes sccache's client configuration inside the container (readable by the build
  user only, gone with the container) and asks the scheduler for its status, which starts the build's server.
  sccache packages the image's toolkit for the build servers; the toolchains are kept in the ccache volume. A
  scheduler on this machine's loopback is reached through the host's network (``--network=host``), since a
  container's own loopback is not the machine's.
* **The figures**: the repair step prints sccache's statistics and the dist status as one line each
  (:data:`STATS_LINE`, :data:`DIST_LINE`); :func:`report` reads them from the build's output on the host and
  says what the host route says: hits, misses, compiles on build servers, or one warning when the scheduler
  cannot take compiles.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from ci import settings
from ci.log import log, secret_name
from ci.toolchain import compiler_cache
from ci.toolchain.compiler_cache import choice, fronts, sccache_server

#: Where a container build sees the pinned sccache and its fronts (the host's folders, read-only).
CONTAINER_TOOLS = "/opt/farm-compile-cache"
#: The image's ccache wrapper of nvcc (docker/Dockerfile): with sccache in front, the real nvcc is called instead.
IMAGE_NVCC_WRAPPER = "/usr/local/bin/nvcc-ccache"
#: The runner's cache service for sccache's ``gha`` storage (its v1 and v2 URLs, the token, the v2 switch).
GHA_VARIABLES = ("ACTIONS_CACHE_URL", "ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_CACHE_SERVICE_V2")
#: sccache-dist's settings, passed in by name like the cache service's.
DIST_VARIABLES = ("FARM_SCCACHE_SCHEDULER", "FARM_SCCACHE_TOKEN")
#: The container's private folder of sccache: the server's socket and the client configuration.
PRIVATE = "/tmp/farm-sccache"
STATS_LINE = "farm-sccache-stats: "
DIST_LINE = "farm-sccache-dist-status: "
#: Run in the container before the build (stdlib only): the client configuration from the variables passed in,
#: then sccache's own answer about the scheduler (argv: sccache, the toolchains' folder, the line's prefix).
DIST_CLIENT = '''"""sccache-dist's client configuration from FARM_SCCACHE_SCHEDULER and FARM_SCCACHE_TOKEN (the farm
passes them into the container by name), readable by this user only; then the scheduler's status, on one line."""
import json, os, subprocess, sys

conf = os.environ["SCCACHE_CONF"]
os.makedirs(os.path.dirname(conf), mode=0o700, exist_ok=True)
with os.fdopen(os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
    out.write("[dist]\\nscheduler_url = %s\\ntoolchains = []\\ncache_dir = %s\\n\\n[dist.auth]\\ntype = \\"token\\"\\n"
              "token = %s\\n" % (json.dumps(os.environ["FARM_SCCACHE_SCHEDULER"]), json.dumps(sys.argv[2]),
                                 json.dumps(os.environ["FARM_SCCACHE_TOKEN"])))
status = subprocess.run([sys.argv[1], "--dist-status"], capture_output=True, text=True)
print("%s%s" % (sys.argv[3], " ".join((status.stdout or status.stderr or "no answer").split())), flush=True)
'''


@dataclasses.dataclass(frozen=True)
class ContainerCache:
    """What a container build gains: ``env`` (its environment), ``create_args`` (``docker create``'s mounts,
    ``--env NAME``, the network), ``before_build`` and ``stats`` (shell commands in the container; empty: none)."""

    env: dict[str, str] = dataclasses.field(default_factory=dict)
    create_args: list[str] = dataclasses.field(default_factory=list)
    before_build: str = ""
    stats: str = ""


def loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _gha_ready(environ: Mapping[str, str]) -> bool:
    return bool(environ.get("ACTIONS_RUNTIME_TOKEN")) and bool(environ.get("ACTIONS_RESULTS_URL")
                                                               or environ.get("ACTIONS_CACHE_URL"))


def passed_environment() -> dict[str, str]:
    """The values ``docker create --env NAME`` hands on: the docker client's (cibuildwheel's) environment needs
    them; they never appear on a command line."""
    chosen = choice.choose("container")
    if chosen.engine != "sccache":
        return {}
    environ = settings.current().environ
    out: dict[str, str] = {}
    if chosen.remote is not None and chosen.remote.scheme == choice.GHA and _gha_ready(environ):
        out |= {name: environ[name] for name in GHA_VARIABLES if environ.get(name)}
    if chosen.scheduler is not None:
        out |= {"FARM_SCCACHE_SCHEDULER": chosen.scheduler.url, "FARM_SCCACHE_TOKEN": chosen.scheduler.token}
    return out | _storage_secrets(chosen)


def _storage_secrets(chosen: choice.CacheChoice) -> dict[str, str]:
    """The storage's credentials (``SCCACHE_REDIS_PASSWORD``...), passed in by name like the tokens."""
    if chosen.remote is None or chosen.remote.scheme == choice.GHA:
        return {}
    return {name: value for name, value in chosen.remote.env("sccache").items() if secret_name(name)}


def _storage(chosen: choice.CacheChoice) -> dict[str, str]:
    """The storage's variables; GitHub's cache only with the runner's service to talk to (else one warning)."""
    if chosen.remote is None:
        return {}
    if chosen.remote.scheme == choice.GHA and not _gha_ready(settings.current().environ):
        log.warn("the GitHub Actions cache (FARM_CCACHE_REMOTE=gha) needs ACTIONS_RUNTIME_TOKEN and "
                 "ACTIONS_RESULTS_URL, which the workflow's step before the build exports: building with "
                 "sccache's local cache only")
        return {}
    return chosen.remote.env("sccache")


def _dist(chosen: choice.CacheChoice, launcher: str, folder: Path, home: str) -> ContainerCache:
    """sccache-dist's part (see the module's docstring)."""
    if chosen.scheduler is None:
        return ContainerCache()
    script = fronts.write_front(folder, "sccache-dist-client.py", DIST_CLIENT)
    network = ["--network=host"] if loopback(chosen.scheduler.url) else []
    if network:
        log.note(f"the sccache-dist scheduler {chosen.scheduler.url} is on this machine's loopback: the build "
                 "container shares the machine's network")
    run = f"python {CONTAINER_TOOLS}/fronts/{script.name} {launcher} {home}/sccache-dist-toolchains '{DIST_LINE}'"
    return ContainerCache({"SCCACHE_CONF": f"{PRIVATE}/client.conf"},
                          [*(f"--env={name}" for name in DIST_VARIABLES), *network], run)


def route(host_folder: Path, env: Mapping[str, str]) -> ContainerCache:
    """sccache in a container build whose environment is ``env`` (its compilers as the container names them);
    the fronts and the client's script are written into ``host_folder``. Nothing unless sccache is chosen."""
    chosen = choice.choose("container")
    if chosen.engine != "sccache":
        return ContainerCache()
    binary = sccache_server.ensure_sccache()
    launcher = f"{CONTAINER_TOOLS}/bin/{binary.name}"
    folder = host_folder / "compile-cache-fronts"
    nvcc = env.get("PYTORCH_NVCC") or "nvcc"
    nvcc = f"{env.get('CUDA_HOME', '/usr/local/cuda')}/bin/nvcc" if nvcc == IMAGE_NVCC_WRAPPER else nvcc
    cxx = fronts.cxx_front(folder, "sccache", launcher, env.get("CXX") or "g++")
    fronts.nvcc_front(folder, "sccache", launcher, nvcc)
    home = env.get("CCACHE_DIR", "/home/build/.cache/ccache")
    storage = _storage(chosen)
    secrets = sorted(_storage_secrets(chosen))
    dist = _dist(chosen, launcher, folder, home)
    added = {"CXX": f"{CONTAINER_TOOLS}/fronts/{cxx.name}", "PYTORCH_NVCC": f"{CONTAINER_TOOLS}/fronts/nvcc",
             "SCCACHE_DIR": f"{home}/sccache", "SCCACHE_BASEDIRS": "/project",
             "SCCACHE_SERVER_UDS": f"{PRIVATE}/server.sock", "SCCACHE_IDLE_TIMEOUT": "0",
             **compiler_cache.sccache_nvcc_flags(env), **{k: v for k, v in storage.items() if k not in secrets},
             **dist.env}
    passed = [f"--env={name}" for name in GHA_VARIABLES] if storage.get("SCCACHE_GHA_ENABLED") else []
    passed += [f"--env={name}" for name in secrets]
    mounts = [f"--volume={binary.parent}:{CONTAINER_TOOLS}/bin:ro", f"--volume={folder}:{CONTAINER_TOOLS}/fronts:ro"]
    # The socket's folder first: sccache does not make it.
    before = " && ".join(filter(None, (f"mkdir -p -m 700 {PRIVATE}", dist.before_build)))
    return ContainerCache(added, [*mounts, *passed, *dist.create_args], before,
                          f'echo "{STATS_LINE}$({launcher} --show-stats --stats-format=json)"')


def report(output: str) -> None:
    """The build's figures and the scheduler's answer, from the lines the container printed (nothing when the
    build ran no sccache)."""
    stats = dist = None
    for line in output.splitlines():
        if line.startswith(STATS_LINE):
            stats = line[len(STATS_LINE):]
        elif line.startswith(DIST_LINE):
            dist = line[len(DIST_LINE):].strip()
    if dist is not None and not sccache_server.dist_ready(dist):
        log.warn(f"the sccache-dist scheduler cannot take compiles ({dist[:200] or 'no answer'}): the container "
                 "compiled here")
    if stats is not None:
        try:
            figures = sccache_server.counts(json.loads(stats))
        except json.JSONDecodeError:
            return
        compiler_cache.report_figures("sccache", figures)
