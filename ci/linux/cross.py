"""linux_aarch64 (sbsa) wheels built on an x86_64 machine: nvcc cross-compiles, the target's files come from PyPI.

A CUDA extension build needs three things of the target architecture, and the farm takes all three from the
same indexes an x86_64 build uses, never from the machine:

* a host compiler for aarch64: Debian's ``g++-aarch64-linux-gnu`` (``FARM_AARCH64_CXX`` names another); nvcc
  compiles device code the same way for every host architecture and hands host code to it (``-ccbin``, which
  ``torch.utils.cpp_extension`` takes from ``CC``);
* the CUDA runtime of the target: the cell's own hash-pinned toolkit lock installed for
  ``manylinux_2_17_aarch64`` (NVIDIA's ``nvidia-cuda-runtime``/``-crt``/``-cccl`` wheels exist for sbsa);
  the x86_64 nvcc of the cell compiles, the aarch64 ``libcudart.so`` is what the linker sees;
* torch's aarch64 libraries: PyPI's ``manylinux_2_28_aarch64`` CUDA build of the target's torch (2.11 and
  newer), with its dependencies, in a folder of its own (``ci/linux/qemu.py`` imports the wheel with it under
  qemu-user; the audit resolves symbols against it).

The project's ``setup.py`` still runs on the build machine's Python with its x86_64 torch (it only asks torch
for include and library paths); ``LDFLAGS`` puts the aarch64 folders first so ``-ltorch``, ``-lc10`` and
``-lcudart`` find the aarch64 libraries (GNU ld also skips an incompatible library it meets first);
``_PYTHON_HOST_PLATFORM`` tags the wheel ``linux_aarch64`` and ``SETUPTOOLS_EXT_SUFFIX`` names per-Python
modules for aarch64 (setuptools' own cross-compilation switches). A CMake build gets
``CMAKE_TOOLCHAIN_FILE`` (read from the environment by CMake 3.21 and newer).

The cross compiler runs against the arm64 Debian bullseye sysroot (glibc 2.31, gcc 10's libstdc++; wrappers
made by ``ci/linux/sysroot.py``), not its own bookworm libc: the wheel's floor is bullseye's, and the audit resolves
symbols against the sysroot's libraries. ``FARM_SYSROOT=none`` uses the cross compiler's own.

What is not cross-compiled: Python's own headers are the build machine's (identical on both 64-bit Linux
architectures for the limited API and for every header an extension includes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement

from ci import fsutil, proc, settings, toolenv
from ci.errors import MissingRequirement
from ci.linux import sysroot
from ci.log import log
from ci.toolchain import toolkit
from ci.universe import matrix, pins, shapes
from ci.universe.lockcheck import platforms
from ci.universe.targets import Target

ARCH = "aarch64"
#: pip's ``--platform`` values for aarch64 wheels (pip takes only the tags it is given).
PLATFORMS = platforms.manylinux_platforms(ARCH)
DEFAULT_CXX = "aarch64-linux-gnu-g++"
#: Pins of torch's aarch64 CUDA build that PyPI has no aarch64 file of, and the release that replaces them
#: (torch 2.11.0 pins nvidia-nccl-cu13==2.28.9, whose files are x86_64 only): same soname, newer patch.
AARCH64_OVERRIDES: Mapping[str, str] = {"nvidia-nccl-cu13": "2.32.3"}


@dataclasses.dataclass(frozen=True)
class CrossCompiler:
    cc: str
    cxx: str
    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def platform_args(python: str | None = None) -> list[str]:
    args = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    return [*args, "--python-version", python] if python else args


def find_compiler(env: Mapping[str, str] | None = None) -> CrossCompiler:
    """The aarch64 C and C++ compilers (``FARM_AARCH64_CXX``, else Debian's cross g++ on PATH)."""
    env = settings.current().environ if env is None else env
    cxx = env.get("FARM_AARCH64_CXX", "").strip() or DEFAULT_CXX
    found = shutil.which(cxx)
    if found is None:
        raise MissingRequirement(
            "no aarch64 cross compiler: the farm builds linux_aarch64 wheels on x86_64 with one", cxx,
            "install it (Debian/Ubuntu: apt-get install g++-aarch64-linux-gnu) or set FARM_AARCH64_CXX to an "
            "aarch64 g++",
        )
    cc_name = re.sub(r"g\+\+(-\d+)?$", lambda m: "gcc" + (m.group(1) or ""), Path(found).name)
    cc = shutil.which(cc_name, path=str(Path(found).parent)) or shutil.which(cc_name) or found
    out = proc.run([found, "-dumpfullversion", "-dumpversion"], capture=True, check=False, log=False)
    machine = proc.run([found, "-dumpmachine"], capture=True, check=False, log=False).stdout.strip()
    if out.returncode != 0 or not machine.startswith("aarch64"):
        raise MissingRequirement("the aarch64 cross compiler does not target aarch64", f"{found}: {machine or '?'}",
                                 "point FARM_AARCH64_CXX at an aarch64-linux-gnu g++")
    return CrossCompiler(cc=cc, cxx=found, version=out.stdout.strip().splitlines()[0])


def check_compiler(cell: shapes.Cell, compiler: CrossCompiler) -> None:
    newest = matrix.MAX_GCC.get(cell.cuda, 0)
    if compiler.major > newest:
        raise MissingRequirement(f"the aarch64 cross g++ is newer than CUDA {cell.cuda} accepts (gcc-{newest})",
                                 f"{compiler.cxx} {compiler.version}",
                                 f"install an older cross g++ (g++-{newest}-aarch64-linux-gnu) and set "
                                 "FARM_AARCH64_CXX")


def ensure_target_runtime(cell: shapes.Cell, libraries: tuple[str, ...] = ()) -> Path:
    """The cell's toolkit wheels for aarch64 (hash-pinned: the same lock as the x86_64 toolkit), installed once;
    returns their ``CUDA_HOME``-like folder (``include``, ``lib`` with ``libcudart.so``). ``libraries``: the
    project's ``toolkit-libraries``, whose aarch64 ``lib<name>.so`` links are added."""
    if not cell.aarch64:
        raise MissingRequirement(f"cell {cell.name} has no aarch64 toolkit", cell.cuda,
                                 f"build aarch64 wheels in a CUDA 13 cell ({settings.entry('matrix')} lists them)")

    def finish(root: Path) -> None:
        home = root / cell.toolkit.home_subdir
        for versioned in sorted((home / "lib").glob("lib*.so.*")):
            link = versioned.with_name(versioned.name.split(".so.")[0] + ".so")
            if not link.exists():
                link.symlink_to(versioned.name)

    root = toolkit.install_once(f"cuda-{cell.cuda}-{ARCH}", pins.toolkit_lock(cell), finish,
                                pip_extra=platform_args())
    if libraries:
        extra = toolkit.install_once(f"cuda-{cell.cuda}-{ARCH}-libraries", pins.headers_lock(cell), finish,
                                     pip_extra=platform_args())
        lib = root / cell.toolkit.home_subdir / "lib"
        for name in libraries:
            for found in sorted((extra / cell.toolkit.home_subdir / "lib").glob(f"lib{name}.so*")):
                if not (lib / found.name).exists():
                    (lib / found.name).symlink_to(found)
    return root / cell.toolkit.home_subdir


def torch_requirements(wheel: Path, python: str) -> list[str]:
    """What torch's aarch64 wheel requires on Linux for ``python`` (markers evaluated for aarch64), with the
    ``AARCH64_OVERRIDES`` applied."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode()
    environment = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": ARCH,
                   "python_version": python, "os_name": "posix", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "python_full_version": f"{python}.0", "extra": ""}
    wanted = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not Marker(str(req.marker)).evaluate(environment):
            continue
        req.marker = None
        override = AARCH64_OVERRIDES.get(req.name)
        wanted.append(f"{req.name}=={override}" if override else str(req))
    return wanted


def ensure_torch(torch: str, python: str) -> Path:
    """PyPI's aarch64 build of ``torch`` for CPython ``python`` with its dependencies, installed once into a
    folder of its own (``pip install --target``: nothing here runs aarch64 code); returns that folder."""
    key = hashlib.sha256(json.dumps([torch, python, sorted(AARCH64_OVERRIDES.items()), PLATFORMS]).encode())
    root = toolenv.cache_root() / "envs" / f"{ARCH}-torch{torch}-py{python}-{key.hexdigest()[:12]}"
    site = root / "site"
    marker = root / ".farm-complete"
    if marker.is_file():
        log.reuse(f"the {ARCH} torch {torch} in {root}")
        return site
    fsutil.writable_dir(root.parent, "environment cache", "FARM_CACHE_DIR", "FARM_CACHE_DIR")
    with fsutil.locked(root.with_name(root.name + ".lock"), f"the {ARCH} torch {torch}"):
        if marker.is_file():
            return site
        shutil.rmtree(root, ignore_errors=True)
        try:
            pip = [sys.executable, "-m", "pip", "install", "--quiet", "--only-binary=:all:", "--target", str(site),
                   *platform_args(python)]
            download = root / "download"
            proc.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--no-deps",
                      "--dest", str(download), *platform_args(python), f"torch=={torch}"],
                     env={"PIP_CONSTRAINT": os.devnull},
                     what=f"downloading torch {torch} for {ARCH} failed",
                     hint=f"PyPI has CUDA builds of torch for manylinux_2_28_{ARCH} from 2.11 on; check the network")
            (wheel,) = sorted(download.glob("torch-*.whl"))
            proc.run([*pip, "--no-deps", str(wheel)], env={"PIP_CONSTRAINT": os.devnull},
                     what=f"installing torch {torch} for {ARCH} failed")
            proc.run([*pip, *torch_requirements(wheel, python)], env={"PIP_CONSTRAINT": os.devnull},
                     what=f"installing the {ARCH} dependencies of torch {torch} failed",
                     hint="a pin without an aarch64 file needs an entry in ci/linux/cross.py AARCH64_OVERRIDES")
            shutil.rmtree(download, ignore_errors=True)
            fsutil.atomic_write_json(marker, {"torch": torch, "python": python, "overrides": AARCH64_OVERRIDES})
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
    return site


def torch_python(target: Target) -> str:
    """The CPython whose aarch64 torch the build links and the import test runs: the target's own for
    per-Python wheels; for abi3 ones the emulated root's (any CPython at or above the floor serves)."""
    from ci.linux import qemu

    return qemu.ROOT_PYTHON if target.abi3 else target.python


def toolchain_file(folder: Path, compiler: CrossCompiler, sysroot_libs: list[Path]) -> Path:
    """A CMake toolchain file for the cross build (CMake 3.21+ reads ``CMAKE_TOOLCHAIN_FILE`` from the
    environment)."""
    path = folder / "aarch64-toolchain.cmake"
    lines = [
        "set(CMAKE_SYSTEM_NAME Linux)",
        "set(CMAKE_SYSTEM_PROCESSOR aarch64)",
        f'set(CMAKE_C_COMPILER "{compiler.cc}")',
        f'set(CMAKE_CXX_COMPILER "{compiler.cxx}")',
        f'set(CMAKE_CUDA_HOST_COMPILER "{compiler.cxx}")',
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        f'list(APPEND CMAKE_LIBRARY_PATH {" ".join(chr(34) + str(p) + chr(34) for p in sysroot_libs)})',
    ]
    fsutil.atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def build_env(target: Target, compiler: CrossCompiler, runtime: Path, torch_site: Path, work: Path) -> dict[str, str]:
    """The variables that turn the project's own build into an aarch64 build (see the module docstring)."""
    libs = [torch_site / "torch" / "lib", runtime / "lib"]
    ldflags = " ".join(f'"-L{p}"' for p in libs)
    env = {
        "CC": compiler.cc,
        "CXX": compiler.cxx,
        "LDSHARED": f"{compiler.cxx} -shared",
        "LDFLAGS": ldflags,  # the caller's and the project's follow (ci/builds/environment.py)
        "_PYTHON_HOST_PLATFORM": f"linux-{ARCH}",
        "CMAKE_TOOLCHAIN_FILE": str(toolchain_file(work, compiler, libs)),
        "FARM_TARGET_ARCH": ARCH,
    }
    if not target.abi3:
        env["SETUPTOOLS_EXT_SUFFIX"] = f".cpython-{target.python.replace('.', '')}-{ARCH}-linux-gnu.so"
    return env


@dataclasses.dataclass(frozen=True)
class CrossSetup:
    compiler: CrossCompiler
    runtime: Path
    torch_site: Path
    #: The sysroot the wrappers in ``compiler`` link against (None: FARM_SYSROOT=none).
    sysroot: sysroot.Sysroot | None = None


def prepare(target: Target) -> CrossSetup:
    """Everything an aarch64 build of ``target`` needs, checked before anything is installed."""
    compiler = find_compiler()
    check_compiler(target.cell, compiler)
    linked = sysroot.for_arch(ARCH)
    if linked is not None:
        cc, cxx = linked.wrappers(compiler.cc, compiler.cxx)
        compiler = dataclasses.replace(compiler, cc=str(cc), cxx=str(cxx))
    runtime = ensure_target_runtime(target.cell, target.project.toolkit_libraries)
    return CrossSetup(compiler, runtime, ensure_torch(target.torch, torch_python(target)), linked)
