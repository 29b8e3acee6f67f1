"""Will the dynamic loader resolve every symbol of an extension? Answered from ELF tables.

For a library ``L`` loaded with ``RTLD_NOW`` (what Python does for extension
modules and ``ctypes``/``torch.ops.load_library`` for plain libraries), every
undefined, non-weak dynamic symbol of ``L`` must be defined in the executable
(the Python interpreter, and ``libpython`` when it is shared) or in ``L``'s own
dependency closure: its ``DT_NEEDED`` libraries, theirs, and so on, found in its
``$ORIGIN`` run paths, in the torch install (``torch/lib``, the ``nvidia/*/lib``
wheels) and in the system's library folders.

:class:`LibrarySearch` indexes those folders of one Python environment (the
target's torch); :func:`unresolved` answers for one library. Exports are read
with pyelftools and cached by (path, size, mtime): libtorch_cpu alone exports
about 100k symbols.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import subprocess
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ci.errors import UsageError

SYSTEM_LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")


class NotElf(UsageError):
    pass


@dataclasses.dataclass(frozen=True)
class ElfInfo:
    soname: str | None
    needed: tuple[str, ...]
    rpaths: tuple[str, ...]
    #: Undefined dynamic symbols: (name, weak).
    undefined: tuple[tuple[str, bool], ...]
    defined: frozenset[str]
    has_cuda_code: bool


def read_elf(path: Path) -> ElfInfo:
    """Dynamic section and dynamic symbols of ``path`` (one-line error if it is not ELF)."""
    try:
        with path.open("rb") as fh:
            elf = ELFFile(fh)
            soname = None
            needed: list[str] = []
            rpaths: list[str] = []
            undefined: list[tuple[str, bool]] = []
            defined: set[str] = set()
            cuda = False
            for section in elf.iter_sections():
                if section.name in (".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment"):
                    cuda = True
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        kind = tag.entry.d_tag
                        # pyelftools sets these attributes dynamically per tag kind.
                        if kind == "DT_NEEDED":
                            needed.append(str(getattr(tag, "needed")))  # noqa: B009
                        elif kind == "DT_SONAME":
                            soname = str(getattr(tag, "soname"))  # noqa: B009
                        elif kind in ("DT_RPATH", "DT_RUNPATH"):
                            rpaths.extend(p for p in str(getattr(tag, kind[3:].lower())).split(":") if p)
                elif isinstance(section, SymbolTableSection) and section.name == ".dynsym":
                    for sym in section.iter_symbols():
                        name = sym.name
                        if not name:
                            continue
                        bind = sym["st_info"]["bind"]
                        if sym["st_shndx"] == "SHN_UNDEF":
                            if bind in ("STB_GLOBAL", "STB_WEAK"):
                                undefined.append((name, bind == "STB_WEAK"))
                        elif bind in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE"):
                            defined.add(name)
    except ELFError:
        raise NotElf("not an ELF shared library", path.name,
                     "the wheel holds a file named like a library that is not one; rebuild it") from None
    except OSError as exc:
        raise NotElf("cannot read the library", path, exc.strerror or "check the file") from None
    return ElfInfo(soname, tuple(needed), tuple(rpaths), tuple(undefined), frozenset(defined), cuda)


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled -> readable names with ``c++filt`` when it exists (readability only)."""
    import shutil

    names = list(names)
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    result = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != len(names):
        return {n: n for n in names}
    return dict(zip(names, lines, strict=True))


C10_CUDA = re.compile(r"^_ZN(K)?3c104cuda")
AT_CUDA = re.compile(r"^_ZN(K)?2at4cuda")


