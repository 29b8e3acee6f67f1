"""A toolkit folder whose ``bin/nvcc`` runs the nvcc wrapper (``wrapper.py``) and whose every other entry is the
real toolkit's (a link): the wrapper in front of nvcc however a build finds nvcc.

torch's ninja path takes its nvcc from ``PYTORCH_NVCC`` (the wrapper, on every route), but setuptools' own compile
(``BuildExtension.with_options(use_ninja=False)``) runs ``CUDA_HOME/bin/nvcc``, and CMake runs
``CMAKE_CUDA_COMPILER`` (``CUDACXX``, or the first nvcc on ``PATH``, or ``$CUDA_HOME/bin/nvcc`` as many projects
write it). With ``CUDA_HOME`` (or ``PATH``, ``CUDACXX``) naming this folder, each of those runs the wrapper, which
folds nvcc's flag variables, decides the architecture flags, prints its line and runs the compile cache or the
real nvcc (``FARM_NVCC_NEXT``; the script names the real nvcc when that is unset, never the folder's own ``nvcc``
on ``PATH``). The real nvcc finds its own files next to its real path, so it compiles as it did.
(``nvcc -v`` names the real toolkit as ``TOP``, so CMake takes the toolkit's folders from there; a CMake build
keeps the real ``CUDA_HOME`` and gets this folder's nvcc as its compiler: ``ci/linux/host.py``.)

On Windows ``bin\\nvcc`` is ``nvcc.exe``, a script launcher in front of the wrapper (:func:`windows_launcher`):
torch's own compile runs ``CUDA_HOME\\bin\\nvcc`` (no extension) through setuptools' spawn, and Windows starts
``nvcc.exe`` for that name (CreateProcess adds ``.exe``; Python 3.11's ``shutil.which`` tries no extension for a
path with a folder), never a batch file. The other entries link the real toolkit's (a symbolic link; where
Windows refuses one to a user without the privilege, a junction for a folder, a hard link or a copy for a file).

Standard library only (the container route imports it in the container); the Windows launcher's own bytes come
from distlib, imported there only.
"""

from __future__ import annotations

import importlib.resources
import io
import os
import shlex
import shutil
import sys
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

#: The variable the wrapper reads its next command from (``wrapper.py``).
NEXT = "FARM_NVCC_NEXT"


def _posix_script(wrapper_command: Sequence[str], nvcc: str) -> str:
    return ("#!/bin/sh\n# cuda-ext-farm: nvcc through the farm's wrapper (ci/nvcc/shim.py)\n"
            f'if [ -z "${{{NEXT}:-}}" ]; then {NEXT}={shlex.quote(shlex.quote(nvcc))}; export {NEXT}; fi\n'
            f'exec {shlex.join(wrapper_command)} "$@"\n')


#: The ``__main__.py`` of the Windows launcher's archive: the wrapper, run as ``python -I wrapper.py`` runs it.
_WINDOWS_MAIN = """# cuda-ext-farm: nvcc through the farm's wrapper (ci/nvcc/shim.py)
import os, runpy, sys
os.environ.setdefault({next!r}, {nvcc!r})
sys.argv[0] = {wrapper!r}
runpy.run_path({wrapper!r}, run_name="__main__")
"""
#: distlib's console launcher for x64 Windows (the farm builds win_amd64 only).
LAUNCHER = "t64.exe"


def windows_launcher(wrapper_command: Sequence[str], nvcc: str, launcher: bytes) -> bytes:
    """``nvcc.exe``: distlib's script launcher, then the line that names the interpreter (``#!"<python>" -I``),
    then a zip archive whose ``__main__.py`` runs the wrapper: the launcher runs ``<python> -I <itself>
    <arguments>``, and Python runs the archive at the file's end. distlib's own ``ScriptMaker`` writes the same
    layout only when it runs on Windows (its launchers are read there alone), so it is composed here. The archive's
    date is fixed: the same inputs give the same bytes (the file is rewritten only when they change)."""
    python, *flags, wrapper = wrapper_command
    shebang = f'#!"{python}" {" ".join(flags)}'.rstrip() + "\n"
    stream = io.BytesIO()
    with zipfile.ZipFile(stream, "w") as archive:
        archive.writestr(zipfile.ZipInfo("__main__.py", date_time=(1980, 1, 1, 0, 0, 0)),
                         _WINDOWS_MAIN.format(next=NEXT, nvcc=nvcc, wrapper=wrapper))
    return launcher + shebang.encode() + stream.getvalue()


def distlib_launcher() -> bytes:
    """The launcher's bytes, from the distlib package (the farm's tool environment has it)."""
    return importlib.resources.files("distlib").joinpath(LAUNCHER).read_bytes()


def _link(link: Path, target: str, is_dir: bool) -> None:
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)  # a junction: the link alone
    try:
        os.symlink(target, link, target_is_directory=is_dir)
    except OSError:
        if sys.platform != "win32":
            raise
        _windows_link(link, target, is_dir)


def _windows_link(link: Path, target: str, is_dir: bool) -> None:  # pragma: no cover - Windows without the right
    """Where Windows refuses a symbolic link (a user without SeCreateSymbolicLinkPrivilege, no Developer Mode)."""
    if sys.platform == "win32":
        if is_dir:
            import _winapi

            _winapi.CreateJunction(target, str(link))
            return
        try:
            os.link(target, link)
        except OSError:  # another volume
            shutil.copy2(target, link)


def _entries(toolkit: PurePath, listed: Iterable[tuple[str, bool]] | None) -> list[tuple[str, bool]]:
    if listed is not None:
        return sorted(listed)
    real = Path(toolkit)
    return sorted((p.relative_to(real).as_posix(), p.is_dir()) for p in [*real.iterdir(), *(real / "bin").iterdir()]
                  if p.name != "bin")


def make_shim(folder: Path, toolkit: PurePath | str, wrapper_command: Sequence[str], *, windows: bool = False,
              entries: Iterable[tuple[str, bool]] | None = None, launcher: bytes | None = None) -> Path:
    """Write the folder (``folder``, as this machine sees it) for the real toolkit at ``toolkit`` (as the build
    sees it) and the wrapper command (``[python, "-I", wrapper.py]``, as the build sees them); returns the path of
    its nvcc here. ``entries``: the toolkit's top-level entries and those of its ``bin`` (``("include", True)``,
    ``("bin/ptxas", False)``) when ``toolkit`` is not on this machine (a container's); read from it otherwise.
    ``windows``: the build runs on Windows (``bin\\nvcc.exe``; ``launcher``: the script launcher's bytes, else
    distlib's). Rewritten only where it changed (the script's time is an input of a build's own up-to-date checks)."""
    path_type = PureWindowsPath if windows else PurePosixPath
    home = path_type(str(toolkit))
    nvcc = str(home / "bin" / ("nvcc.exe" if windows else "nvcc"))
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    for name, is_dir in _entries(PurePath(str(toolkit)), entries):
        if PurePosixPath(name).name not in ("nvcc", "nvcc.exe"):
            _link(folder / name, str(home / name), is_dir)
    script = folder / "bin" / ("nvcc.exe" if windows else "nvcc")
    data = (windows_launcher(wrapper_command, nvcc, launcher or distlib_launcher()) if windows
            else _posix_script(wrapper_command, nvcc).encode())
    if not script.is_file() or script.is_symlink() or script.read_bytes() != data:
        if script.is_symlink():
            script.unlink()
        tmp = script.with_name(f".{script.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        os.replace(tmp, script)
    return script
