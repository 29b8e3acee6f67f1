"""CMake's CUDA compiler in a container build is the nvcc wrapper's (ci/builds/cmake_compiler.py rendered by
ci/linux/container.py ``nvcc_front``): ``CUDACXX`` and, in a CMake build, ``-DCMAKE_CUDA_COMPILER`` after the
project's own ``CMAKE_ARGS`` name the ``bin/nvcc`` of the folder made in the container before the build;
``CUDAARCHS`` the farm's list as CMake writes it. The values are read back through cibuildwheel's own parser of
``CIBW_ENVIRONMENT``, and the folder's nvcc is made and run here as the container makes and runs it."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cibuildwheel.environment import parse_environment

from ci.builds import tail
from ci.linux import container as wheels
from ci.linux import images
from ci.nvcc import wrapper
from ci.universe import targets
from ci.universe.project import reading
from ci.universe.targets import Target

ROOT = Path(__file__).resolve().parents[3]
CMAKE = ROOT / "tests" / "fixtures" / "cmake_skbuild"


def with_build_env(target: Target, **env: str) -> Target:
    return dataclasses.replace(target, project=dataclasses.replace(target.project,
                                                                   build_env={**target.project.build_env, **env}))


def container_env(target: Target, tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """What the container build's environment holds (as cibuildwheel parses it), and cibuildwheel's settings."""
    spec = images.spec_for(target.cell, f"{images.BASE_REPO}:bookworm")
    job = wheels.ContainerBuild(target=target, spec=spec, image=spec.tag, job="job1",
                                outputs=tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "build"))
    python = wheels.build_python(target, spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)
    return parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary({}), env


def test_a_cmake_container_builds_cuda_compiler_is_the_wrappers(tmp_path: Path) -> None:
    """The landed container route set none of these: CMake ran the image's /usr/local/cuda/bin/nvcc, past the
    wrapper (no architecture decision, no line, no folded flags)."""
    target = targets.default_target(reading.load(CMAKE))
    build, env = container_env(target, tmp_path)
    nvcc = f"{wheels.NVCC_FRONT}/bin/nvcc"
    assert build["CUDACXX"] == nvcc and shlex.split(build["CMAKE_ARGS"]) == [f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    assert build["CUDAARCHS"] == wrapper.cmake_architectures(target.cell.arch_list)
    assert "CUDA_HOME" not in build  # the image's toolkit: CMake's library paths stay those of the default build
    assert "shim.make_shim" in env["CIBW_BEFORE_BUILD"]  # the folder exists when CMake runs
    # the project's own CMAKE_ARGS first; its own compiler or architectures stay its own
    build, _ = container_env(with_build_env(target, CMAKE_ARGS="-DOWN='a b'"), tmp_path)
    assert shlex.split(build["CMAKE_ARGS"]) == ["-DOWN=a b", f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    build, _ = container_env(with_build_env(target, CUDACXX="/opt/nvcc", CUDAARCHS="90a"), tmp_path)
    assert (build["CUDACXX"], build["CUDAARCHS"], "CMAKE_ARGS" in build) == ("/opt/nvcc", "90a", False)
    build, _ = container_env(with_build_env(target, CMAKE_ARGS="-DCMAKE_CUDA_COMPILER=/opt/nvcc"), tmp_path)
    assert build["CMAKE_ARGS"] == "-DCMAKE_CUDA_COMPILER=/opt/nvcc" and "CUDACXX" not in build


def test_a_setuptools_container_build_gives_cmake_the_wrapper_too(tmp_path: Path) -> None:
    """A setup.py that runs CMake itself: CUDACXX names the folder's nvcc, as CUDA_HOME names the folder."""
    target = targets.default_target(reading.load(ROOT))
    build, _ = container_env(target, tmp_path)
    assert build["CUDA_HOME"] == wheels.NVCC_FRONT and build["CUDACXX"] == f"{wheels.NVCC_FRONT}/bin/nvcc"
    assert "CMAKE_ARGS" not in build and build["CUDAARCHS"] == wrapper.cmake_architectures(target.cell.arch_list)


def test_cmakes_compiler_in_the_container_runs_the_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command made before the build, run here with a stand-in for the image's toolkit: CUDACXX runs the
    wrapper, which lets CMake's spelling of the farm's list through with its line."""
    real = tmp_path / "cuda"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "nvcc").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (real / "bin" / "nvcc").chmod(0o755)
    monkeypatch.setattr(wheels, "NVCC_TOOLS_MOUNT", str(ROOT / "ci" / "nvcc"))
    monkeypatch.setattr(wheels, "IMAGE_CUDA_HOME", str(real))
    monkeypatch.setattr(wheels, "NVCC_FRONT", str(tmp_path / "front"))
    target = targets.default_target(reading.load(CMAKE))
    front, command = wheels.nvcc_front(target, {})
    subprocess.run(["sh", "-c", command], check=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    flags = ["--generate-code=arch=compute_90,code=[compute_90,sm_90]"]
    done = subprocess.run([front["CUDACXX"], *flags, "-c", "/project/k.cu", "-o", "k.o"], capture_output=True,
                          text=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                                          "FARM_NVCC_NEXT": str(real / "bin" / "nvcc"),
                                          "FARM_NVCC_ARCH_LIST": "9.0+PTX"}, cwd=tmp_path)
    assert json.loads(done.stdout) == [*flags, "-c", "/project/k.cu", "-o", "k.o"]
    assert done.stderr.startswith("cuda-ext-farm nvcc: /project/k.cu: -gencode=arch=compute_90,code=[compute_90,")
