"""A toolkit folder whose ``bin/nvcc`` runs the nvcc wrapper (``wrapper.py``) and whose every other entry is the
real toolkit's (a link): the wrapper in front of nvcc however a build finds nvcc.

torch's ninja path takes its nvcc from ``PYTORCH_NVCC`` (the wrapper, on every route), but setuptools' own compile
(``BuildExtension.with_options(use_ninja=False)``) runs ``CUDA_HOME/bin/nvcc``, and CMake runs
``CMAKE_CUDA_COMPILER`` (``CUDACXX``, or the first nvcc on ``PATH``, or ``$CUDA_HOME/bin/nvcc`` as many projects
write it). With ``CUDA_HOME`` (or ``PATH``, ``CUDACXX``) naming this folder, each of those runs the wrapper, which
folds nvcc's flag variables, decides the architecture flags, prints its line and runs the compile cache or the
real nvcc (``FARM_NVCC_NEXT``; the script names the real nvcc when that is unset, never the folder's own ``nvcc``
on ``PATH``). The real nvcc finds its own files next to its real path, so it compiles as it did.

Standard library only: the container and Windows routes make the folder for paths their build sees.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

#: The variable the wrapper reads its next command from (``wrapper.py``).
NEXT = "FARM_NVCC_NEXT"


def _posix_script(wrapper_command: Sequence[str], nvcc: str) -> str:
    return ("#!/bin/sh\n# cuda-ext-farm: nvcc through the farm's wrapper (ci/nvcc/shim.py)\n"
            f'if [ -z "${{{NEXT}:-}}" ]; then {NEXT}={shlex.quote(shlex.quote(nvcc))}; export {NEXT}; fi\n'
            f'exec {shlex.join(wrapper_command)} "$@"\n')


def _windows_script(wrapper_command: Sequence[str], nvcc: str) -> str:
    words = " ".join(f'"{w}"' if " " in w else w for w in wrapper_command)
    return (f"@echo off\r\nrem cuda-ext-farm: nvcc through the farm's wrapper (ci/nvcc/shim.py)\r\n"
            f'if not defined {NEXT} set "{NEXT}={nvcc}"\r\n{words} %*\r\nexit /b %ERRORLEVEL%\r\n')


def _link(link: Path, target: str, is_dir: bool) -> None:
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    os.symlink(target, link, target_is_directory=is_dir)


def _entries(toolkit: PurePath, listed: Iterable[tuple[str, bool]] | None) -> list[tuple[str, bool]]:
    if listed is not None:
        return sorted(listed)
    real = Path(toolkit)
    return sorted((p.relative_to(real).as_posix(), p.is_dir()) for p in [*real.iterdir(), *(real / "bin").iterdir()]
                  if p.name != "bin")


def make_shim(folder: Path, toolkit: PurePath | str, wrapper_command: Sequence[str], *, windows: bool = False,
              entries: Iterable[tuple[str, bool]] | None = None) -> Path:
    """Write the folder (``folder``, as this machine sees it) for the real toolkit at ``toolkit`` (as the build
    sees it) and the wrapper command (``[python, "-I", wrapper.py]``, as the build sees them); returns the path of
    its nvcc here. ``entries``: the toolkit's top-level entries and those of its ``bin`` (``("include", True)``,
    ``("bin/ptxas", False)``) when ``toolkit`` is not on this machine (a container's); read from it otherwise.
    Rewritten only where it changed (the script's time is an input of a build's own up-to-date checks)."""
    path_type = PureWindowsPath if windows else PurePosixPath
    home = path_type(str(toolkit))
    nvcc = str(home / "bin" / ("nvcc.exe" if windows else "nvcc"))
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    for name, is_dir in _entries(PurePath(str(toolkit)), entries):
        if PurePosixPath(name).name not in ("nvcc", "nvcc.exe"):
            _link(folder / name, str(home / name), is_dir)
    script = folder / "bin" / ("nvcc.bat" if windows else "nvcc")
    text = (_windows_script if windows else _posix_script)(wrapper_command, nvcc)
    if not script.is_file() or script.read_text() != text:
        if script.is_symlink():
            script.unlink()
        tmp = script.with_name(f".{script.name}.{os.getpid()}.tmp")
        tmp.write_text(text, newline="")
        tmp.chmod(0o755)
        os.replace(tmp, script)
    return script
