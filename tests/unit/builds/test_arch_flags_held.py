"""The audit holds a wheel to what nvcc was given (ci/builds/arch_flags.py ``audited_target``): a kernel compiled
as torch's ninja runs it under the farm (the wrapper in front of the cell's real nvcc, project-arch-flags
``replace`` or ``keep``), read back with cuobjdump, and checked as the audit checks a wheel's CUDA libraries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ci.audit import gpu_code
from ci.builds import arch_flags
from ci.errors import UsageError
from ci.universe import targets
from ci.universe.project import reading
from tests.unit.audit import cudabuild

ROOT = Path(__file__).resolve().parents[3]


def farm_target(arch_list: str, mode: str, build_env: dict[str, str] | None = None) -> targets.Target:
    """The farm's release target (its newest cell), with ``arch_list`` and ``project-arch-flags = mode``."""
    target = targets.with_arch_list(targets.default_target(reading.load(ROOT)), arch_list)
    project = dataclasses.replace(target.project, arch_flags=mode, build_env=build_env or target.project.build_env)
    return dataclasses.replace(target, project=project)


def assert_audit_holds_what_nvcc_built(target: targets.Target, compiled: cudabuild.Compiled) -> None:
    """The audited list is exactly what the object holds, and the audit's sass/ptx checks pass on it."""
    audited = arch_flags.audited_target(target, compiled.output).cell
    sass, ptx = cudabuild.held(compiled.path)
    want = (tuple(gpu_code.arch_to_sm(a) for a in audited.sass_archs),
            (gpu_code.arch_to_sm(audited.ptx_arch),) if audited.ptx_arch else ())
    assert want == (sass, ptx), compiled.output
    failed = [c for c in gpu_code.check_archs(sass, ptx, audited.sass_archs, audited.ptx_arch) if not c.ok]
    assert not failed


def test_replace_holds_the_wheel_to_the_specific_sass_and_the_plain_ptx(tmp_path: Path) -> None:
    """``9.0+PTX`` and a project that asks for ``sm_90a``: the wrapper emits SASS sm_90a and PTX compute_90, and
    the audit asks for those (not for a plain sm_90 the wheel cannot hold)."""
    target = farm_target("9.0+PTX", "replace")
    compiled = cudabuild.compile_through_wrapper(tmp_path, target, ["-gencode=arch=compute_90a,code=sm_90a"])
    assert cudabuild.held(compiled.path) == (("sm_90a",), ("sm_90",))
    assert_audit_holds_what_nvcc_built(target, compiled)


def test_replace_reads_a_specific_target_the_project_passes_through_its_environment(tmp_path: Path) -> None:
    """The project's ``sm_90a`` in build-env's NVCC_APPEND_FLAGS, torch's flags on ninja's line: the wrapper's own
    line says what it gave nvcc."""
    target = farm_target("9.0+PTX", "replace")
    torch_flags = sorted(arch_flags.torch_arch_flags("9.0+PTX"))
    compiled = cudabuild.compile_through_wrapper(tmp_path, target, torch_flags,
                                                 appended="-gencode=arch=compute_90a,code=sm_90a")
    assert cudabuild.held(compiled.path) == (("sm_90a",), ("sm_90",))
    assert_audit_holds_what_nvcc_built(target, compiled)


def test_keep_reads_the_projects_flags_in_its_environment(tmp_path: Path) -> None:
    """``keep`` with an architecture in build-env's NVCC_APPEND_FLAGS beside torch's: nvcc builds both."""
    target = farm_target("9.0", "keep")
    compiled = cudabuild.compile_through_wrapper(tmp_path, target, sorted(arch_flags.torch_arch_flags("9.0")),
                                                 appended="-gencode arch=compute_86,code=sm_86")
    assert cudabuild.held(compiled.path) == (("sm_86", "sm_90"), ())
    assert_audit_holds_what_nvcc_built(target, compiled)


