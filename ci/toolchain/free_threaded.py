"""A free-threaded CPython (``--disable-gil``) to build and test ``cp313t`` wheels with, made once from Debian's own
CPython source package.

Why it is built here: no Debian release packages a free-threaded CPython (trixie's ``python3.13`` is the GIL build),
and nothing outside the package registries can be downloaded on the farm's machines (no python.org installer, no
uv-managed Python). Debian's mirror is reachable, and its source package is CPython's release tarball plus Debian's
patches: the security fixes of Debian's stable updates among them.

How (:func:`ensure`), once per machine, under a lock:

* ``apt-get source --download-only python3.13`` from trixie, with a sources list (one ``deb-src`` line), package
  lists and a download cache of its own in a temporary folder (``ci/linux/sysroot.py``'s ``apt_options``: the
  machine's apt state is neither read nor written, no root needed): apt checks the files against the suite's signed
  ``Sources`` index. The upstream version must be :data:`SOURCES`' (a Debian stable release keeps its upstream
  version and only adds patches, so the pin holds for trixie's lifetime; a mismatch is one line);
* ``dpkg-source`` unpacks it and Debian's patch series is applied but :data:`SKIPPED_PATCHES`, the three that lay
  out Debian's own system install (its site.py knows no free-threaded build's folders);
* ``./configure --disable-gil --prefix=<cache folder>``, ``make -j<cores>``, ``make install`` (ensurepip installs
  pip). No PGO or LTO (``--enable-optimizations``): they would double the one-time build, and the interpreter builds
  and import-tests wheels, it serves no workload;
* the new interpreter must say ``Py_GIL_DISABLED``, run with the GIL off (``sys._is_gil_enabled()`` False) and
  import what pip and the builds need (:data:`NEEDED_MODULES`; a missing one names its Debian ``-dev`` package);
* a ``.complete`` marker is written last (the Debian version built, the flags, the seconds it took).

The folder is ``<cache>/tools/cpython-<version>t-<key>``, the key a hash of the source package, its upstream
version, the suite, the configure flags and the skipped patches: a changed flag is a new folder, never a reused one.
The build's output is kept beside it (``<folder>.configure.log``, ``.make.log``, ``.install.log``; a failed
build's too).
``python -m ci.toolchain.free_threaded [3.13]`` makes it and prints the interpreter's path.

Standard library only at import time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from ci import toolenv
from ci.errors import CommandFailed, MissingRequirement, UsageError


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a free-threaded CPython's source comes from: a Debian source package of one suite, its upstream
    version."""

    package: str
    suite: str
    upstream: str

    @property
    def minor(self) -> str:
        return ".".join(self.upstream.split(".")[:2])


#: The free-threaded CPythons the farm can build, by ``X.Y``. 3.14 is in Debian from forky (testing) on, whose
#: upstream version still moves: added here once a stable suite has it.
SOURCES: Mapping[str, Source] = {"3.13": Source("python3.13", "trixie", "3.13.5")}
#: ``./configure``'s flags besides ``--prefix`` (part of the cache key); ensurepip's default installs pip.
CONFIGURE_FLAGS = ("--disable-gil",)
#: Debian's patches that lay out Debian's own system install, left out (part of the cache key): its site.py's
#: folders (``lib/python3.13/site-packages``) ignore the free-threaded build's ``python3.13t`` ones, so nothing pip
#: installs into a venv would be importable; its sysconfig scheme sends installs to ``<prefix>/local``; and it
#: refuses ensurepip outside a venv. Every other patch of the series (the security fixes) is applied.
SKIPPED_PATCHES = ("distutils-install-layout.diff", "sysconfig-debian-schemes.diff", "ensurepip-disabled.diff")
#: Modules the interpreter must import, and the Debian package whose headers the build needs for each: pip needs
#: ssl and zlib, ctypes libffi, the source archives bz2 and lzma.
NEEDED_MODULES: Mapping[str, str] = {"ssl": "libssl-dev", "zlib": "zlib1g-dev", "_ctypes": "libffi-dev",
                                     "bz2": "libbz2-dev", "lzma": "liblzma-dev"}
COMPLETE = ".complete"
#: What the interpreter prints about itself: ``Py_GIL_DISABLED`` and ``sys._is_gil_enabled()``.
_PROBE = ("import sys, sysconfig; print(sysconfig.get_config_var('Py_GIL_DISABLED') or 0, "
          "int(getattr(sys, '_is_gil_enabled', lambda: True)()))")


#: What a candidate interpreter says it is (ci/toolchain/envs.py find_interpreter): ``3.12``, ``3.13t`` for a
#: free-threaded build (``Py_GIL_DISABLED``), then its path.
LABEL_PROBE = ("import sys, sysconfig; print('%d.%d' % sys.version_info[:2] + ('t' if "
               "sysconfig.get_config_var('Py_GIL_DISABLED') else '')); print(sys.executable)")


