"""The dev loop: an in-place, incremental build (ninja), optionally through ccache.

``build_ext --inplace`` with a fixed build folder per flavour (release/debug),
so ninja sees the previous objects and recompiles only what changed. When
``ccache`` or ``sccache`` is on PATH, both the host compiler and nvcc go through it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ci import build, matrix, proc, toolkit

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclasses.dataclass(frozen=True)
class DevResult:
    seconds: float
    compiled: int
    launcher: str | None


def find_launcher() -> str | None:
    """The compiler cache to use: ccache, else sccache, else none."""
    for name in ("ccache", "sccache"):
        found = shutil.which(name)
        if found:
            return found
    return None


def write_cxx_wrapper(folder: Path, launcher: str) -> Path:
    """A ``g++`` wrapper that runs the real C++ compiler through the launcher.

    torch only accepts a CXX whose path names a known compiler, so the wrapper
    is called ``g++`` and ``CXX`` points at it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "g++"
    real = shutil.which("g++") or shutil.which("c++") or "c++"
    wrapper.write_text(f'#!/bin/sh\nexec "{launcher}" "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def launcher_env(launcher: str, tk: toolkit.InstalledToolkit | None, folder: Path) -> dict[str, str]:
    env = {"CXX": str(write_cxx_wrapper(folder, launcher))}
    if tk is not None:
        # torch writes PYTORCH_NVCC verbatim into build.ninja as the nvcc command.
        env["PYTORCH_NVCC"] = f"{launcher} {tk.nvcc}"
    if Path(launcher).name == "ccache":
        # nvcc writes dependency files next to the object; ccache must hash the
        # preprocessed source, not the directory it was built in.
        env["CCACHE_BASEDIR"] = str(build.PROJECT_ROOT)
        env["CCACHE_NOHASHDIR"] = "1"
    return env


def develop(
    cell: matrix.Cell | None,
    *,
    debug: bool = False,
    max_jobs: int | None = None,
    use_cache: bool = True,
    clean: bool = False,
) -> DevResult:
    started = time.monotonic()
    build.check_build_torch(cell)
    tk = toolkit.ensure_toolkit(cell) if cell else None
    flavour = ("debug" if debug else "release") + f"-{cell.name if cell else 'cpu'}"
    build_dir = build.PROJECT_ROOT / "build" / f"develop-{flavour}"
    if clean:
        shutil.rmtree(build_dir, ignore_errors=True)
    opts = build.BuildOptions(
        cell=cell, wheelhouse=build.PROJECT_ROOT / "wheelhouse", max_jobs=max_jobs, build_dir=build_dir
    )
    env = build.compiler_env(opts, tk)
    if debug:
        env["FUSEDOPS_DEBUG"] = "1"
    launcher = find_launcher() if use_cache else None
    if launcher:
        env |= launcher_env(launcher, tk, build_dir / "launcher")
    cmd = [sys.executable, "setup.py", "build_ext", "--inplace"]
    proc.console.print(f"[bold cyan]$[/] {proc.format_command(cmd, env, build.PROJECT_ROOT)}", soft_wrap=True)
    compiled = 0
    # Streamed (not captured) so compiler errors appear as they happen; ninja's
    # "[i/n]" lines are counted to report how many objects were rebuilt.
    with subprocess.Popen(cmd, cwd=build.PROJECT_ROOT, env={**os.environ, **env},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            if _NINJA_STEP.match(line):
                compiled += 1
        code = child.wait()
    if code != 0:
        raise proc.CommandError(cmd, code, "The compiler output above shows the failing file and line.")
    return DevResult(seconds=time.monotonic() - started, compiled=compiled, launcher=launcher)