def test_replace_with_build_envs_own_list_names_it_when_the_audit_fails(tmp_path: Path) -> None:
    """build-env's TORCH_CUDA_ARCH_LIST is the wrapper's list in ``replace`` too; the audit holds the wheel to the
    farm's (as in ``refuse``), and its failed sass check says where the other list came from."""
    target = farm_target("9.0", "replace", {"TORCH_CUDA_ARCH_LIST": "8.0"})
    compiled = cudabuild.compile_through_wrapper(tmp_path, target, ["-gencode=arch=compute_86,code=sm_86"])
    sass, ptx = cudabuild.held(compiled.path)
    assert (sass, ptx) == (("sm_80",), ())
    audited = arch_flags.audited_target(target, compiled.output).cell
    (failed,) = [c for c in gpu_code.check_archs(sass, ptx, audited.sass_archs, audited.ptx_arch) if not c.ok]
    assert failed.detail == "SASS for sm_80; missing sm_90; unexpected sm_80"
    assert arch_flags.arch_flags_advice(compiled.output, target) == (
        "nvcc compiled for TORCH_CUDA_ARCH_LIST=8.0, which build-env of [tool.cuda-ext-farm] sets: remove it there "
        "and let the farm's list apply (9.0 here: cuda-archs in [tool.cuda-ext-farm] or --arch-list choose it)")


@pytest.mark.parametrize(("arch_list", "flags"), [
    ("8.0;9.0+PTX", ["-gencode=arch=compute_90,code=sm_90"]),  # a subset of the farm's list
    ("8.0;9.0", ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_86,code=sm_86"]),  # overlap
    ("9.0", ["-arch=all-major"]),  # the toolkit's list: the oldest and each X.0, PTX of the newest X.0
    ("9.0", ["-arch=all"]),  # every architecture the toolkit builds (nvcc --list-gpu-code)
], ids=["subset", "overlap", "all-major", "all"])
def test_keep_holds_the_wheel_to_the_projects_list_as_written(tmp_path: Path, arch_list: str,
                                                              flags: list[str]) -> None:
    target = farm_target(arch_list, "keep")
    assert_audit_holds_what_nvcc_built(target, cudabuild.compile_through_wrapper(tmp_path, target, flags))


def test_keep_refuses_native_in_one_line() -> None:
    """``-arch=native`` is the build machine's GPU (none on a builder: nvcc's default), nothing reproducible."""
    target = farm_target("9.0", "keep")
    line = f"[1/1] python -I {arch_flags.WRAPPER} -c /p/k.cu -o /p/k.o -arch=native"
    with pytest.raises(UsageError) as raised:
        arch_flags.audited_target(target, line)
    assert raised.value.line() == (
        "error: project-arch-flags = \"keep\" keeps an nvcc flag that builds for the GPU of the machine that "
        "compiles (on a builder without one, nvcc's default architecture), which no other build reproduces "
        "(-arch=native): name the architectures in setup.py (-gencode=arch=compute_XY,code=sm_XY for each, or "
        "-arch=all-major), or set project-arch-flags = \"replace\" in [tool.cuda-ext-farm] to build the farm's list "
        "(9.0 here: cuda-archs or --arch-list choose it)")
    assert arch_flags.audited_target(farm_target("9.0", "replace"), line) == farm_target("9.0", "replace")


def test_keep_refuses_a_toolkit_list_it_cannot_resolve() -> None:
    """A toolkit the farm's table does not know: refused, not audited against a list nvcc never built."""
    target = farm_target("9.0", "keep")
    unknown = dataclasses.replace(target, cell=dataclasses.replace(target.cell, cuda="99.0"))
    line = f"[1/1] python -I {arch_flags.WRAPPER} -c /p/k.cu -o /p/k.o -arch=all-major"
    with pytest.raises(UsageError) as raised:
        arch_flags.audited_target(unknown, line)
    assert raised.value.line().startswith("error: the farm does not know which architectures CUDA 99.0's nvcc "
                                          "builds for the project's nvcc flag")
    assert "(-arch=all-major): name the architectures in setup.py" in raised.value.line()
