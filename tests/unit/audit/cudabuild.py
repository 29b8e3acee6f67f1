"""Small, real CUDA objects and libraries for the audit's tests: a one-line kernel compiled by the nvcc of the
farm's newest release cell (its pinned toolkit, the one ``nox -s tests`` builds fusedops with), directly or through
the farm's wrapper (ci/nvcc/wrapper.py) as torch's ninja runs it, and read back with cuobjdump as the audit reads
a wheel. Tests skip when the toolkit cannot be had (no network and no cached copy)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from ci.audit import gpu_code
from ci.builds import arch_flags
from ci.errors import FarmError
from ci.universe import targets
from ci.universe.shapes import Cell

KERNEL = "__global__ void k(int* p) { *p = 1; }\nvoid launch(int* p) { k<<<1, 1>>>(p); }\n"


def toolkit_nvcc(cell: Cell) -> Path:
    """The cell's own nvcc (its pinned toolkit, installed once into the farm's cache)."""
    from ci.toolchain import toolkit

    try:
        return toolkit.ensure_toolkit(cell).nvcc
    except FarmError as exc:
        pytest.skip(f"no CUDA {cell.cuda} toolkit here: {exc.line()}")


def cuobjdump() -> Path:
    from ci.toolchain import toolkit

    try:
        return toolkit.ensure_cuobjdump()
    except FarmError as exc:
        pytest.skip(f"no cuobjdump here: {exc.line()}")


@dataclasses.dataclass(frozen=True)
class Compiled:
    """An object nvcc wrote, the line torch's ``ninja -v`` prints for its compile and what the command printed."""

    path: Path
    line: str
    printed: str

    @property
    def output(self) -> str:
        return f"{self.line}\n{self.printed}"


def compile_through_wrapper(folder: Path, target: targets.Target, project_flags: Sequence[str],
                            appended: str = "") -> Compiled:
    """Compile the kernel with the project's ``project_flags`` as torch's ninja does under the farm: through the
    wrapper, with the target's list and mode (``project-arch-flags``), the cell's real nvcc behind it;
    ``appended``: ``NVCC_APPEND_FLAGS`` (the project's build-env), which ninja's line does not show."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "k.cu").write_text(KERNEL)
    args = ["-c", "k.cu", "-o", "k.o", "-Xcompiler", "-fPIC", *project_flags]
    command = [sys.executable, "-I", str(arch_flags.WRAPPER), *args]
    env = {**os.environ, "FARM_NVCC_NEXT": str(toolkit_nvcc(target.cell)),
           "FARM_NVCC_ARCH_LIST": arch_flags.arch_list_of(target), "FARM_NVCC_ARCH_MODE": target.project.arch_flags}
    env.pop("NVCC_PREPEND_FLAGS", None)
    env.pop("NVCC_APPEND_FLAGS", None)
    if appended:
        env["NVCC_APPEND_FLAGS"] = appended
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return Compiled(folder / "k.o", f"[1/1] {shlex.join(command)}", done.stdout + done.stderr)


def shared_library(path: Path, cell: Cell, arch: str = "9.0") -> Path:
    """A shared library holding the kernel's SASS for ``arch`` and linking the CUDA runtime dynamically, as torch's
    CUDAExtension links it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / f"{path.name.split('.')[0]}.cu"
    source.write_text(KERNEL)
    num = arch.replace(".", "")
    subprocess.run([str(toolkit_nvcc(cell)), "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared",
                    f"-gencode=arch=compute_{num},code=sm_{num}", str(source), "-o", str(path)], check=True)
    source.unlink()
    return path


def host_library(path: Path) -> Path:
    """A shared library with no CUDA code (gcc)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / f"{path.name.split('.')[0]}.c"
    source.write_text("int cpu_op(int x) { return x + 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    source.unlink()
    return path


def held(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The SASS and PTX architectures cuobjdump finds in ``path``, as the audit reads them."""
    return gpu_code.list_archs(cuobjdump(), [path])


def wheel(folder: Path, name: str, files: Mapping[str, Path], requires: Sequence[str] = ()) -> Path:
    """A wheel named ``name`` holding ``files`` (their paths in the wheel -> the files), with the metadata a wheel
    needs (the audit reads its tags, METADATA and RECORD)."""
    dist, version = name.split("-")[:2]
    info = f"{dist}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
                        *(f"Requires-Dist: {r}\n" for r in requires)])
    tag = "-".join(name.removesuffix(".whl").split("-")[2:])
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, file in files.items():
            zf.write(file, member)
        zf.writestr(f"{info}/METADATA", metadata)
        zf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n")
        zf.writestr(f"{info}/RECORD", "")
    return path
