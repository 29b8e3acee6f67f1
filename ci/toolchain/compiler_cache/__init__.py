"""The compile cache a build runs through: an engine (ccache or sccache, ``choice``), fronts for g++ and nvcc that run
the real compilers through it (``fronts``), a shared storage on a server (redis, WebDAV/HTTP, GitHub Actions'
cache) and, with sccache, compiles sent to an sccache-dist scheduler (``sccache_server``). docs/compile-cache.md
says what each setting does and what was measured.

What the routes call, once each:

* :func:`for_build`: the host and cross builds (``ci/linux/host.py``): a context around the wheel build that yields
  what the build's environment gains (fronts, the engine's variables, the build's own sccache server) and, when
  the build ends, stops the server and prints one line with the cache's figures;
* :func:`cache_settings`: the variables a container build passes in (``ci/linux/container.py``,
  ``ci/linux/shell.py``); what a container build with sccache gains besides: ``in_container``;
* :func:`for_build` is the Windows build's too (``windows/build.py``), with ``sccache cl`` and ``nvcc.cmd``;
* ``develop`` (``ci/linux/develop.py``): :func:`find_launcher`, :func:`launcher_env`, :func:`remote_cache_env`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from ci import proc
from ci.log import log
from ci.toolchain import toolkit
from ci.toolchain.compiler_cache import ccache_log, choice, fronts, sccache_server


def cache_enabled() -> bool:
    """Whether FARM_CCACHE leaves the compile cache on (``develop`` asks before it looks for a launcher)."""
    return choice.cache_enabled()


def find_launcher() -> str | None:
    """The compile cache of ``develop``: none when FARM_COMPILE_CACHE is off, else its engine (sccache: the pinned
    one unless one is on PATH), else ccache, else sccache on PATH, else the pinned ccache from PyPI."""
    chosen = choice.choose("develop")
    if chosen.engine is None:  # FARM_COMPILE_CACHE=off (or FARM_CCACHE=off): no cache at all
        return None
    if chosen.engine == "sccache":
        return proc.which("sccache") or str(sccache_server.ensure_sccache())
    for name in ("ccache", "sccache"):
        found = proc.which(name)
        if found:
            return found
    return str(toolkit.ensure_ccache())


def engine_of(launcher: str) -> str:
    return "sccache" if Path(launcher).name.removesuffix(".exe") == "sccache" else "ccache"


def launcher_env(launcher: str, tk: toolkit.InstalledToolkit | None, folder: Path, base_dir: Path, *,
                 cwd: Path | None = None) -> dict[str, str]:
    """``develop``'s compilers through ``launcher``: a ``g++`` front, and nvcc as ``<launcher> <nvcc>`` (torch
    writes PYTORCH_NVCC verbatim into build.ninja). ``cwd``: the folder the compiles run in (torch's ninja: the
    build's temp folder), see :func:`_path_independence`."""
    engine = engine_of(launcher)
    real = proc.which("g++") or proc.which("c++") or "c++"
    env = {"CXX": str(fronts.write_front(folder, "g++", fronts.front_text(engine, launcher, real, nvcc=False)))}
    if tk is not None:
        env["PYTORCH_NVCC"] = f"{launcher} {tk.nvcc}"
    return env | _path_independence(engine, base_dir, cwd)


def _path_independence(engine: str, base_dir: Path, cwd: Path | None = None) -> dict[str, str]:
    """Hits across folders: paths under ``base_dir`` are hashed relative to the compile's folder. ccache leaves the
    compile's folder out of the hash too (``CCACHE_NOHASHDIR``) only when that folder (``cwd``, None: inside
    ``base_dir``) is under ``base_dir``: a ``-g`` object records its folder (``DW_AT_comp_dir``), and one compiled
    elsewhere would carry that other folder's. Correctness over reuse: ``develop``'s folders outside the checkout
    do not share their C++ objects."""
    if engine == "ccache":
        inside = cwd is None or cwd.resolve().is_relative_to(base_dir.resolve())
        return {"CCACHE_BASEDIR": str(base_dir), **({"CCACHE_NOHASHDIR": "1"} if inside else {})}
    return {"SCCACHE_BASEDIRS": str(base_dir)}


def remote_cache_env() -> dict[str, str]:
    """FARM_CCACHE_REMOTE in the variables of ``develop``'s engine."""
    chosen = choice.choose("develop")
    if chosen.remote is None or chosen.engine is None:
        return {}
    return chosen.remote.env(chosen.engine)


def cache_settings() -> dict[str, str]:
    """ccache's settings a container build passes in: on/off and the shared storage (the images carry ccache)."""
    chosen = choice.choose("container")
    if chosen.engine != "ccache":  # none, or sccache in front (container_route): the image's ccache passes through
        return {"CCACHE_DISABLE": "1"}
    return chosen.remote.env("ccache") if chosen.remote is not None else {}


def report_figures(engine: str, figures: Mapping[str, int]) -> None:
    remote = f", {figures['remote_hits']} from the shared storage" if figures.get("remote_hits") else ""
    dist = f", {figures['dist']} compiled on build servers" if figures.get("dist") else ""
    log.info(f"compile cache ({engine}): {figures.get('hits', 0)} hits{remote}, {figures.get('misses', 0)} "
             f"misses{dist}")
    log.info("farm-compile-cache: " + " ".join(f"{k}={v}" for k, v in sorted(figures.items()) if " " not in k))


def _real_compilers(env: Mapping[str, str]) -> tuple[str, str | None]:
    """The C++ compiler and the nvcc the build would run: where the farm's nvcc wrapper sits in front
    (``PYTORCH_NVCC``, ci/builds/arch_flags.py), the one it runs next (``FARM_NVCC_NEXT``): the cache goes behind
    the wrapper, which must see the project's flags before anything hashes them."""
    cxx = env.get("CXX") or ("cl" if os.name == "nt" else proc.which("g++") or "c++")
    exe = "nvcc.exe" if os.name == "nt" else "nvcc"
    nvcc = env.get("FARM_NVCC_NEXT") or env.get("PYTORCH_NVCC") or (
        str(Path(env["CUDA_HOME"]) / "bin" / exe) if env.get("CUDA_HOME") else None)
    return cxx, nvcc


def _fronts(engine: str, launcher: str, env: Mapping[str, str], folder: Path, *,
            scripts: bool = True) -> dict[str, str]:
    """What runs the compilers through ``launcher``: front scripts, or on Windows (no shell to run them, and torch
    takes ``CXX`` there as a command) ``"<launcher>" cl`` and the batch file ``nvcc.cmd``: the nvcc wrapper runs
    the command after it as one program (:func:`fronts.windows_nvcc_front`)."""
    cxx, nvcc = _real_compilers(env)
    if not scripts:
        front = {"PYTORCH_NVCC": str(fronts.windows_nvcc_front(folder, launcher, nvcc))} if nvcc else {}
        return {"CXX": f'"{launcher}" {cxx}', **front}
    out = {"CXX": str(fronts.cxx_front(folder, engine, launcher, cxx))}
    if nvcc is not None:
        out["PYTORCH_NVCC"] = str(fronts.nvcc_front(folder, engine, launcher, nvcc))
    return out


def sccache_nvcc_flags(env: Mapping[str, str]) -> dict[str, str]:
    """``NVCC_APPEND_FLAGS`` without ``-objtemp`` for sccache. sccache 0.16 replays nvcc's steps (``--dryrun``) in
    a folder of its own and loses the object when ``-objtemp`` names the intermediate files after it (measured: the
    compile succeeds, no ``.o`` is written). Its own names for them (``x_0.cudafe1.cpp``) are fixed, so the objects
    stay byte-identical from build to build, machine to machine; they differ from an uncached build's by that one
    name."""
    flags = env.get("NVCC_APPEND_FLAGS")
    if flags is None or "-objtemp" not in flags.split():
        return {}
    return {"NVCC_APPEND_FLAGS": " ".join(f for f in flags.split(" ") if f != "-objtemp")}


@contextlib.contextmanager
def for_build(route: str, env: Mapping[str, str], folder: Path, source: Path) -> Iterator[dict[str, str]]:
    """Around a build on ``route`` whose environment is ``env``, in the work folder ``folder`` from sources in
    ``source``: yields what the environment gains (nothing when the route has no compile cache)."""
    chosen = choice.choose(route)
    if chosen.engine is None:
        yield {}
        return
    if chosen.engine == "ccache":
        with _ccache_build(chosen, env, folder, source) as additions:
            yield additions
        return
    server = sccache_server.Server(sccache_server.ensure_sccache(), folder, chosen, (source,))
    try:
        client = server.start()
        yield {**_fronts("sccache", str(server.binary), env, folder / "fronts", scripts=route != "windows"),
               **sccache_nvcc_flags(env), **client}
    finally:
        figures = sccache_server.counts(server.stats())
        server.stop()
        if figures.get("errors") and chosen.remote is not None:
            server.warn(f"{figures['errors']} reads or writes of the shared compile cache {chosen.remote.shown()} "
                        "failed during the build: those compiles ran uncached")
        report_figures("sccache", figures)


@contextlib.contextmanager
def _ccache_build(chosen: choice.CacheChoice, env: Mapping[str, str], folder: Path,
                  source: Path) -> Iterator[dict[str, str]]:
    launcher = proc.which("ccache") or str(toolkit.ensure_ccache())
    stats_log = folder / "ccache-stats.log"
    stats_log.unlink(missing_ok=True)
    additions = {**_fronts("ccache", launcher, env, folder / "fronts"), **_path_independence("ccache", source),
                 "CCACHE_STATSLOG": str(stats_log), **(chosen.remote.env("ccache") if chosen.remote else {})}
    try:
        yield additions
    finally:
        figures = ccache_log.counts(stats_log)
        if figures["errors"] and chosen.remote is not None:
            log.warn(f"the shared compile cache {chosen.remote.shown()} failed {figures['errors']} times (ccache's "
                     "remote_storage_error/timeout): those compiles used the local cache only")
        report_figures("ccache", figures)
