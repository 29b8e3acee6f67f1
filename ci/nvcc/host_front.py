"""In front of the host compilers (``CC``, ``CXX``) of a wheel build: each C and C++ compile admitted by memory,
measured and recorded as nvcc's are (ci/nvcc/admission/, kind ``host``).

A C++ source with torch's headers takes most of a GiB to compile (tests/fixtures/template_abi3's
``scaled_add.cpp``: 0.66 GiB, measured here), as much as one architecture of many CUDA sources; ninja runs them
beside the CUDA compiles, so memory admitted to nvcc alone could still be taken by them. The farm puts a script
named as the compiler it fronts (:func:`write_fronts`; torch accepts a ``CXX`` only when its name or its ``-v``
names a known compiler) in front of the build's ``CC`` and ``CXX`` (the sysroot's wrappers, a compile cache's
front): it runs
``python -I host_front.py <the compiler> <arguments>``. A compile (``-c`` with a C or C++ source, not one of
CMake's probes) goes through ``admission.run``: it starts when its record's peak fits in what is free, is
measured over its process tree, and leaves a line in the build's record. Everything else (a link, ``-v``,
``-dumpversion``, a build without a record) is the compiler itself (``exec``): the same arguments, the same
outputs, so the fronts change no byte (they are not part of the work folder's key: the compilers behind them
are).

nvcc's host compiler is not admitted apart: torch gives nvcc ``-ccbin $CC`` (this front), but inside nvcc
(:data:`INSIDE_NVCC`) the front is the compiler itself, measured with the nvcc compile it belongs to. Standard
library only: on the container route the script runs in the build container with its Python.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

#: The compile front's record (``admission.RECORD``): without it nothing is admitted or measured.
RECORD = "FARM_COMPILE_RECORD"
#: Set by the nvcc wrapper for nvcc and all it runs: torch gives nvcc ``-ccbin $CC``, so this front is nvcc's host
#: compiler too, and a host compile inside an admitted nvcc compile must not queue for memory behind it (it would
#: wait for its own parent) nor be recorded apart (under a temporary file's name): it is the compiler itself.
INSIDE_NVCC = "FARM_INSIDE_NVCC"
#: What a C or C++ source is called (gcc's own list, less the preprocessed ``.i``/``.ii``).
SOURCES = (".c", ".cc", ".cp", ".cxx", ".cpp", ".CPP", ".c++", ".C")
#: The variables fronted: the C compiler (setuptools' own compiles, C sources) and the C++ one (torch's ninja).
VARIABLES = ("CC", "CXX")
#: Options whose next word is a file that is not the source (``-o x.o``, ``-include x.h``, ``-MF x.d``).
WITH_VALUE = ("-o", "-include", "-imacros", "-MF", "-MT", "-MQ", "-x", "-isystem", "-I", "-iquote", "-idirafter")


def source_of(args: Sequence[str]) -> str | None:
    """The source a compiler command compiles (``-c`` and one C or C++ source), or None: not a compile."""
    if "-c" not in args:
        return None
    sources = [word for i, word in enumerate(args) if word.endswith(SOURCES) and not word.startswith("-")
               and (i == 0 or args[i - 1] not in WITH_VALUE)]
    return sources[-1] if len(sources) == 1 else None


def _wrapper() -> ModuleType:
    """The nvcc wrapper beside this file (its admission loader and CMake's probes), loaded by its path: run as
    ``python -I``, neither this folder nor the farm's package is importable."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrapper.py")
    spec = importlib.util.spec_from_file_location("farm_nvcc_wrapper", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str]) -> int:
    compiler, *args = argv
    env = dict(os.environ)
    source = source_of(args)
    if env.get(RECORD) and source is not None and not env.get(INSIDE_NVCC) and os.name != "nt":
        wrapper = _wrapper()
        if not wrapper.cmake_probe(args, os.getcwd()):
            return int(wrapper.admission().run([compiler, *args], env, source, 1, "host"))
    os.execvp(compiler, [compiler, *args])  # the compiler in this process: the build's signals reach it


# --- the fronts, written by the farm --------------------------------------------------------------------------


def front_text(python: Sequence[str], script: str, compiler: str) -> str:
    return ("#!/bin/sh\n# cuda-ext-farm: the host compiler through the compile front (ci/nvcc/host_front.py)\n"
            f'exec {shlex.join([*python, script, compiler])} "$@"\n')


def _write(path: Path, text: str) -> None:
    """``path`` with ``text``, executable; rewritten only when it changed (so its time says when it did)."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.chmod(0o755)
    os.replace(temporary, path)


def write_fronts(env: Mapping[str, str], folder: Path, python: Sequence[str], script: str,
                 seen_as: str | None = None) -> dict[str, str]:
    """``CC`` and ``CXX`` of ``env`` (those it sets) through fronts written into ``folder`` (one sub-folder each,
    the front named as the compiler; the compiler's other words kept after it); ``seen_as``: the folder as the
    build sees it (the container's mount), else ``folder``."""
    out = {}
    for name in VARIABLES:
        words = env.get(name, "").split(maxsplit=1)
        if not words:
            continue
        compiler = words[0]
        path = folder / name.lower() / (os.path.basename(compiler) or name.lower())
        _write(path, front_text(python, script, compiler))
        shown = f"{seen_as}/{name.lower()}/{path.name}" if seen_as else str(path)
        out[name] = " ".join([shown, *words[1:]])
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
