"""The compiler fronts a build calls instead of its compilers: two-line scripts that run the real compiler through
the cache (``exec <engine> <compiler> "$@"``), written into the build's own folder.

Scripts rather than ``CXX="sccache g++"``: torch's extension builder accepts a ``CXX`` only when its file name
names a known compiler (so the C++ front is called ``g++`` or whatever the real one is called), and writes
``PYTORCH_NVCC`` verbatim into ``build.ninja``, where a path with a space would split. The nvcc front of ccache
also rewrites torch's long dependency options: ccache does not know them and passes them to the preprocessing run
it makes (``nvcc -E``), which nvcc refuses, so nothing would be cached; it knows the short spellings (``-MD``,
``-MF``) of the same options (the builder images' ``/usr/local/bin/nvcc-ccache`` does the same).

On Windows the nvcc front is a batch file (:func:`windows_nvcc_front`): the farm's nvcc wrapper runs the command
after it as one program (``FARM_NVCC_NEXT``, ``ci/nvcc/wrapper.py``), and ``sccache.exe nvcc.exe`` is two words.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from ci import fsutil

#: What an nvcc front is called: ``ci/builds/arch_flags.py`` knows an nvcc command by a name ending in ``nvcc``.
NVCC_FRONT = "nvcc"

_CCACHE_NVCC = """#!/bin/sh
# nvcc through ccache, torch's long dependency options in ccache's spelling.
for a; do shift; case "$a" in
  --generate-dependencies-with-compile) set -- "$@" -MD;;
  --dependency-output) set -- "$@" -MF;;
  *) set -- "$@" "$a";;
esac; done
exec {launcher} {compiler} "$@"
"""

_PLAIN = """#!/bin/sh
exec {launcher} {compiler} "$@"
"""


def front_text(engine: str, launcher: str, compiler: str, *, nvcc: bool) -> str:
    """The script that runs ``compiler`` through ``launcher`` (the engine's binary)."""
    template = _CCACHE_NVCC if nvcc and engine == "ccache" else _PLAIN
    return template.format(launcher=shlex.quote(launcher), compiler=shlex.quote(compiler))


def write_front(folder: Path, name: str, text: str) -> Path:
    """``folder/name`` with ``text``, executable; rewritten only when it changed (its time is ninja's input)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if not path.is_file() or path.read_bytes() != text.encode():
        fsutil.atomic_write_text(path, text)
        path.chmod(0o755)
    return path


def cxx_front(folder: Path, engine: str, launcher: str, compiler: str) -> Path:
    """The C++ front, named as the real compiler is (``g++``, ``aarch64-linux-gnu-g++``, ``c++``)."""
    return write_front(folder, os.path.basename(compiler) or "g++",
                       front_text(engine, launcher, compiler, nvcc=False))


def nvcc_front(folder: Path, engine: str, launcher: str, nvcc: str) -> Path:
    """The nvcc front (``PYTORCH_NVCC``)."""
    return write_front(folder, NVCC_FRONT, front_text(engine, launcher, nvcc, nvcc=True))


#: The Windows nvcc front: ``%*`` hands on the arguments as the caller wrote them; ``%`` in a path is doubled (a
#: batch file would expand it), and a Windows path holds no ``"``.
_WINDOWS_NVCC = '@"{launcher}" "{compiler}" %*\r\n@exit /b %ERRORLEVEL%\r\n'


def windows_nvcc_front(folder: Path, launcher: str, nvcc: str) -> Path:
    """``nvcc.cmd``: nvcc run through ``launcher`` as one program the nvcc wrapper (or ninja) can start."""
    text = _WINDOWS_NVCC.format(launcher=launcher.replace("%", "%%"), compiler=nvcc.replace("%", "%%"))
    return write_front(folder, f"{NVCC_FRONT}.cmd", text)
