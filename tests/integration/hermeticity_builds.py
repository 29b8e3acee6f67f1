"""The hermeticity suite's machinery (tests/integration/test_hermeticity.py): the farm's own command on a copy of
tests/fixtures/hermetic, through one compile-reuse *engine* at a time, and what each build did to foo.cu (did ninja
run its compile, did the compile cache hit) and which library it shipped.

Engines (the columns of the suite's table):

* ``folder``: no compile cache (``FARM_COMPILE_CACHE=off``, ``develop --no-cache``), the target's work folder
  kept between builds: ninja alone decides what to recompile;
* ``ccache``, ``sccache``: the engine with a cache folder of the test's own, the work folder emptied before each
  build (same path): the cache alone decides, as on a fresh runner whose cache was restored;
* ``redis``: ccache with ``FARM_CCACHE_REMOTE`` on a real redis-server; each build is a new machine: an empty
  local cache, an emptied work folder, only the server is warm;
* ``redis-sccache``: the same with sccache (the two-machine test).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "hermetic"
#: Every build's architectures unless the input is the list itself (a later --arch-list wins).
ARCHS = ("--arch-list", "9.0")
#: The kernel whose compile the suite follows.
KERNEL = "foo.cu"
ENGINES = ("folder", "ccache", "sccache", "redis", "redis-sccache")
#: The test process's own variables that would shape the builds (a developer's shell): removed, so that each
#: build sees only what the suite sets.
SHAPING = ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "CC", "CXX", "PYTORCH_NVCC", "CUDA_HOME",
           "TORCH_CUDA_ARCH_LIST", "CPPFLAGS", "CFLAGS", "CXXFLAGS", "LDFLAGS")
SHAPING_PREFIXES = ("CCACHE_", "SCCACHE_", "FARM_COMPILE_CACHE", "FARM_CCACHE", "FARM_SCCACHE", "FARM_BUILD_DIR",
                    "FARM_WHEELHOUSE", "FARM_PROJECT")
_NINJA_EDGE = re.compile(r"^\[\d+/\d+\] ")


@dataclasses.dataclass(frozen=True)
class Value:
    """One value of an input: command-line words, variables of the caller's environment, lines added to the
    project's ``[tool.cuda-ext-farm]`` table, the project's own nvcc architecture flags (setup.py)."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    table: str = ""
    own_flags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Library:
    """What a build shipped: the library's bytes (``host``) and its device code as cuobjdump extracts it
    (``device``: each cubin and PTX, decompressed, by name). Compared byte for byte, ``develop``'s in-place library
    as a ``build``'s wheel library: develop passes the farm's deterministic flags too (``-objtemp``,
    ``-frandom-seed``; at 2aa91a0 it passed none, and nvcc's temporary names, its process id, landed in the host
    code and, under ``-G``, in the device code's debug information)."""

    host: bytes
    device: bytes


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one build did: its exit status and output, the library it shipped (the wheel's, or develop's in-place
    one), whether ninja ran foo.cu's compile, and the cache's answer for it (``hit``, ``remote hit``, ``miss``,
    ``-``: no cache consulted)."""

    returncode: int
    output: str
    library: Library | None
    compiled: bool
    cache: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.library is not None

    @property
    def recompiled(self) -> bool:
        """nvcc really compiled foo.cu: ninja ran it and no cache answered for it."""
        return self.compiled and self.cache not in ("hit", "remote hit")

    def last_line(self) -> str:
        """Why the build failed: the audit's failed checks, else the last line."""
        lines = [line for line in self.output.strip().splitlines() if line.strip()]
        if "wheel audit failures:" in lines:
            checks = lines[lines.index("wheel audit failures:") + 1:]
            return "audit: " + "; ".join(c.strip(" -") for c in checks if c.startswith("  - "))[:300]
        return lines[-1][:300] if lines else f"exit {self.returncode}"


def clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SHAPING and not k.startswith(SHAPING_PREFIXES)}


