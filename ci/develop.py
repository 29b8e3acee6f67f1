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

import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path

from ci import build, envs, fsutil, matrix, proc, project, publish, toolkit
from ci.errors import UsageError
from ci.targets import Target

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclasses.dataclass(frozen=True)
class DevResult:
    seconds: float
    compiled: int
    launcher: str | None
    arch_list: str | None


def find_launcher() -> str | None:
    """The compiler cache to use: ccache, else sccache on PATH, else the pinned ccache from PyPI."""
    for name in ("ccache", "sccache"):
        found = proc.which(name)
        if found:
            return found
    return str(toolkit.ensure_ccache())


def write_cxx_wrapper(folder: Path, launcher: str) -> Path:
    """A ``g++`` wrapper that runs the real C++ compiler through the launcher.

    torch only accepts a CXX whose path names a known compiler, so the wrapper
    is called ``g++`` and ``CXX`` points at it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "g++"
    real = shutil.which("g++") or shutil.which("c++") or "c++"
    text = f'#!/bin/sh\nexec "{launcher}" "{real}" "$@"\n'
    if not wrapper.is_file() or wrapper.read_text() != text:
        wrapper.write_text(text)
        wrapper.chmod(0o755)
    return wrapper


def launcher_env(launcher: str, tk: toolkit.InstalledToolkit | None, folder: Path, base_dir: Path) -> dict[str, str]:
    env = {"CXX": str(write_cxx_wrapper(folder, launcher))}
    if tk is not None:
        # torch writes PYTORCH_NVCC verbatim into build.ninja as the nvcc command.
        env["PYTORCH_NVCC"] = f"{launcher} {tk.nvcc}"
    if Path(launcher).name == "ccache":
        # nvcc writes dependency files next to the object; ccache must hash the
        # preprocessed source, not the directory it was built in.
        env["CCACHE_BASEDIR"] = str(base_dir)
        env["CCACHE_NOHASHDIR"] = "1"
    return env


def visible_gpu_archs() -> tuple[str, ...]:
    """Compute capabilities of this machine's GPUs (``9.0``), empty without nvidia-smi or GPUs."""
    smi = proc.which("nvidia-smi")
    if smi is None:
        return ()
    out = proc.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture=True, check=False, log=False)
    if out.returncode != 0:
        return ()
    return tuple(sorted({line.strip() for line in out.stdout.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip())},
                        key=matrix.version_key))


def develop_arch_list(target: Target, explicit: str | None, release: bool) -> str:
    if explicit:
        return matrix.with_arch_list(target.cell, explicit).arch_list
    if release:
        return target.cell.arch_list
    gpus = visible_gpu_archs()
    if gpus:
        return ";".join((*gpus[:-1], gpus[-1] + "+PTX"))
    return f"{target.cell.ptx_arch or target.cell.sass_archs[-1]}+PTX"


def develop(
    target: Target,
    outputs: publish.Outputs,
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
                         "use nox -s build (a wheel) for projects without a setup.py")
    cpu = target.cpu
    tk = None if cpu else toolkit.ensure_toolkit(target.cell)
    env = envs.target_env(target)
    build.check_build_torch(target, envs.torch_metadata(env))
    flavour = "debug" if debug else "release"
    archs = None if cpu else develop_arch_list(target, arch_list, release_archs)
    folder = outputs.build_root / "develop" / f"{target.id}-{flavour}"
    if clean:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    if archs:
        target = dataclasses.replace(target, cell=matrix.with_arch_list(target.cell, archs))
    compile_env = build.compiler_env(target, tk, cpu=cpu, max_jobs=max_jobs)
    if debug:
        values = build.build_values(target, tk.nvcc_version if tk else None)
        compile_env |= {k: project.expand(v, values) for k, v in config.debug_env.items()}
    launcher = find_launcher() if use_cache and cache_enabled() else None
    if launcher:
        compile_env |= launcher_env(launcher, tk, folder / "launcher", config.root)
    compile_env |= remote_cache_env()
    cmd: list[str | Path] = [env.python, "setup.py", "build", "--build-base", folder, "build_ext", "--inplace",
                             "--build-temp", folder / "temp"]
    # Nothing changed since the last successful build (sources, command, environment, outputs): skip
    # setuptools, which would relink every library (seconds) to find that out.
    stamp = folder / ".farm-develop.json"
    state = _state(config.root, cmd, compile_env, outputs)
    if not clean and stamp.is_file() and stamp.read_text() == state:
        proc.console.print("[green]up to date[/]: nothing changed since the last in-place build")
        return DevResult(seconds=time.monotonic() - started, compiled=0, launcher=launcher, arch_list=archs)
    stamp.unlink(missing_ok=True)
    compiled = 0

    def count(line: str) -> None:
        nonlocal compiled
        if _NINJA_STEP.match(line):
            compiled += 1

    proc.stream(cmd, count, env=compile_env, cwd=config.root, what="the in-place build failed",
                hint="the compiler output above shows the failing file and line")
    fsutil.atomic_write_text(stamp, _state(config.root, cmd, compile_env, outputs))
    return DevResult(seconds=time.monotonic() - started, compiled=compiled, launcher=launcher, arch_list=archs)


def _state(root: Path, cmd: list[str | Path], env: dict[str, str], outputs: publish.Outputs) -> str:
    """What an in-place build depends on and produces: source files (size, time), the command, the
    environment, and the libraries it left in the tree."""
    files = build.project_files(root, (outputs.build_root, outputs.wheelhouse))
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
    return json.dumps({"sources": sources, "cmd": [str(c) for c in cmd], "env": env, "built": built},
                      sort_keys=True)


def remote_cache_env() -> dict[str, str]:
    """FARM_CCACHE_REMOTE (ccache's remote storage URL: http://, redis://, file://) for every compile."""
    remote = os.environ.get("FARM_CCACHE_REMOTE", "").strip()
    if not remote:
        return {}
    if not re.match(r"^(https?|redis|rediss|file)://", remote):
        raise UsageError("FARM_CCACHE_REMOTE is not a ccache remote storage URL", remote,
                         "use http://host:port/path, redis://host:port or file:///path (ccache's remote_storage)")
    return {"CCACHE_REMOTE_STORAGE": remote}


def cache_enabled() -> bool:
    """FARM_CCACHE=off turns the compiler cache off everywhere (reproducibility checks, cold timings)."""
    value = os.environ.get("FARM_CCACHE", "on").strip().lower()
    if value not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
        raise UsageError("FARM_CCACHE must be on or off", value, "set FARM_CCACHE=on or FARM_CCACHE=off")
    return value in ("on", "1", "true", "yes")


def cache_settings() -> dict[str, str]:
    """ccache settings every build passes on: on/off, and the remote storage."""
    return {**remote_cache_env(), **({} if cache_enabled() else {"CCACHE_DISABLE": "1"})}
