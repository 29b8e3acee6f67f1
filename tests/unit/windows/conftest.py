"""Fixtures of the Windows tests: recorded data, the farm's own targets, and real PE files built with LLVM."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path, PureWindowsPath

import pebuild
import pytest

from ci.universe import targets
from ci.universe.project import reading
from windows import vswhere

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def data() -> Path:
    return DATA


def recorded_machine(name: str) -> vswhere.Discovery:
    """vswhere's JSON of a machine and what its disk holds -> what the farm would discover there."""
    instances = vswhere.parse_vswhere((DATA / f"vswhere-{name}.json").read_text(encoding="utf-8"))
    disk = json.loads((DATA / f"vswhere-{name}.disk.json").read_text(encoding="utf-8"))
    files: set[str] = set()
    folders: dict[str, list[str]] = {}
    for path, toolsets in disk.items():
        if path.startswith("_") or toolsets is None:
            continue
        root = PureWindowsPath(path)
        files.add(str(root / "VC" / "Auxiliary" / "Build" / "vcvarsall.bat"))
        folders[str(root / "VC" / "Tools" / "MSVC")] = list(toolsets)
        for toolset in toolsets:
            files.add(str(root / "VC" / "Tools" / "MSVC" / toolset / "bin" / "Hostx64" / "x64" / "cl.exe"))

    def listdir(path: str) -> Sequence[str]:
        if path not in folders:
            raise FileNotFoundError(path)
        return folders[path]

    return vswhere.installed_toolsets(instances, listdir, files.__contains__)


@pytest.fixture
def machine() -> Callable[[str], vswhere.Discovery]:
    return recorded_machine


@pytest.fixture(scope="session")
def fusedops_targets() -> tuple[targets.Target, ...]:
    return targets.targets_for(reading.load(ROOT), os="windows")


@pytest.fixture(scope="session")
def classic_targets() -> tuple[targets.Target, ...]:
    return targets.targets_for(reading.load(ROOT / "tests" / "fixtures" / "classic_ext"), os="windows")


@pytest.fixture(scope="session")
def pe_tools() -> None:
    missing = pebuild.missing_tools()
    if missing:
        pytest.skip(f"no {', '.join(missing)}: the PE tests build real .pyd/.dll files with LLVM "
                    "(apt-get install llvm lld)")


# Symbols as MSVC mangles them (the scope is what the audit reads).
C10_CUDA_SYM = "?current_device@cuda@c10@@YACXZ"
C10_CUDA_STREAM = "?getCurrentCUDAStream@cuda@c10@@YA?AVCUDAStream@12@C@Z"
AT_CUDA_SYM = "?warp_size@cuda@at@@YAHXZ"
C10_SYM = "?GetCPUAllocator@c10@@YAPEAUAllocator@1@XZ"
TORCH_CPU_SYM = "aoti_torch_empty_strided"

SYSTEM = {"KERNEL32.dll": ["GetLastError"], "VCRUNTIME140.dll": ["memcpy"],
          "api-ms-win-crt-runtime-l1-1-0.dll": ["_initterm"]}