class LibrarySearch:
    """Sonames -> files for one environment, with cached exports."""

    def __init__(self, dirs: Iterable[Path], executables: Iterable[Path], cache_dir: Path | None = None) -> None:
        self.dirs = [d for d in dirs if d.is_dir()]
        self.executables = [e for e in executables if e.is_file()]
        self.cache_dir = cache_dir
        self._files: dict[str, Path] = {}
        self._exports: dict[Path, ElfInfo] = {}
        for folder in self.dirs:
            for entry in sorted(folder.iterdir()):
                if ".so" in entry.name and entry.name not in self._files and entry.is_file():
                    self._files[entry.name] = entry

    def find(self, soname: str, extra_dirs: Iterable[Path] = ()) -> Path | None:
        for folder in extra_dirs:
            candidate = folder / soname
            if candidate.is_file():
                return candidate
        return self._files.get(soname)

    def info(self, path: Path) -> ElfInfo:
        path = path.resolve()
        if path not in self._exports:
            self._exports[path] = self._cached(path)
        return self._exports[path]

    def _cached(self, path: Path) -> ElfInfo:
        if self.cache_dir is None:
            return read_elf(path)
        stat = path.stat()
        key = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:24]
        file = self.cache_dir / f"{key}.json.gz"
        if file.is_file():
            try:
                data = json.loads(gzip.decompress(file.read_bytes()))
                return ElfInfo(data["soname"], tuple(data["needed"]), tuple(data["rpaths"]),
                               tuple((n, bool(w)) for n, w in data["undefined"]), frozenset(data["defined"]),
                               bool(data["cuda"]))
            except (OSError, ValueError, KeyError):
                pass
        info = read_elf(path)
        data = {"soname": info.soname, "needed": info.needed, "rpaths": info.rpaths, "undefined": info.undefined,
                "defined": sorted(info.defined), "cuda": info.has_cuda_code}
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(file.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(gzip.compress(json.dumps(data).encode(), compresslevel=3))
        os.replace(tmp, file)
        return info

    def executable_exports(self) -> frozenset[str]:
        """The global scope: the interpreter and its own dependencies (libpython when shared, libc, libm)."""
        names: set[str] = set()
        for exe in self.executables:
            info = self.info(exe)
            names |= info.defined
            deps, _ = closure(exe, info, self, ())
            for dep in deps:
                names |= self.info(dep).defined
        return frozenset(names)


@dataclasses.dataclass(frozen=True)
class Resolution:
    library: str
    unresolved: tuple[str, ...]
    #: Unresolved symbol -> the library of the search path that defines it (when one does).
    provided_by: Mapping[str, str]
    missing_libraries: tuple[str, ...]
    closure: tuple[str, ...]


def closure(lib: Path, info: ElfInfo, search: LibrarySearch,
            local_dirs: Iterable[Path]) -> tuple[list[Path], list[str]]:
    """Breadth-first dependency closure of ``lib`` (what the loader searches), and the sonames not found."""
    origin = lib.parent
    extra = [origin, *[Path(r.replace("$ORIGIN", str(origin)).replace("${ORIGIN}", str(origin)))
                       for r in info.rpaths], *local_dirs]
    seen: dict[str, Path] = {}
    missing: list[str] = []
    queue = deque(info.needed)
    while queue:
        soname = queue.popleft()
        if soname in seen or soname in missing:
            continue
        found = search.find(soname, extra)
        if found is None:
            missing.append(soname)
            continue
        seen[soname] = found
        queue.extend(search.info(found).needed)
    return list(seen.values()), missing


def unresolved(lib: Path, search: LibrarySearch, local_dirs: Iterable[Path] = ()) -> Resolution:
    """The undefined non-weak symbols of ``lib`` that nothing in its load scope defines."""
    info = search.info(lib)
    deps, missing = closure(lib, info, search, local_dirs)
    available = set(search.executable_exports())
    for dep in deps:
        available |= search.info(dep).defined
    left = tuple(sorted(name for name, weak in info.undefined if not weak and name not in available))
    providers: dict[str, str] = {}
    if left:
        wanted = set(left)
        for soname, path in sorted(search._files.items()):
            if not wanted:
                break
            if not soname.startswith(("libc10", "libtorch", "libcudart", "libcublas", "libcusparse", "libcusolver",
                                      "libnvrtc", "libcuda", "libshm")):
                continue
            defined = search.info(path).defined
            for name in list(wanted):
                if name in defined:
                    providers[name] = soname
                    wanted.discard(name)
    return Resolution(str(lib), left, providers, tuple(missing), tuple(p.name for p in deps))


def search_for(sites: Iterable[Path], executable: Path, cache_dir: Path | None,
               extra_dirs: Iterable[Path] = (), system_dirs: Iterable[str] = SYSTEM_LIB_DIRS) -> LibrarySearch:
    """The library search of an environment with these site-packages folders and this interpreter
    (``system_dirs``: the machine's own library folders; none for another architecture's environment)."""
    dirs: list[Path] = [*extra_dirs]
    for site in sites:
        dirs.append(site / "torch" / "lib")
        dirs.extend(sorted(site.glob("nvidia/*/lib")))
        dirs.extend(sorted(site.glob("nvidia/*/lib64")))
        dirs.extend(sorted(site.glob("nvidia/*/*/lib")))
    dirs.extend(Path(d) for d in system_dirs)
    return LibrarySearch(dirs, [Path(os.path.realpath(executable))], cache_dir)


def environment_search(python: Path, cache_dir: Path | None, extra_dirs: Iterable[Path] = (),
                       system_dirs: Iterable[str] = SYSTEM_LIB_DIRS) -> LibrarySearch:
    """The library search of the Python environment of ``python`` (its torch, nvidia wheels, system folders;
    ``system_dirs``: a sysroot's instead of this machine's, ci/linux/sysroot.py)."""
    from ci import proc

    code = ("import json, sys, sysconfig; p = sysconfig.get_paths(); print(json.dumps({'sites': "
            "sorted({p['purelib'], p['platlib']} | {s for s in sys.path if s.endswith('-packages') or "
            "s.endswith('/site')}), 'exe': sys.executable, 'libdir': sysconfig.get_config_var('LIBDIR')}))")
    out = proc.run([python, "-c", code], capture=True, log=False).stdout
    paths = json.loads(out.strip().splitlines()[-1])
    return search_for([Path(s) for s in paths["sites"]], Path(paths["exe"]), cache_dir,
                      [*extra_dirs, *python_libdir(paths.get("libdir"))], system_dirs)


def python_libdir(libdir: str | None) -> list[Path]:
    """Python's LIBDIR (libpython), unless it is a system folder (Debian's Python): those are the system's, and
    a sysroot's replace them."""
    return [Path(libdir)] if libdir and libdir.rstrip("/") not in SYSTEM_LIB_DIRS else []


def resolve_wheel_libraries(root: Path, search: LibrarySearch) -> dict[str, Resolution]:
    """Resolutions of every extension library of an unpacked wheel at ``root`` (keyed by relative path)."""
    libs = sorted(p for p in root.rglob("*.so*") if p.is_file())
    bundled_dirs = sorted({p.parent for p in libs if any(part.endswith(".libs") for part in p.relative_to(root).parts)})
    results = {}
    for lib in libs:
        rel = lib.relative_to(root)
        if any(part.endswith(".libs") for part in rel.parts):
            continue
        results[str(rel)] = unresolved(lib, search, bundled_dirs)
    return results


def main(argv: list[str] | None = None) -> int:
    """``python -m ci.audit.symbols WHEEL --site DIR --out FILE``: resolve a wheel's libraries in another environment.

    Used inside a builder container, where the target's torch lives, by container builds.
    """
    import argparse
    import tempfile
    import zipfile

    p = argparse.ArgumentParser(prog="python -m ci.audit.symbols")
    p.add_argument("wheel", type=Path)
    p.add_argument("--site", type=Path, action="append", required=True, help="site-packages holding torch")
    p.add_argument("--extra-lib-dir", type=Path, action="append", default=[])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cache", type=Path, help="a folder that keeps the exports of libraries between runs")
    p.add_argument("--system-lib-dir", action="append", default=[],
                   help="a sysroot's system library folder, instead of this machine's (repeatable)")
    args = p.parse_args(argv)
    import sys
    import sysconfig

    search = search_for(args.site, Path(sys.executable), args.cache,
                        [*args.extra_lib_dir, *python_libdir(sysconfig.get_config_var("LIBDIR"))],
                        args.system_lib_dir or SYSTEM_LIB_DIRS)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(args.wheel) as zf:
            zf.extractall(tmp)
        results = resolve_wheel_libraries(Path(tmp), search)
    args.out.write_text(json.dumps({k: dataclasses.asdict(v) for k, v in results.items()}, indent=1))
    return 0


def load_resolutions(path: Path) -> dict[str, Resolution]:
    data = json.loads(path.read_text())
    return {k: Resolution(v["library"], tuple(v["unresolved"]), dict(v["provided_by"]),
                          tuple(v["missing_libraries"]), tuple(v["closure"])) for k, v in data.items()}


if __name__ == "__main__":
    raise SystemExit(main())
