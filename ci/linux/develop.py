"""The dev loop: an in-place, incremental build of the checkout (ninja), optionally through a compiler cache.

``setup.py build_ext --inplace`` with a fixed build folder per target and
flavour (release/debug), so ninja sees the previous objects and recompiles only
what changed. It compiles for the GPUs this machine has (``nvidia-smi``), or
``--arch-list``, or the release architectures with ``--release-archs``; with no
GPU and no choice it compiles the cell's newest architecture with PTX. When
``ccache`` or ``sccache`` is on PATH, both the host compiler and nvcc go
through it.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
import shutil
import time
from pathlib import Path

from ci import fsutil, proc, settings
from ci.builds import build_key, environment, failure, preflight, project_source, tail
from ci.errors import CommandFailed, UsageError
from ci.linux import host as build
from ci.log import log
from ci.toolchain import compiler_cache, envs, toolkit
from ci.universe import archs, shapes
from ci.universe.archs import with_arch_list
from ci.universe.targets import Target

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
#: The folder of the compile cache's fronts inside the build folder.
LAUNCHER = "launcher"


@dataclasses.dataclass(frozen=True)
class DevResult:
    seconds: float
    compiled: int
    launcher: str | None
    arch_list: str | None


def visible_gpu_archs() -> tuple[str, ...]:
    """Compute capabilities of this machine's GPUs (``9.0``), empty without nvidia-smi or GPUs."""
    smi = proc.which("nvidia-smi")
    if smi is None:
        return ()
    out = proc.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture=True, check=False, log=False)
    if out.returncode != 0:
        return ()
    return tuple(sorted({line.strip() for line in out.stdout.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip())},
                        key=shapes.version_key))


def develop_arch_list(target: Target, explicit: str | None, release: bool) -> str:
    if explicit:
        return archs.with_arch_list(target.cell, explicit).arch_list
    if release:
        return target.cell.arch_list
    gpus = visible_gpu_archs()
    if gpus:
        return ";".join((*gpus[:-1], gpus[-1] + "+PTX"))
    return f"{target.cell.ptx_arch or target.cell.sass_archs[-1]}+PTX"


def develop(
    target: Target,
    outputs: tail.Outputs,
    *,
    debug: bool = False,
    max_jobs: int | None = None,
    use_cache: bool = True,
    clean: bool = False,
    arch_list: str | None = None,
    release_archs: bool = False,
) -> DevResult:
    started = time.monotonic()
    config = target.project
    if not (config.root / "setup.py").is_file():
        raise UsageError("develop builds in place with setup.py, which the project lacks", config.root,
                         f"use {settings.entry('build')} (a wheel) for projects without a setup.py")
    preflight.preflight(target)  # what the source alone refuses (submodules, links, the C++ standard), first
    cpu = target.cpu
    environment.check_nvcc_flags(settings.current().environ, "your environment's")  # before anything runs nvcc
    tk = None if cpu else toolkit.ensure_toolkit(target.cell)
    env = envs.target_env(target)
    torch = envs.torch_metadata(env)
    build.check_build_torch(target, torch)
    flavour = "debug" if debug else "release"
    archs = None if cpu else develop_arch_list(target, arch_list, release_archs)
    folder = outputs.build_root / "develop" / f"{target.id}-{flavour}"
    if clean:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    if archs:
        target = dataclasses.replace(target, cell=with_arch_list(target.cell, archs))
    compile_env, launcher = _compile_env(target, tk, env.python, folder, debug=debug, max_jobs=max_jobs,
                                         use_cache=use_cache)
    key = build.work_key(compile_env, tk, env, torch, build.compilers_of(compile_env, None))
    kept = (build_key.KEY_FILE, LAUNCHER, build.NVCC_SHIM)  # the fronts in front of the compilers, made above
    build_key.keep_or_clear(folder, key, [p for p in folder.iterdir() if p.name not in kept],
                            f"the in-place build folder of {target.id} ({flavour})")
    cmd: list[str | Path] = [env.python, "setup.py", "build", "--build-base", folder, "build_ext", "--inplace",
                             "--build-temp", folder / "temp"]
    # Nothing changed since the last successful build (sources, command, environment, outputs): skip
    # setuptools, which would relink every library (seconds) to find that out.
    stamp = folder / ".farm-develop.json"
    state = _state(config.root, cmd, compile_env, outputs)
    if not clean and stamp.is_file() and stamp.read_text() == state:
        log.note("up to date:", "nothing changed since the last in-place build", style="green")
        return DevResult(seconds=time.monotonic() - started, compiled=0, launcher=launcher, arch_list=archs)
    stamp.unlink(missing_ok=True)
    compiled = _run_in_place(cmd, compile_env, config.root, cpu=tk is None)
    fsutil.atomic_write_text(stamp, _state(config.root, cmd, compile_env, outputs))
    return DevResult(seconds=time.monotonic() - started, compiled=compiled, launcher=launcher, arch_list=archs)