def running_label() -> str:
    """The running CPython as a target names it: ``3.11``, ``3.13t``."""
    import sysconfig

    threaded = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.version_info.major}.{sys.version_info.minor}{threaded}"


def source_for(python: str) -> Source:
    """The source of the free-threaded CPython ``python`` (``3.13``; ``3.13t`` too)."""
    minor = python.removesuffix("t")
    if minor not in SOURCES:
        raise UsageError("the farm builds no free-threaded CPython of this version", python,
                         f"use {', '.join(f'{v}t' for v in SOURCES)}, or add its Debian source package to SOURCES "
                         "in ci/toolchain/free_threaded.py")
    return SOURCES[minor]


def install_key(source: Source) -> str:
    """The cache key of ``source``'s build: the package, suite, upstream version and configure flags."""
    text = "\0".join((source.package, source.suite, source.upstream, *CONFIGURE_FLAGS, *SKIPPED_PATCHES))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def install_root(python: str = "3.13", cache: Path | None = None) -> Path:
    """The folder (``--prefix``) of the free-threaded CPython ``python`` in the farm's cache."""
    source = source_for(python)
    return (cache or toolenv.cache_root()) / "tools" / f"cpython-{source.upstream}t-{install_key(source)}"


def interpreter_in(root: Path, python: str = "3.13") -> Path:
    """The interpreter ``make install`` writes for a free-threaded build (``bin/python3.13t``)."""
    return root / "bin" / f"python{python.removesuffix('t')}t"


def cached(python: str = "3.13", cache: Path | None = None) -> Path | None:
    """The cached interpreter, if it was built completely (nothing is built here)."""
    root = install_root(python, cache)
    found = interpreter_in(root, python)
    return found if (root / COMPLETE).is_file() and found.is_file() else None


def gil_state(python: Path | str, env: Mapping[str, str] | None = None) -> tuple[bool, bool]:
    """(built free-threaded: ``Py_GIL_DISABLED``; the GIL enabled while it runs: ``sys._is_gil_enabled()``) of the
    interpreter ``python``. A GIL build is (False, True)."""
    from ci import proc

    done = proc.run([str(python), "-c", _PROBE], capture=True, check=False, log=False, env=env)
    if done.returncode != 0:
        raise CommandFailed("the interpreter does not run", python, f"its output: {done.stderr.strip()[-300:]}")
    disabled, enabled = done.stdout.split()
    return disabled == "1", enabled == "1"


def ensure(python: str = "3.13") -> Path:
    """The free-threaded CPython ``python`` (its ``bin/python3.13t``), built once into the farm's cache."""
    from ci import fsutil
    from ci.log import log

    found = cached(python)
    if found is not None:
        log.reuse(f"the free-threaded CPython {found}")
        return found
    source = source_for(python)
    root = install_root(python)
    _require_tools(source)
    fsutil.writable_dir(root.parent, "tool cache", "FARM_CACHE_DIR", "FARM_CACHE_DIR")
    with fsutil.locked(root.with_name(root.name + ".lock"), f"the free-threaded CPython {source.minor}"):
        found = cached(python)
        if found is not None:
            return found
        shutil.rmtree(root, ignore_errors=True)
        started = time.monotonic()
        try:
            version = _build(source, root, root.parent)
            # CPython's own test suite: 140 MB nothing of the farm runs.
            shutil.rmtree(root / "lib" / f"python{source.minor}t" / "test", ignore_errors=True)
            found = _check(root, source)
            seconds = time.monotonic() - started
            (root / COMPLETE).write_text(f"{source.package} {version} ({source.suite})\n"
                                         f"{' '.join(CONFIGURE_FLAGS)}\nbuilt in {seconds:.0f} s\n")
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
    log.info(f"free-threaded CPython {source.upstream} ({source.package} {version}) built in {seconds:.0f} s: {found}")
    return found


def _require_tools(source: Source) -> None:
    from ci.linux import sysroot

    for tool, package in (("apt-get", "apt"), ("dpkg-source", "dpkg-dev"), ("patch", "patch"), ("make", "make"),
                          ("gcc", "gcc")):
        if shutil.which(tool) is None:
            raise MissingRequirement(f"{tool} is not installed: it builds the free-threaded CPython "
                                     f"{source.minor} from Debian's source", tool, f"install {package}")
    if not sysroot.KEYRING.is_file():
        raise MissingRequirement("Debian's archive keyring is missing: the source package is checked with it",
                                 sysroot.KEYRING, "apt-get install debian-archive-keyring")


