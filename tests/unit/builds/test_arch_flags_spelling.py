"""The farm's list as CMake spells it (``CUDAARCHS``: ``--generate-code=arch=compute_90,code=[compute_90,sm_90]``) is
the farm's list in the farm's reading of printed compile lines too (ci/builds/arch_flags.py ``farms``), as it is in
the wrapper's decision (ci/nvcc/wrapper.py ``gencode_pairs``): no "flags of the project's own" for it, in the
watcher of a compile past the wrapper or in the advice of a failed sass/ptx check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ci.builds import arch_flags
from ci.nvcc import wrapper
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
#: The compiler CMake runs when it is not the wrapper's (a project's own CMAKE_CUDA_COMPILER): no wrapper line.
NVCC = "/usr/local/cuda/bin/nvcc"


def cmake_flags(arch_list: str) -> str:
    """CMake's flags for CUDAARCHS=<the farm's list> (Modules/Compiler/NVIDIA-CUDA.cmake)."""
    words = []
    for name in wrapper.cmake_architectures(arch_list).split(";"):
        num, _, kind = name.partition("-")
        codes = [f"sm_{num}"] if kind == "real" else [f"compute_{num}", f"sm_{num}"]
        words.append(f"--generate-code=arch=compute_{num},code=[{','.join(codes)}]")
    return " ".join(words)


def cmake_line(flags: str) -> str:
    """A compile as CMake's ninja prints it."""
    return (f"[2/3] {NVCC} -forward-unknown-to-host-compiler -D_C_EXPORTS -I/project/csrc {flags} -Xcompiler=-fPIC "
            "-MD -MT CMakeFiles/_C.dir/csrc/k.cu.o -MF CMakeFiles/_C.dir/csrc/k.cu.o.d -x cu -c /project/csrc/k.cu "
            "-o CMakeFiles/_C.dir/csrc/k.cu.o")


def target_of(arch_list: str, build_env: dict[str, str] | None = None) -> targets.Target:
    target = targets.with_arch_list(targets.default_target(reading.load(ROOT)), arch_list)
    return dataclasses.replace(target, project=dataclasses.replace(target.project, build_env=build_env or {}))


@pytest.mark.parametrize("arch_list", ["9.0", "8.0;9.0+PTX", "8.6;9.0a+PTX"])
def test_cmakes_spelling_of_the_farms_list_is_not_the_projects_own(arch_list: str) -> None:
    line = cmake_line(cmake_flags(arch_list))
    watch = arch_flags.watch_output(target_of(arch_list))
    assert watch is not None
    assert arch_flags.own_arch_flags(line, arch_list) == [] and watch(line) is None
    # another list, in the same spelling, is the project's own as before
    other = cmake_line(cmake_flags("7.5;" + arch_list))
    assert arch_flags.own_arch_flags(other, arch_list)[0] == "-gencode=arch=compute_75,code=[sm_75]"
    assert watch(other) is not None


def test_the_advice_reads_cmakes_spelling() -> None:
    """A failed check of a build whose lines hold the cell's list as CMake writes it adds no advice; one whose
    lines hold build-env's TORCH_CUDA_ARCH_LIST so written names build-env, not flags of the project's own."""
    output = "\n".join(["-- Configuring done", cmake_line(cmake_flags("8.0;9.0+PTX")), "[3/3] Linking CUDA"])
    assert arch_flags.arch_flags_advice(output, target_of("8.0;9.0+PTX")) == ""
    listed = arch_flags.arch_flags_advice(output, target_of("9.0", {"TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX"}))
    assert listed.startswith("nvcc compiled for TORCH_CUDA_ARCH_LIST=8.0;9.0+PTX, which build-env of "
                             "[tool.cuda-ext-farm] sets")
    own = arch_flags.arch_flags_advice(output, target_of("9.0"))
    assert own.startswith("nvcc compiled with architecture flags of the project's own: "
                          "-gencode=arch=compute_80,code=[sm_80] -gencode=arch=compute_90,code=[compute_90,sm_90]:")