#: The farm's debug flags of ``develop --debug`` (ci/commands/develop.py's promise): device debug information and
#: no optimisation in nvcc's compiles, ``-O0 -g`` in the C++ ones (CPPFLAGS: setuptools adds them after Python's
#: own flags, so they win over its -O2/-O3).
DEBUG_FLAGS = {"NVCC_APPEND_FLAGS": "-G -g", "CPPFLAGS": "-O0 -g"}


def _flavoured(target: Target, debug: bool) -> Target:
    """``target`` whose build-env (cpu-env in a ``--cpu`` build), in a debug build, holds the project's debug-env
    too: the project's layer of the composition (ci/builds/environment.py), so its flag variables join the
    caller's and the farm's instead of replacing them."""
    if not debug or not target.project.debug_env:
        return target
    own = dict(target.project.cpu_env if target.cpu else target.project.build_env)
    for name, value in target.project.debug_env.items():
        own[name] = f"{own[name]} {value}" if name in environment.APPENDED and own.get(name) else value
    config = (dataclasses.replace(target.project, cpu_env=own) if target.cpu
              else dataclasses.replace(target.project, build_env=own))
    return dataclasses.replace(target, project=config)


def develop_farm_flags(target: Target, tk: toolkit.InstalledToolkit | None, *, debug: bool) -> dict[str, str]:
    """The farm's flags of an in-place build: the host build's deterministic ones (``environment.farm_flags``: the
    checkout's path written as ``.``), so that two builds from empty caches give the same bytes; and in a debug
    build :data:`DEBUG_FLAGS` before them (nvcc and gcc take the last of a repeated option)."""
    farm = environment.farm_flags(target, tk.nvcc_version if tk else None, str(target.project.root))
    if not debug:
        return farm
    return {**farm, **{k: " ".join(filter(None, (v, farm.get(k)))) for k, v in DEBUG_FLAGS.items()
                       if k != "NVCC_APPEND_FLAGS" or tk is not None}}


def _compile_env(target: Target, tk: toolkit.InstalledToolkit | None, python: Path, folder: Path, *, debug: bool,
                 max_jobs: int | None, use_cache: bool) -> tuple[dict[str, str], str | None]:
    """The in-place build's environment (the host build's, with the farm's debug flags and the project's debug-env
    in a debug build) and the compile cache it runs through (None: none), behind the nvcc wrapper
    (ci/nvcc/wrapper.py) as on every route."""
    compile_env = build.compiler_env(_flavoured(target, debug), tk, cpu=target.cpu, max_jobs=max_jobs,
                                     farm=develop_farm_flags(target, tk, debug=debug))
    launcher = compiler_cache.find_launcher() if use_cache and compiler_cache.cache_enabled() else None
    if launcher:
        # torch's ninja compiles in the build folder's temp/, outside the checkout (compiler_cache: comp_dir)
        compile_env |= compiler_cache.launcher_env(launcher, tk, folder / LAUNCHER, target.project.root,
                                                   cwd=folder / "temp")
        if compiler_cache.engine_of(launcher) == "sccache":  # it loses the object under -objtemp (as in for_build)
            compile_env |= compiler_cache.sccache_nvcc_flags(compile_env)
    compile_env |= build.nvcc_wrapper_env(target, tk, python, compile_env, folder / build.NVCC_SHIM)
    return compile_env | compiler_cache.remote_cache_env(), launcher


def _run_in_place(cmd: list[str | Path], env: dict[str, str], root: Path, *, cpu: bool) -> int:
    """Run setup.py's in-place build; the number of objects ninja compiled. A failure names its cause
    (ci/builds/failure/)."""
    compiled = 0
    said: collections.deque[str] = collections.deque(maxlen=5000)

    def count(line: str) -> None:
        nonlocal compiled
        said.append(line)
        if _NINJA_STEP.match(line):
            compiled += 1

    try:
        proc.stream(cmd, count, env=env, cwd=root, what="the in-place build failed",
                    hint="the compiler output above shows the failing file and line")
    except CommandFailed as exc:
        raise failure.explain_build(exc, "".join(said), build="the in-place build", source=root, cpu=cpu) from None
    return compiled


def _state(root: Path, cmd: list[str | Path], env: dict[str, str], outputs: tail.Outputs) -> str:
    """What an in-place build depends on and produces: source files (size, time), the command, the
    environment, and the libraries it left in the tree."""
    files = project_source.project_files(root, (outputs.build_root, outputs.wheelhouse))
    sources = {}
    for name in files:
        try:
            stat = (root / name).stat()
        except FileNotFoundError:
            continue
        sources[name] = [stat.st_size, stat.st_mtime_ns]
    built = {}
    # In-place libraries land next to the package's sources (git ignores them, so look beside each file).
    for folder in sorted({(root / name).parent for name in files}):
        for lib in sorted([*folder.glob("*.so"), *folder.glob("*.pyd")]):
            built[str(lib.relative_to(root))] = lib.stat().st_mtime_ns
    # The environment as a digest: its values may hold secrets (a cache URL's password), never written to disk.
    environ = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()
    return json.dumps({"sources": sources, "cmd": [str(c) for c in cmd], "env": environ, "built": built},
                      sort_keys=True)
