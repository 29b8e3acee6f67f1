"""A Debian bullseye sysroot under the build machine's compiler: the lowest glibc floor this machine reaches.

A wheel's ``manylinux_2_N`` tag is the newest glibc symbol version its libraries need, and they need what the
headers and libraries they were compiled and linked against offer: on Debian bookworm (glibc 2.36, gcc 12)
``__libc_single_threaded@GLIBC_2.32`` alone, from libstdc++'s headers, makes every C++ extension
``manylinux_2_34``. Debian bullseye's glibc is 2.31 (Ubuntu 20.04's too) and its libstdc++ is gcc 10's
(``GLIBCXX_3.4.28``), but its Python is 3.9 and its gcc too old for CUDA 13. So the compiler stays the
machine's (gcc 12 on bookworm, the cross gcc 12 for aarch64, gcc 13 on trixie), and only what it compiles
against and links with is bullseye's: ``--sysroot`` for glibc's headers and libraries, and ``-L`` to gcc 10's
``libstdc++.so``/``libgcc_s`` first (``--sysroot`` alone still links the compiler's own, newer, libstdc++).

* **The sysroot** (:func:`ensure_sysroot`) is made once in the farm's cache, ``sysroots/<arch>-<suite>``: the
  bullseye packages of :func:`packages` (``libc6``, ``libc6-dev``, ``libstdc++-10-dev``, ...; about 70 MB) are
  downloaded with ``apt-get download`` against a sources list, package lists and a download cache of its own
  in a temporary folder (the machine's apt configuration, its lists and its ``apt.conf.d`` hooks are neither
  read nor written; no root needed), unpacked with ``dpkg-deb -x``, and every absolute symbolic link in it is
  made relative (``lib64/ld-linux-x86-64.so.2`` included): an absolute one makes ld fail or silently open the
  build machine's library. A ``.complete`` marker is written last, under a lock.
* **Wrapper compilers** (:meth:`Sysroot.wrappers`): ``bin/<name>/gcc`` and ``bin/<name>/g++`` in the sysroot
  folder, one pair per real compiler. They find the sysroot from their own location, so the same scripts work
  on the host and in a container that mounts the folder anywhere (``ci/linux/container.py``). :meth:`Sysroot.build_env`
  is ``CC``/``CXX``/``LDSHARED`` for setuptools; torch's extension builder hands ``CC`` to nvcc as ``-ccbin``.
* **The audit** must resolve the wheel's undefined symbols against the sysroot's system libraries
  (:meth:`Sysroot.system_lib_dirs`), not the build machine's: gcc 12's headers leave undefined symbols
  *without a version* that gcc 10's libstdc++ lacks (``std::__throw_bad_array_new_length()``), which neither
  ld nor auditwheel reports. Resolved against the sysroot they fail the audit's ``symbols:<lib>`` check unless
  torch's libraries define them (libc10 does export that one).

glibc 2.30 is the oldest that works with gcc 12's libstdc++ headers (``pthread_cond_clockwait@GLIBC_2.30``).

``FARM_SYSROOT=none`` turns it off (host, cross and container builds then link against the build machine's or
the image's own glibc and libstdc++); unset or ``bullseye`` is the default. docs/glibc-floor.md has the
measured floors of every route.

Standard library only at import time (``ci/linux/routes.py`` asks :func:`suite_from_env` before any environment
exists).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from ci import settings, toolenv
from ci.errors import MissingRequirement, UsageError

ENV = "FARM_SYSROOT"
DEFAULT_SUITE = "bullseye"
#: Suites the farm knows to work: glibc >= 2.30 (gcc 12's libstdc++ headers) and a libstdc++ to link.
SUITES: Mapping[str, str] = {"bullseye": "10"}
OFF = ("none", "off", "0", "no")
DEBIAN_ARCH: Mapping[str, str] = {"x86_64": "amd64", "aarch64": "arm64"}
TRIPLET: Mapping[str, str] = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
#: The dynamic loader, relative to the sysroot.
LOADER: Mapping[str, str] = {"x86_64": "lib64/ld-linux-x86-64.so.2", "aarch64": "lib/ld-linux-aarch64.so.1"}
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


def packages(gcc: str) -> tuple[str, ...]:
    """What a C/C++ link against the suite needs: glibc, kernel headers, libcrypt, gcc ``gcc``'s libstdc++."""
    return ("libc6", "libc6-dev", "linux-libc-dev", "libcrypt1", "libcrypt-dev", f"libstdc++-{gcc}-dev",
            f"libgcc-{gcc}-dev", "libstdc++6", "libgcc-s1")


