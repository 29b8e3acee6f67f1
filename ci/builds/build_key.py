"""The key of a kept work folder: everything that shapes the objects a build leaves there for the next one, and
is not on a command line that ninja compares (torch's ``build.ninja`` holds each compile's command, so ninja
recompiles when a flag there changes, but not when nvcc reads one from ``NVCC_APPEND_FLAGS``, the nvcc wrapper
its architecture list from ``FARM_NVCC_ARCH_LIST``, or when the compiler behind a path changed).

A route computes the key (:func:`key_of`) from the build's composed environment (the variables of
:data:`VARIABLES`, every ``NVCC_*`` one) and its further parts (the toolkit, torch, the compilers, the nvcc wrapper
itself), and calls :func:`keep_or_clear` before it builds: a folder whose stored key differs loses its build
outputs and says in one line which parts changed, by name (values may hold secrets: the key file holds digests
only). A kept folder is then reused exactly when a build from an empty folder would compile the same objects.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from ci import fsutil
from ci.log import log

#: The file in the work folder that holds the key of the outputs beside it.
KEY_FILE = ".farm-build-key.json"
#: Variables that reach compiles or links through the environment: the compilers and their flags (setuptools
#: and CMake read them from there), the flags nvcc and the nvcc wrapper read, the architecture lists (CMake reads
#: CUDAARCHS and its compilers only when it first configures a folder), the compilers' search paths, the
#: cross build's switches, and a compile cache's path rewriting (ccache's base_dir makes __FILE__ relative).
VARIABLES = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "LDCXXSHARED", "CUDAHOSTCXX",
             "CUDACXX", "CUDAFLAGS", "CUDAARCHS", "CMAKE_ARGS", "CMAKE_TOOLCHAIN_FILE", "CPATH", "C_INCLUDE_PATH",
             "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST", "FARM_NVCC_ARCH_LIST",
             "FARM_NVCC_ARCH_MODE", "_PYTHON_HOST_PLATFORM", "SETUPTOOLS_EXT_SUFFIX", "CCACHE_BASEDIR",
             "SCCACHE_BASEDIRS")
#: Every variable that starts so is keyed too (nvcc's NVCC_APPEND_FLAGS, NVCC_PREPEND_FLAGS, NVCC_CCBIN).
PREFIXES = ("NVCC_",)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()[:16]


def key_of(env: Mapping[str, str], parts: Mapping[str, str]) -> dict[str, str]:
    """The key of a build whose compiles see ``env`` (the caller's environment under the build's) and ``parts``
    (label: description, e.g. ``{"toolkit": "13.0.88 /path"}``): each name with a digest of its value."""
    names = sorted(n for n in env if n in VARIABLES or n.startswith(PREFIXES))
    return {**{n: _digest(env[n]) for n in names}, **{label: _digest(v) for label, v in sorted(parts.items())}}


def file_identity(path: str | Path) -> str:
    """A compiler (or any file) as the key sees it: its resolved path, size and modification time (a package
    update replaces the file behind the same name); the path alone where it cannot be read."""
    found = shutil.which(str(path)) or str(path)
    try:
        resolved = Path(found).resolve()
        stat = resolved.stat()
    except OSError:
        return str(path)
    return f"{resolved} {stat.st_size} {stat.st_mtime_ns}"


def changed_names(stored: Mapping[str, str], key: Mapping[str, str]) -> list[str]:
    """The names whose digest differs, or that one key has and the other not."""
    return sorted(n for n in {*stored, *key} if stored.get(n) != key.get(n))


def _stored(folder: Path) -> dict[str, str] | None:
    try:
        data = json.loads((folder / KEY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


def keep_or_clear(folder: Path, key: Mapping[str, str], outputs: Iterable[Path], what: str) -> list[str]:
    """Reuse ``outputs`` (what earlier builds left in ``folder``) only when ``folder`` holds ``key``; otherwise
    remove them first, with one line naming what changed (``what``: the folder, as the line says it). The key is
    stored before the build runs: whatever it leaves belongs to this key, a failed build's half too. Returns the
    names that changed (empty: kept, or nothing to keep)."""
    outputs = [p for p in outputs if p.exists() or p.is_symlink()]
    stored = _stored(folder)
    names = changed_names(stored, key) if stored is not None else ["(no key: a folder of an older farm)"]
    if not outputs or not names:
        names = []
    else:
        log.info(f"rebuilding {what} from scratch: changed since its last build: {', '.join(names)}")
        for path in outputs:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    if stored != key:
        folder.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write_json(folder / KEY_FILE, dict(key))
    return names