def materialize(project: Path, value: Value) -> Path:
    """``project`` as the fixture with ``value``'s table lines (at the end: its ``[tool.cuda-ext-farm]`` table)
    and setup.py flags (rewritten only where they
    differ: unchanged files keep their times, as in a checkout between two builds)."""
    if not project.is_dir():
        shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))
    # A key the value sets replaces the fixture's line of it (TOML refuses a key twice).
    keys = {line.split("=")[0].strip() for line in value.table.splitlines() if "=" in line}
    kept = [line for line in (FIXTURE / "pyproject.toml").read_text().splitlines(keepends=True)
            if "=" not in line or line.split("=")[0].strip() not in keys]
    pyproject = "".join(kept) + value.table
    setup = (FIXTURE / "setup.py").read_text().replace(
        "OWN_ARCH_FLAGS: list[str] = []", f"OWN_ARCH_FLAGS: list[str] = {list(value.own_flags)!r}")
    for name, text in (("pyproject.toml", pyproject), ("setup.py", setup)):
        path = project / name
        if path.read_text() != text:
            path.write_text(text)
    return project


def empty(build: Path, project: Path) -> None:
    """An emptied work folder (the same path) and no in-place library: nothing for ninja to reuse."""
    shutil.rmtree(build, ignore_errors=True)
    for library in project.rglob("*.so"):
        library.unlink()


def library_of(wheel: Path) -> bytes | None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if re.fullmatch(r"hermetic_ext/_C\..*\.so", n)]
        return archive.read(names[0]) if names else None


def device_code(library: bytes) -> bytes:
    """Each cubin and PTX of ``library`` (cuobjdump, decompressed), named, in name order."""
    from ci.toolchain import toolkit

    cuobjdump = str(toolkit.ensure_cuobjdump())
    with tempfile.TemporaryDirectory(prefix="hermetic-device-") as folder:
        path = Path(folder) / "lib.so"
        path.write_bytes(library)
        for what in ("--extract-elf", "--extract-ptx"):
            subprocess.run([cuobjdump, what, "all", str(path)], cwd=folder, capture_output=True, check=False)
        parts = sorted(p for p in Path(folder).iterdir() if p.suffix in (".cubin", ".ptx"))
        return b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in parts)


def shipped(library: bytes) -> Library:
    return Library(library, device_code(library))


def kernel_cache_result(build: Path, stats_log: Path | None, sccache_stats: Mapping[str, object] | None) -> str:
    """The cache's answer for foo.cu: from ccache's stats log (a ``# <file>`` line before each compile's
    counters) or sccache's statistics (``CUDA``: one nvcc call as a whole)."""
    logs = [stats_log] if stats_log is not None else sorted(build.glob("*/ccache-stats.log"))
    for log in logs:
        if log.is_file():
            return _ccache_answer(log.read_text(errors="replace"))
    if sccache_stats is None:
        found = sorted(build.glob("*/sccache-stats.json"))
        sccache_stats = json.loads(found[0].read_text()) if found else None
    if sccache_stats:
        stats = sccache_stats.get("stats", {})
        assert isinstance(stats, dict)
        hits = stats.get("cache_hits", {}).get("counts", {}).get("CUDA", 0)
        misses = stats.get("cache_misses", {}).get("counts", {}).get("CUDA", 0)
        # Neither: sccache did not cache the call (it declines some, -G among them: "non-cacheable").
        return "hit" if hits and not misses else "miss" if misses else "uncached"
    return "-"


def _ccache_answer(text: str) -> str:
    answer, current = "-", None
    for line in text.splitlines():
        if line.startswith("#"):
            current = line[1:].strip()
            continue
        if current is None or not current.endswith(KERNEL) or not line.strip():
            continue
        counter = line.strip()
        if counter == "remote_storage_hit":
            answer = "remote hit"
        elif counter in ("direct_cache_hit", "preprocessed_cache_hit") and answer != "remote hit":
            answer = "hit"
        elif counter == "cache_miss":
            answer = "miss"
    return answer


def compiled_kernel(output: str) -> bool:
    """Whether ninja ran foo.cu's compile (``ninja -v`` prints each edge it ran as ``[k/n] <command>``)."""
    return any(_NINJA_EDGE.match(line) and KERNEL in line for line in output.splitlines())