MODULES: dict[str, pebuild.Module] = {
    # fusedops-like (stable ABI): _C holds schemas + CPU kernels, _C_cuda the CUDA kernels.
    "cpu": pebuild.Module(imports={**SYSTEM, "c10.dll": [C10_SYM], "torch_cpu.dll": [TORCH_CPU_SYM],
                                   "python3.dll": ["PyModule_Create2"]}),
    "cuda": pebuild.Module(imports={**SYSTEM, "c10.dll": [C10_SYM], "c10_cuda.dll": [C10_CUDA_SYM, C10_CUDA_STREAM],
                                    "torch_cpu.dll": [TORCH_CPU_SYM], "torch_cuda.dll": [AT_CUDA_SYM],
                                    "cudart64_13.dll": ["cudaLaunchKernel", "cudaGetLastError"]}, fatbin=True),
    # c10::cuda symbols taken from torch_cuda.lib of another torch (c10_cuda.lib forgotten).
    "no_c10_cuda": pebuild.Module(imports={**SYSTEM, "torch_cuda.dll": [C10_CUDA_SYM, AT_CUDA_SYM],
                                           "cudart64_13.dll": ["cudaLaunchKernel"]}, fatbin=True),
    "mystery": pebuild.Module(imports={**SYSTEM, "c10_cuda.dll": [C10_CUDA_SYM], "libfoo.dll": ["foo_init"],
                                       "cudart64_13.dll": ["cudaLaunchKernel"]}, fatbin=True),
    "cuda12": pebuild.Module(imports={**SYSTEM, "cudart64_12.dll": ["cudaLaunchKernel"]}, fatbin=True),
    "no_fatbin": pebuild.Module(imports={**SYSTEM, "c10.dll": [C10_SYM]}),
    "delay_torch_cuda": pebuild.Module(imports={**SYSTEM, "cudart64_13.dll": ["cudaLaunchKernel"]},
                                       delay={"torch_cuda.dll": [AT_CUDA_SYM]}, fatbin=True),
    "delay_cuda_in_cpu": pebuild.Module(imports={**SYSTEM, "c10.dll": [C10_SYM], "python3.dll": ["PyModule_Create2"]},
                                        delay={"c10_cuda.dll": [C10_CUDA_SYM]}),
    "python312": pebuild.Module(imports={**SYSTEM, "c10.dll": [C10_SYM], "python312.dll": ["PyModule_Create2"]}),
    # classic (per-Python) extension: pybind11 through torch_python and python312.dll
    "classic312": pebuild.Module(imports={**SYSTEM, "c10.dll": [C10_SYM], "c10_cuda.dll": [C10_CUDA_SYM],
                                          "torch_cpu.dll": [TORCH_CPU_SYM], "torch_python.dll": ["THPVariable_Wrap"],
                                          "python312.dll": ["PyModule_Create2"],
                                          "cudart64_13.dll": ["cudaLaunchKernel"]}, fatbin=True),
    # a module needing a DLL the project ships (delvewheel must vendor it) next to torch's and CUDA's
    "uses_helper": pebuild.Module(imports={**SYSTEM, "c10_cuda.dll": [C10_CUDA_SYM], "helper.dll": ["helper_fn"],
                                           "cudart64_13.dll": ["cudaLaunchKernel"],
                                           "python3.dll": ["PyModule_Create2"]}, fatbin=True),
    "helper.dll": pebuild.Module(imports={"KERNEL32.dll": ["GetLastError"]}, exports=("helper_fn",)),
}

#: A stand-in for the user's torch: DLLs that export what the good modules import (and c10::cuda only in c10_cuda).
TORCH_LIB: dict[str, pebuild.Module] = {
    "c10.dll": pebuild.Module(exports=(C10_SYM,)),
    "c10_cuda.dll": pebuild.Module(exports=(C10_CUDA_SYM, C10_CUDA_STREAM)),
    "torch_cpu.dll": pebuild.Module(exports=(TORCH_CPU_SYM,)),
    "torch_cuda.dll": pebuild.Module(exports=(AT_CUDA_SYM,)),
    "torch_python.dll": pebuild.Module(exports=("THPVariable_Wrap",)),
    "cudart64_13.dll": pebuild.Module(exports=("cudaLaunchKernel", "cudaGetLastError")),
}


@pytest.fixture(scope="session")
def pe_files(pe_tools: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pe")
    return pebuild.build_all(MODULES, root / "out", root / "work")


@pytest.fixture(scope="session")
def torch_site(pe_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site-packages folder whose torch/lib holds the stand-in torch DLLs."""
    site = tmp_path_factory.mktemp("site")
    pebuild.build_all(TORCH_LIB, site / "torch" / "lib", site / "work")
    return site