def suite_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """The sysroot's suite ``FARM_SYSROOT`` asks for (unset: bullseye), or None for ``FARM_SYSROOT=none``."""
    env = settings.current().environ if env is None else env
    value = env.get(ENV, "").strip().lower()
    if not value:
        return DEFAULT_SUITE
    if value in OFF:
        return None
    if value not in SUITES:
        raise UsageError(f"{ENV} names no sysroot the farm knows", value,
                         f"use {' or '.join(SUITES)} (the default), or none to link against this machine's glibc")
    return value


@dataclasses.dataclass(frozen=True)
class Sysroot:
    root: Path
    arch: str = "x86_64"
    suite: str = DEFAULT_SUITE

    @property
    def triplet(self) -> str:
        return TRIPLET[self.arch]

    @property
    def gcc(self) -> str:
        return SUITES[self.suite]

    @property
    def loader(self) -> Path:
        return self.root / LOADER[self.arch]

    def system_lib_dirs(self) -> list[Path]:
        """The loader's system folders of a machine of this suite: where the audit resolves libc, libstdc++."""
        return [self.root / "lib" / self.triplet, self.root / "usr" / "lib" / self.triplet]

    def link_dirs(self, root: str | None = None) -> list[str]:
        """``-L`` folders, in this order: gcc 10's libstdc++/libgcc, then glibc's (``root``: as the wrapper
        script spells the sysroot)."""
        base = str(self.root) if root is None else root
        return [f"{base}/usr/lib/gcc/{self.triplet}/{self.gcc}", f"{base}/usr/lib/{self.triplet}",
                f"{base}/lib/{self.triplet}"]

    def include_dirs(self, compiler: str, lang: str) -> list[str] | None:
        """The compiler's ``#include <...>`` folders under the sysroot when one of them outside the sysroot holds
        a C library (a cross compiler's own ``/usr/aarch64-linux-gnu/include``: bookworm's glibc headers, searched
        before the sysroot's): the list without it, sysroot folders spelled ``$S/...``. None: nothing to drop
        (native compilers), or ``compiler`` is not on this machine (a container's)."""
        if shutil.which(compiler) is None:
            return None
        from ci import proc

        out = proc.run([compiler, f"--sysroot={self.root}", "-x", lang, "-E", "-v", os.devnull], capture=True,
                       check=False, log=False)
        lines = out.stderr.splitlines()
        try:
            first = lines.index("#include <...> search starts here:") + 1
            dirs = [line.strip() for line in lines[first:lines.index("End of search list.")]]
        except ValueError:
            return None
        inside = str(self.root)
        foreign = [d for d in dirs if not d.startswith(inside) and (Path(d) / "features.h").is_file()]
        if not foreign:
            return None
        return [d.replace(inside, "$S", 1) if d.startswith(inside) else d for d in dirs if d not in foreign]

    def wrapper_script(self, compiler: str, cxx: bool, probe: bool = True) -> str:
        """A ``sh`` script that runs ``compiler`` against the sysroot two folders above the script: glibc's
        headers, libraries and start files (``-B``: crt1.o, crti.o) and gcc 10's libstdc++ (``-L`` first)."""
        flags = " ".join([f'-B"$S/usr/lib/{self.triplet}/"', *(f'-L"{d}"' for d in self.link_dirs("$S")), "-pthread"])
        flags += ' -idirafter "$H/include"'
        head = ("#!/bin/sh\n"
                f"# ci/linux/sysroot.py: {compiler} against the Debian {self.suite} {self.arch} sysroot two folders "
                "up\n"
                'H=$(cd "$(dirname "$0")" && pwd)\nS=$(cd "$H/../.." && pwd)\n')
        run = f'exec {shlex.quote(compiler)} --sysroot="$S"'
        includes = {lang: self.include_dirs(compiler, lang) if probe else None for lang in ("c", "c++")}
        if includes["c++"] is None or includes["c"] is None:
            return head + f'{run} {flags} "$@"\n'

        def line(dirs: list[str]) -> str:
            return f'{run} -nostdinc {" ".join(f"-isystem {chr(34)}{d}{chr(34)}" for d in dirs)} {flags} "$@"\n'

        if cxx:
            return head + line(includes["c++"])
        # The C wrapper compiles C++ too: nvcc hands it host code with -x c++ (CC is nvcc's -ccbin).
        return (head + "lang=c\nfor arg in \"$@\"; do\n  case $arg in\n"
                "    c++|-xc++|*.cpp|*.cc|*.cxx|*.C|*.ii) lang=c++ ;;\n  esac\ndone\n"
                f'if [ "$lang" = c++ ]; then\n  {line(includes["c++"])}fi\n{line(includes["c"])}')

    def wrappers(self, cc: str, cxx: str, probe: bool = True) -> tuple[Path, Path]:
        """The wrapper compilers (``gcc``, ``g++``) around ``cc`` and ``cxx`` (paths or names on PATH where they
        run), written once into ``bin/<name>/`` of the sysroot folder (``probe``: the compilers are this
        machine's, so their include folders can be asked; a container's are not)."""
        key = hashlib.sha256(f"{cc}\0{cxx}".encode()).hexdigest()[:8]
        folder = self.root / "bin" / f"{re.sub(r'[^A-Za-z0-9.+_-]', '_', Path(cxx).name)}-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        self._python_includes(folder / "include")
        made = []
        for name, compiler, is_cxx in (("gcc", cc, False), ("g++", cxx, True)):
            path = folder / name
            text = self.wrapper_script(compiler, is_cxx, probe)
            if not path.is_file() or path.read_text() != text:
                tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
                tmp.write_text(text)
                tmp.chmod(0o755)
                os.replace(tmp, path)
            made.append(path)
        return made[0], made[1]

    def _python_includes(self, folder: Path) -> None:
        """Debian's Python headers include ``<x86_64-linux-gnu/python3.N/pyconfig.h>`` from the machine's
        ``/usr/include``, which ``--sysroot`` hides: links to just those folders, searched last
        (``-idirafter``), resolved where the compiler runs (the host, or the container that mounts the sysroot).
        Nothing else of the machine's ``/usr/include`` (its newer glibc headers) becomes visible."""
        multiarch = folder / self.triplet
        multiarch.mkdir(parents=True, exist_ok=True)
        for minor in range(8, 16):
            link = multiarch / f"python3.{minor}"
            if not link.is_symlink():
                link.symlink_to(f"/usr/include/{self.triplet}/python3.{minor}")

    def build_env(self, cc: str, cxx: str, mount: str | None = None) -> dict[str, str]:
        """``CC``, ``CXX``, ``LDSHARED`` and the CUDA host compiler of nvcc and CMake, for a build against the
        sysroot (``mount``: where a container sees the sysroot folder; the paths are then the container's)."""
        paths = [str(p) if mount is None else f"{mount}/{p.relative_to(self.root).as_posix()}"
                 for p in self.wrappers(cc, cxx, probe=mount is None)]
        # CUDAHOSTCXX: CMake's CUDA host compiler; NVCC_CCBIN: nvcc's when no -ccbin is given. Without them a CMake
        # build compiled its .cu host code with the plain g++ against this machine's headers (an unversioned
        # __libc_single_threaded, which the audit caught).
        # LDCXXSHARED too: setuptools (72 and newer) links C++ extensions with it, and an interpreter built with
        # --enable-shared (pyenv's, for one) records "-L<prefix>/lib -Wl,-rpath,<prefix>/lib" there, which would
        # put this machine's Python folder into the wheel's RUNPATH (the audit's rpath check refuses it).
        linker = f"{shlex.quote(paths[1])} -shared"
        return {"CC": paths[0], "CXX": paths[1], "LDSHARED": linker, "LDCXXSHARED": linker,
                "CUDAHOSTCXX": paths[1], "NVCC_CCBIN": paths[1]}