def _build(source: Source, root: Path, logs: Path) -> str:
    """Fetch, configure, compile and install ``source`` into ``root``; returns the Debian version built."""
    from ci import proc
    from ci.linux import debian, sysroot

    mirror = str(debian.mirror())
    hint = (f"check that {mirror} serves {source.suite}'s sources (FARM_DEBIAN_MIRROR names another mirror; "
            "http_proxy is honoured)")
    with tempfile.TemporaryDirectory(prefix=".farm-cpython-", dir=root.parent) as tmp:
        work = Path(tmp)
        opts = sysroot.private_apt(work, f"deb-src [signed-by={sysroot.KEYRING}] {mirror} {source.suite} main",
                                   "x86_64", "src")
        proc.run(["apt-get", *opts, "update"], capture=True,
                 what=f"apt-get could not read {source.suite}'s source lists", hint=hint)
        proc.run(["apt-get", *opts, "source", "--download-only", source.package], cwd=work / "src", capture=True,
                 what=f"apt-get could not fetch the source package {source.package}", hint=hint)
        tree, version = _unpacked(work / "src", source)
        # The compiler's output goes to the log only: thousands of lines that say nothing when all goes well.
        for step, args in (("configure", ["./configure", f"--prefix={root}", *CONFIGURE_FLAGS]),
                           ("make", ["make", f"-j{os.cpu_count() or 1}"]), ("install", ["make", "install"])):
            log_file = logs / f"{root.name}.{step}.log"
            proc.run(args, cwd=tree, tee=log_file, hide=lambda _line: True, what=f"CPython's {step} failed",
                     hint=f"its output is in {log_file}")
    return version


def _unpacked(folder: Path, source: Source) -> tuple[Path, str]:
    """The source package ``apt-get source --download-only`` left in ``folder``, unpacked with Debian's patches but
    :data:`SKIPPED_PATCHES`, and the Debian version of its ``.dsc``; the upstream version must be the pinned one."""
    from ci import proc

    dscs = sorted(folder.glob(f"{source.package}_*.dsc"))
    if len(dscs) != 1:
        raise CommandFailed("apt-get source left no single source package", folder, "check apt-get's output above")
    version = upstream_check(dscs[0].name, source)
    tree = folder / "tree"
    # apt checked every file against the suite's signed Sources index, as `apt-get source` (dpkg-source --no-check).
    proc.run(["dpkg-source", "--no-check", "--skip-patches", "-x", dscs[0].name, tree.name], cwd=folder,
             capture=True, what=f"dpkg-source could not unpack {dscs[0].name}")
    patches = tree / "debian" / "patches"
    for name in series(patches / "series"):
        proc.run(["patch", "-p1", "--batch", "--forward", "--silent", "-i", patches / name], cwd=tree, capture=True,
                 what=f"Debian's patch {name} does not apply", hint="add it to SKIPPED_PATCHES in "
                 "ci/toolchain/free_threaded.py if it lays out Debian's own install, else report it")
    return tree, version


def upstream_check(dsc: str, source: Source) -> str:
    """The Debian version of the source package ``dsc`` (``python3.13_3.13.5-2+deb13u5.dsc``), whose upstream
    version must be the pinned one."""
    version = dsc.removesuffix(".dsc").split("_", 1)[1]
    upstream = version.split("-")[0].split(":")[-1]
    if upstream != source.upstream:
        raise CommandFailed(f"Debian's {source.suite} now has CPython {upstream}, not the pinned {source.upstream}",
                            f"{source.package} {version}",
                            f"update SOURCES in ci/toolchain/free_threaded.py to {upstream}")
    return version


def series(path: Path) -> list[str]:
    """The patches of a quilt ``series`` file to apply, in order: those not commented out, less
    :data:`SKIPPED_PATCHES`."""
    names = [line.split()[0] for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [name for name in names if name not in SKIPPED_PATCHES]


def _check(root: Path, source: Source) -> Path:
    """The installed interpreter, checked: free-threaded, the GIL off, the modules pip and builds need."""
    from ci import proc

    python = interpreter_in(root, source.minor)
    if not python.is_file():
        raise CommandFailed("make install wrote no free-threaded interpreter", python,
                            "check the build's log; configure may not have taken --disable-gil")
    built, enabled = gil_state(python)
    if not built or enabled:
        raise CommandFailed("the interpreter built is not free-threaded", f"Py_GIL_DISABLED {int(built)}, GIL "
                            f"{'enabled' if enabled else 'disabled'}", "check the configure flags")
    probe = ("import importlib.util, sys; "
             "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")
    missing = proc.run([python, "-c", probe, *NEEDED_MODULES], capture=True, log=False).stdout.split()
    if missing:
        raise MissingRequirement("the free-threaded CPython was built without modules pip and the builds need",
                                 ", ".join(missing), "install " + " ".join(NEEDED_MODULES[m] for m in missing)
                                 + f" and run again (the build is redone: {root} was removed)")
    # pip, installed by ensurepip, imports only where site.py looks: the free-threaded build's own folders.
    proc.run([python, "-m", "pip", "--version"], capture=True, what="the free-threaded CPython cannot import the pip "
             "it installed (its site-packages folder is not on sys.path)", hint="a Debian patch changed site.py's "
             "folders: add it to SKIPPED_PATCHES in ci/toolchain/free_threaded.py")
    return python


if __name__ == "__main__":  # python -m ci.toolchain.free_threaded [3.13]
    print(ensure(sys.argv[1] if len(sys.argv) > 1 else "3.13"))
