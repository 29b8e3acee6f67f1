"""Running aarch64 Python on an x86_64 machine: an arm64 Debian root under qemu-user.

The import test of a linux_aarch64 wheel needs an aarch64 CPython, the aarch64 torch and the wheel. The root
is Debian's own arm64 packages: ``debootstrap --foreign`` downloads and unpacks the base system without running
any of it, and the Python packages it downloaded are unpacked the same way (``dpkg-deb -x``), so nothing
aarch64 runs until the test itself. qemu-user runs the interpreter with the root as its library prefix
(``qemu-aarch64 -L <root>``): no chroot, no binfmt registration, no root privileges at run time (debootstrap
itself needs root). torch and the wheel come from ``ci/linux/cross.py``'s folder and a temporary unpacked copy
through ``PYTHONPATH``: the interpreter sees nothing of the build.

CUDA is never initialised: an import and the project's smoke command on the CPU is what qemu can prove; the
GPU lanes run on an aarch64 GPU machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from ci import fsutil, proc, toolenv
from ci.errors import CommandFailed, MissingRequirement
from ci.log import log
from ci.universe import matrix

SUITE = "bookworm"
#: The CPython of the arm64 root (Debian bookworm's python3).
ROOT_PYTHON = matrix.DEBIAN_PYTHON[SUITE]
QEMU_NAMES = ("qemu-aarch64-static", "qemu-aarch64")


def find_qemu() -> Path:
    for name in QEMU_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise MissingRequirement("no qemu-user for aarch64: the import test of a linux_aarch64 wheel runs under it",
                             " or ".join(QEMU_NAMES),
                             "install it (Debian/Ubuntu: apt-get install qemu-user-static)")


def _mirror() -> str:
    from ci.linux import debian

    return str(debian.mirror())


def root_python(root: Path) -> Path:
    return root / "usr" / "bin" / f"python{ROOT_PYTHON}"


def ensure_root() -> Path:
    """The arm64 Debian root with python3, made once in the cache."""
    root = toolenv.cache_root() / "roots" / f"arm64-{SUITE}"
    marker = root.with_name(root.name + ".complete")
    if marker.is_file() and root_python(root).is_file():
        log.reuse(f"the arm64 {SUITE} root {root}")
        return root
    if shutil.which("debootstrap") is None:
        raise MissingRequirement("debootstrap is not installed: it makes the arm64 root the import test runs in",
                                 "debootstrap", "apt-get install debootstrap")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise MissingRequirement("debootstrap needs root to make the arm64 root", f"uid {os.geteuid()}",
                                 f"run this once as root (sudo), or make {root} with debootstrap --arch arm64 "
                                 "--foreign")
    fsutil.writable_dir(root.parent, "root cache", "FARM_CACHE_DIR", "FARM_CACHE_DIR")
    with fsutil.locked(root.with_name(root.name + ".lock"), f"the arm64 {SUITE} root"):
        if marker.is_file() and root_python(root).is_file():
            return root
        shutil.rmtree(root, ignore_errors=True)
        mirror = _mirror()
        started = time.monotonic()
        try:
            proc.run(["debootstrap", "--arch", "arm64", "--foreign", "--variant=minbase",
                      "--include=python3,libstdc++6", SUITE, str(root), mirror],
                     capture=True, what=f"debootstrap of the arm64 {SUITE} root failed",
                     hint=f"check that {mirror} serves {SUITE} for arm64 (FARM_DEBIAN_MIRROR names another mirror)")
            # --foreign unpacks only the essential packages; python3 and its libraries were downloaded
            # beside them and are unpacked here, without running maintainer scripts (nothing needs them).
            for deb in sorted((root / "var/cache/apt/archives").glob("*.deb")):
                proc.run(["dpkg-deb", "-x", str(deb), str(root)], log=False)
            shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
            if not root_python(root).is_file():
                raise CommandFailed("the arm64 root has no Python after debootstrap", root_python(root),
                                    "remove the folder and run again; check debootstrap's output")
            marker.write_text(f"{SUITE} {mirror}\n")
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
    log.info(f"arm64 {SUITE} root made in {time.monotonic() - started:.0f} s: {root}")
    return root


def command(root: Path, args: Sequence[str | Path]) -> list[str]:
    """``python args...`` of the arm64 root under qemu-user."""
    return [str(find_qemu()), "-L", str(root), str(root_python(root)), *map(str, args)]


def python_wrapper(folder: Path, root: Path, paths: Sequence[Path]) -> Path:
    """An executable ``python`` in ``folder`` that runs the arm64 root's Python under qemu with ``paths`` on
    ``PYTHONPATH``: the project's configured commands run through it unchanged."""
    script = folder / "python"
    qemu_cmd = " ".join(f"'{part}'" for part in command(root, []))
    path = os.pathsep.join(str(p) for p in paths)
    script.write_text("#!/bin/sh\n"
                      f"PYTHONPATH='{path}' CUDA_VISIBLE_DEVICES='' PYTHONNOUSERSITE=1 exec {qemu_cmd} \"$@\"\n")
    script.chmod(0o755)
    return script


@contextlib.contextmanager
def wheel_python(wheel: Path, torch_site: Path) -> Iterator[Path]:
    """A ``python`` (see python_wrapper) that sees the unpacked wheel and the aarch64 torch, nothing else."""
    root = ensure_root()
    with tempfile.TemporaryDirectory(prefix="farm-aarch64-") as tmp:
        unpacked = Path(tmp) / "wheel"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(unpacked)
        yield python_wrapper(Path(tmp), root, [unpacked, torch_site])


IMPORT_PROBE = (
    "import importlib, platform, time, sys; t = time.monotonic(); import torch; tt = time.monotonic() - t; "
    "m = importlib.import_module(sys.argv[1]); "
    "print(f'{platform.machine()} python {platform.python_version()} torch {torch.__version__} "
    "(import {tt:.0f} s) {m.__name__} from {m.__file__}')"
)


def import_wheel(wheel: Path, module: str, torch_site: Path) -> str:
    """Import ``module`` of ``wheel`` under qemu; returns the probe's line."""
    with wheel_python(wheel, torch_site) as python, tempfile.TemporaryDirectory(prefix="farm-run-") as scratch:
        out = proc.run([python, "-c", IMPORT_PROBE, module], cwd=Path(scratch), capture=True,
                       what=f"{wheel.name} does not import under qemu-aarch64",
                       hint="its output is above: an undefined symbol means it was linked against another torch")
    return out.stdout.strip().splitlines()[-1]