def host_compilers(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The C and C++ compilers a host build would use without the sysroot (``CC``/``CXX``, else gcc/g++)."""
    env = settings.current().environ if env is None else env
    found = []
    for var, default in (("CC", "gcc"), ("CXX", "g++")):
        name = env.get(var, "").strip() or default
        path = shutil.which(name)
        if path is None:
            raise MissingRequirement(f"no C/C++ compiler for the build ({var})", name,
                                     "install gcc and g++ (Debian/Ubuntu: apt-get install g++) or set CC and CXX")
        found.append(path)
    return found[0], found[1]


def _mirror() -> str:
    from ci.linux import debian

    return str(debian.mirror())


def complete(root: Path, arch: str) -> bool:
    marker = root.with_name(root.name + ".complete")
    libc = root / "usr" / "lib" / TRIPLET[arch] / "libc.so"
    return marker.is_file() and (root / LOADER[arch]).exists() and libc.is_file()


def apt_options(work: Path, arch: str) -> list[str]:
    """apt-get options that use only ``work`` (sources, lists, cache, an empty dpkg status and no apt.conf.d):
    the machine's apt state and its hooks are not touched."""
    darch = DEBIAN_ARCH[arch]
    opts = {
        "Dir::Etc::sourcelist": str(work / "sources.list"), "Dir::Etc::sourceparts": "-",
        "Dir::Etc::parts": str(work / "apt.conf.d"), "Dir::Etc::preferences": str(work / "preferences"),
        "Dir::Etc::preferencesparts": "-", "Dir::State::Lists": str(work / "lists"),
        "Dir::State::status": str(work / "status"), "Dir::Cache": str(work / "cache"),
        "APT::Architecture": darch, "APT::Architectures": darch, "Acquire::Languages": "none",
        "APT::Sandbox::User": "root" if hasattr(os, "geteuid") and os.geteuid() == 0 else "",
    }
    return [arg for k, v in opts.items() if v for arg in ("-o", f"{k}={v}")]


def make_links_relative(root: Path) -> int:
    """Point every absolute symbolic link under ``root`` into ``root``, relatively; returns how many."""
    changed = 0
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            link = Path(folder) / name
            if not link.is_symlink():
                continue
            target = os.readlink(link)
            if not target.startswith("/"):
                continue
            link.unlink()
            link.symlink_to(os.path.relpath(root / target.lstrip("/"), link.parent))
            changed += 1
    return changed


def ensure_sysroot(arch: str = "x86_64", suite: str = DEFAULT_SUITE) -> Sysroot:
    """The Debian ``suite`` sysroot for ``arch`` (glibc, libstdc++ of gcc 10), made once in the cache."""
    from ci import fsutil
    from ci.log import log

    if arch not in TRIPLET or suite not in SUITES:
        raise UsageError("no sysroot for this architecture or suite", f"{arch} {suite}",
                         f"architectures: {', '.join(TRIPLET)}; suites: {', '.join(SUITES)}")
    root = toolenv.cache_root() / "sysroots" / f"{arch}-{suite}"
    result = Sysroot(root, arch, suite)
    if complete(root, arch):
        log.reuse(f"the {suite} {arch} sysroot {root}")
        return result
    _require_tools(suite)
    fsutil.writable_dir(root.parent, "sysroot cache", "FARM_CACHE_DIR", "FARM_CACHE_DIR")
    marker = root.with_name(root.name + ".complete")
    with fsutil.locked(root.with_name(root.name + ".lock"), f"the {suite} {arch} sysroot"):
        if complete(root, arch):
            return result
        shutil.rmtree(root, ignore_errors=True)
        marker.unlink(missing_ok=True)
        mirror = _mirror()
        started = time.monotonic()
        try:
            debs = _unpack_packages(root, arch, suite, mirror)
            links = make_links_relative(root)
            for needed in (root / LOADER[arch], root / "usr/lib" / TRIPLET[arch] / "libc.so"):
                if not needed.exists():
                    raise MissingRequirement(f"the {suite} sysroot lacks a file after unpacking", needed,
                                             "remove the folder and run again; check apt-get's output")
            # The package files' names carry their versions: what the sysroot was made of.
            marker.write_text(f"{suite} {arch} {mirror}\n" + "".join(f"{d.name}\n" for d in debs))
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
    log.info(f"{suite} {arch} sysroot made in {time.monotonic() - started:.0f} s ({links} absolute links "
             f"made relative): {root}")
    return result


def _require_tools(suite: str) -> None:
    """apt-get and dpkg-deb, and Debian's archive keyring to check the packages with."""
    for tool, package in (("apt-get", "apt"), ("dpkg-deb", "dpkg")):
        if shutil.which(tool) is None:
            raise MissingRequirement(f"{tool} is not installed: it makes the {suite} sysroot local builds link "
                                     "against", tool, f"install {package}, or set {ENV}=none to link against this "
                                     "machine's glibc (a higher glibc floor)")
    if not KEYRING.is_file():
        raise MissingRequirement(f"Debian's archive keyring is missing: the {suite} packages are checked with it",
                                 KEYRING, f"apt-get install debian-archive-keyring, or set {ENV}=none")


def private_apt(work: Path, source_line: str, arch: str, *folders: str) -> list[str]:
    """apt's options for an apt of its own in ``work`` (empty state, one ``sources.list`` line, no root rights),
    with ``folders`` made beside its own."""
    for sub in ("lists/partial", "cache/archives/partial", "apt.conf.d", *folders):
        (work / sub).mkdir(parents=True)
    (work / "status").write_text("")
    (work / "preferences").write_text("")
    (work / "sources.list").write_text(source_line + "\n")
    return apt_options(work, arch)


def _unpack_packages(root: Path, arch: str, suite: str, mirror: str) -> list[Path]:
    """The sysroot's packages downloaded from ``mirror`` by an apt of their own (a throwaway state folder beside
    ``root``, no root rights) and unpacked into ``root``; the package files, whose names carry their versions."""
    from ci import proc

    hint = (f"check that {mirror} serves {suite} for {DEBIAN_ARCH[arch]} (FARM_DEBIAN_MIRROR names another "
            f"mirror; http_proxy is honoured), or set {ENV}=none")
    with tempfile.TemporaryDirectory(prefix=".farm-sysroot-", dir=root.parent) as tmp:
        work = Path(tmp)
        opts = private_apt(work, f"deb [signed-by={KEYRING}] {mirror} {suite} main", arch, "debs")
        proc.run(["apt-get", *opts, "update"], capture=True,
                 what=f"apt-get could not read the {suite} package lists for the sysroot", hint=hint)
        proc.run(["apt-get", *opts, "download", *packages(SUITES[suite])], cwd=work / "debs", capture=True,
                 what=f"apt-get could not download the {suite} packages of the sysroot", hint=hint)
        root.mkdir()
        debs = sorted((work / "debs").glob("*.deb"))
        for deb in debs:
            proc.run(["dpkg-deb", "-x", deb, root], what=f"dpkg-deb could not unpack {deb.name}")
    return debs


def for_arch(arch: str, env: Mapping[str, str] | None = None) -> Sysroot | None:
    """The sysroot builds for ``arch`` use (made when missing), or None when ``FARM_SYSROOT=none``.

    By default (``FARM_SYSROOT`` unset) a machine that cannot make one (no apt-get or dpkg-deb, or no Debian
    archive keyring: an Ubuntu or Fedora machine) builds against its own glibc, and one yellow line says so and
    what to install; ``FARM_SYSROOT=bullseye`` makes that an error. A failed download is always an error.
    """
    env = settings.current().environ if env is None else env
    suite = suite_from_env(env)
    if suite is None:
        return None
    try:
        return ensure_sysroot(arch, suite)
    except MissingRequirement as exc:
        if env.get(ENV, "").strip():
            raise
        from ci.log import log

        log.note(f"no {suite} sysroot:", f"{exc.what} ({exc.value}); building "
                 f"against this machine's own glibc and libstdc++, a higher glibc floor ({exc.fix})")
        return None