@contextlib.contextmanager
def sccache_for_develop(cache: Path, remote: str | None) -> Iterator[tuple[dict[str, str], list[dict[str, object]]]]:
    """An sccache server of the test's own for ``develop`` (whose client would otherwise start a machine-wide
    daemon): the clients' variables, and a list that receives its statistics when the block ends."""
    from ci.toolchain.compiler_cache import sccache_server

    binary = sccache_server.ensure_sccache()
    private = Path(tempfile.mkdtemp(prefix="hermetic-sccache-"))
    env = {"SCCACHE_SERVER_UDS": str(private / "s.sock"), "SCCACHE_DIR": str(cache), "SCCACHE_IDLE_TIMEOUT": "0",
           **({"SCCACHE_REDIS_ENDPOINT": remote} if remote else {})}
    full = {**clean_environ(), **env}
    server = subprocess.Popen([str(binary), "--start-server"], env={**full, "SCCACHE_NO_DAEMON": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stats: list[dict[str, object]] = []
    try:
        _wait_for_socket(private / "s.sock", server)
        yield env, stats
        out = subprocess.run([str(binary), "--show-stats", "--stats-format=json"], env=full, capture_output=True,
                             text=True, check=False)
        stats.append(json.loads(out.stdout) if out.returncode == 0 else {})
    finally:
        subprocess.run([str(binary), "--stop-server"], env=full, capture_output=True, check=False)
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(private, ignore_errors=True)


def _wait_for_socket(path: Path, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
            return
        if child.poll() is not None:
            raise RuntimeError(f"sccache's server exited ({child.returncode})")
        time.sleep(0.1)
    raise RuntimeError("sccache's server did not listen in 30 s")


@dataclasses.dataclass(frozen=True)
class Place:
    """Where one cell builds: the project's copy, the work folder (one path for every build of the cell: nvcc and
    the compile flags write it into the objects) and the cell's scratch folder (caches, wheelhouses)."""

    project: Path
    build: Path
    scratch: Path


def engine_env(engine: str, cache: Path, remote: str | None) -> dict[str, str]:
    """The caller's variables that select ``engine`` with the cache folder ``cache``."""
    if engine == "folder":
        return {"FARM_COMPILE_CACHE": "off"}
    if engine in ("ccache", "redis"):
        return {"FARM_COMPILE_CACHE": "ccache", "CCACHE_DIR": str(cache), "CCACHE_LOGFILE": f"{cache}.log",
                **({"FARM_CCACHE_REMOTE": remote} if remote and engine == "redis" else {})}
    return {"FARM_COMPILE_CACHE": "sccache", "SCCACHE_DIR": str(cache),
            **({"FARM_CCACHE_REMOTE": remote} if remote and engine == "redis-sccache" else {})}


def farm(verb: str, place: Place, value: Value, engine: str, cache: Path, remote: str | None = None) -> Outcome:
    """One ``python -m ci <verb>`` (``build`` or ``develop``) of the project with ``value``, through ``engine``."""
    materialize(place.project, value)
    env = {**clean_environ(), "PYTHONPATH": str(ROOT), "COLUMNS": "250", **engine_env(engine, cache, remote),
           **value.env}
    sccache_dev = verb == "develop" and engine in ("sccache", "redis-sccache")
    with contextlib.ExitStack() as stack:
        stats: list[dict[str, object]] | None = None
        if sccache_dev:
            extra, stats = stack.enter_context(sccache_for_develop(cache, remote if engine != "sccache" else None))
            env |= extra
        said, library, stats_log = _run(verb, place, value, engine, env)
    cache_answer = "-" if engine == "folder" else kernel_cache_result(place.build, stats_log,
                                                                      stats[0] if stats else None)
    return Outcome(said.returncode, said.stdout, library, compiled_kernel(said.stdout), cache_answer)


def _run(verb: str, place: Place, value: Value, engine: str,
         env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], Library | None, Path | None]:
    stats_log: Path | None = None
    if verb == "build":
        wheelhouse = place.scratch / "wheelhouse"
        shutil.rmtree(wheelhouse, ignore_errors=True)
        where = ["--build-dir", str(place.build), "--wheelhouse", str(wheelhouse)]
    else:
        where = ["--no-cache"] if engine == "folder" else []
        env["FARM_BUILD_DIR"] = str(place.build)
        if engine in ("ccache", "redis"):
            stats_log = place.scratch / "ccache-stats.log"
            stats_log.unlink(missing_ok=True)
            env["CCACHE_STATSLOG"] = str(stats_log)
    cmd = [sys.executable, "-m", "ci", verb, "--project", str(place.project), *where, *ARCHS, *value.args]
    said = subprocess.run(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=3600)
    library: bytes | None = None
    if said.returncode == 0 and verb == "build":
        wheels = sorted((place.scratch / "wheelhouse").glob("*/*.whl"))
        library = library_of(wheels[0]) if wheels else None
    elif said.returncode == 0:
        found = sorted((place.project / "src").rglob("_C*.so"))
        library = found[0].read_bytes() if found else None
    return said, shipped(library) if library is not None else None, stats_log
