"""Container builds: cibuildwheel in the cell's builder image, then the host-side audit.

cibuildwheel builds the abi3 wheel once per cell (one build identifier, the
image's Python), repairs it with auditwheel excluding torch's and CUDA's
libraries, and imports it in a clean environment inside the container as its
test step. The farm then audits the result on the host (the same audit as host
builds) and moves it into ``wheelhouse/cu<major>/`` only if everything passed.
Pip and ccache caches live in named volumes, so a second build of an unchanged
cell reuses downloads and objects.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ci import audit, build, images, matrix, proc, report, toolkit

PIP_CACHE_VOLUME = "cuda-ext-farm-pip-cache"
CCACHE_VOLUME = "cuda-ext-farm-ccache"
CONTAINER_HOME = "/home/build"
CONTAINER_CA = "/run/farm/ca-bundle.crt"

SMOKE_TEST = (
    "python -c \"import torch, fusedops; "
    "x = torch.tensor([0.5, 1.5, 2.5, -1.7]); "
    "assert fusedops.round_ste(x).tolist() == [0.0, 2.0, 2.0, -2.0]; "
    "print('import test ok:', fusedops.build_info())\""
)


@dataclasses.dataclass(frozen=True)
class ContainerBuild:
    cell: matrix.Cell
    image: str
    wheelhouse: Path
    project: Path = build.PROJECT_ROOT
    max_jobs: int | None = None


def gcc_major(cell: matrix.Cell) -> str:
    return cell.host_compiler.split("-")[1]


def nvcc_version(cell: matrix.Cell) -> str | None:
    """The nvcc a cell's image holds: the pinned wheel's version for PyPI toolkits."""
    for req in cell.toolkit.packages:
        if req.startswith("nvidia-cuda-nvcc=="):
            return req.split("==")[1]
        if req.startswith("nvidia-cuda-toolkit="):
            # Debian version strings read 12.4.131~12.4.1-2: the part before ~ is nvcc's.
            return req.split("=")[1].split("~")[0]
    return None


def build_identifier(spec: images.ImageSpec) -> str:
    tag = dict(spec.build_args)["PYTHON_TAG"].split("-")[0]
    return f"{tag}-manylinux_x86_64"


def cibuildwheel_env(job: ContainerBuild, spec: images.ImageSpec, ca_bundle: Path | None) -> dict[str, str]:
    cell = job.cell
    excluded = (*matrix.TORCH_LIBRARIES, *matrix.cuda_libraries(cell.cuda_major))
    excludes = " ".join(f"--exclude {lib}" for lib in excluded)
    build_env = {
        "TORCH_CUDA_ARCH_LIST": cell.arch_list,
        "FUSEDOPS_CUDA": "1",
        "FUSEDOPS_NVCC_VERSION": nvcc_version(cell) or "",
        "FUSEDOPS_BUILD_DIR": "/tmp/farm-build",
        "MAX_JOBS": str(job.max_jobs or os.cpu_count() or 2),
        "CXX": f"/usr/lib/ccache/g++-{gcc_major(cell)}",
        "CC": f"gcc-{gcc_major(cell)}",
        "PYTORCH_NVCC": "ccache /usr/local/cuda/bin/nvcc",
        "CCACHE_DIR": f"{CONTAINER_HOME}/.cache/ccache",
        "CCACHE_BASEDIR": "/project",
        "CCACHE_NOHASHDIR": "1",
    }
    create_args = [f"--volume={PIP_CACHE_VOLUME}:{CONTAINER_HOME}/.cache/pip",
                   f"--volume={CCACHE_VOLUME}:{CONTAINER_HOME}/.cache/ccache"]
    if ca_bundle is not None:
        # A read-only mount for the container's lifetime: never part of an image.
        create_args.append(f"--volume={ca_bundle}:{CONTAINER_CA}:ro")
        build_env["PIP_CERT"] = CONTAINER_CA
        build_env["SSL_CERT_FILE"] = CONTAINER_CA
    env = {
        "CIBW_PLATFORM": "linux",
        "CIBW_ARCHS": "x86_64",
        "CIBW_BUILD": build_identifier(spec),
        "CIBW_MANYLINUX_X86_64_IMAGE": job.image,
        "CIBW_CONTAINER_ENGINE": f"docker; create_args: {' '.join(create_args)}; disable_host_mount: true",
        "CIBW_BUILD_FRONTEND": "build; args: --no-isolation",
        "CIBW_BEFORE_BUILD": f"pip install '{cell.torch_requirement}' 'setuptools>=77' wheel ninja",
        "CIBW_ENVIRONMENT": " ".join(f'{k}="{v}"' for k, v in build_env.items()),
        "CIBW_REPAIR_WHEEL_COMMAND": f"auditwheel repair {excludes} -w {{dest_dir}} {{wheel}}",
        "CIBW_TEST_REQUIRES": cell.torch_requirement,
        # The test step's pip runs outside CIBW_ENVIRONMENT's scope for some settings.
        "CIBW_TEST_ENVIRONMENT": " ".join(
            f'{k}="{v}"' for k, v in build_env.items() if k in ("PIP_CERT", "SSL_CERT_FILE")
        ),
        "CIBW_TEST_COMMAND": SMOKE_TEST,
        "CIBW_BUILD_VERBOSITY": "1",
        # cibuildwheel's own abi3audit step fetches virtualenv from GitHub; the
        # farm runs abi3audit itself in the host-side audit.
        "CIBW_AUDIT_COMMAND": "",
    }
    return env


def cibuildwheel_command(project: Path, outdir: Path) -> list[str]:
    return [sys.executable, "-m", "cibuildwheel", "--output-dir", str(outdir), str(project)]


def export_source(project: Path, dest: Path) -> Path:
    """The files git knows (tracked and untracked-not-ignored): no venvs, build folders or wheels.

    cibuildwheel copies its working directory into the container; building
    from this export keeps that copy small and the build reproducible.
    """
    if not (project / ".git").exists():
        ignore = shutil.ignore_patterns(".git", ".nox", "build", "wheelhouse", "*.so", "__pycache__", "*.egg-info")
        shutil.copytree(project, dest, ignore=ignore, dirs_exist_ok=True)
        return dest
    listing = proc.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=project, capture=True)
    for name in filter(None, listing.stdout.split("\0")):
        src = project / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def build_in_container(job: ContainerBuild, spec: images.ImageSpec) -> report.BuildReport:
    started = time.monotonic()
    cuobjdump = toolkit.ensure_cuobjdump()
    out = job.wheelhouse / f"cu{job.cell.cuda_major}"
    out.mkdir(parents=True, exist_ok=True)
    staging_root = job.project / "build" / "staging"
    staging_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{job.cell.name}-container-", dir=staging_root))
    try:
        env = cibuildwheel_env(job, spec, images.host_ca_bundle())
        # cibuildwheel calls `docker`; give it the client the farm chose.
        docker_dir = str(Path(images.docker_cli()).parent)
        env["PATH"] = os.pathsep.join([docker_dir, os.environ.get("PATH", "")])
        source = export_source(job.project, staging / "source")
        proc.run(cibuildwheel_command(source, staging / "out"), env=env, cwd=source,
                 hint="The container build failed; the compiler's output is above. "
                 "Nothing was written to the wheelhouse.")
        wheels = sorted((staging / "out").glob("*.whl"))
        if len(wheels) != 1:
            raise build.BuildError(f"cibuildwheel produced {[w.name for w in wheels]}, expected one abi3 wheel")
        result = audit.audit_wheel(wheels[0], job.cell, cuobjdump)
        audit.raise_for_failures(result)
        final = out / wheels[0].name
        os.replace(wheels[0], final)
        result = dataclasses.replace(result, wheel=final)
        rep = report.make_report(job.cell, result, mode="container", nvcc=nvcc_version(job.cell),
                                 torch=job.cell.torch, seconds=time.monotonic() - started, image=job.image)
        report.write_report(rep, out)
        return rep
    finally:
        shutil.rmtree(staging, ignore_errors=True)
