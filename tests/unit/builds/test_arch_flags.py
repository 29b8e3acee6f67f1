"""Architecture flags a project passes nvcc itself (ci/builds/arch_flags.py): read from printed nvcc lines, the
wrapper's refusals turned into the farm's error, the list the audit holds the wheel to (project-arch-flags), and
the advice a failed sass/ptx check carries. The wrapper itself: tests/unit/nvcc/test_wrapper.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ci.audit import gpu_code, wheel_audit
from ci.audit.checks import AuditResult, Check
from ci.builds import arch_flags, failure
from ci.errors import AuditFailed, CommandFailed
from ci.universe import targets
from ci.universe.project import reading

SRC = "/cache/build/proj-torch2.13-cpu-cp311-linux_x86_64/src"
ENV = "/cache/envs/build-torch2.13.0-py3.11/lib/python3.11/site-packages"
ROOT = Path(__file__).resolve().parents[3]


NVCC = "/cache/tk/bin/nvcc"
TORCH_FLAGS = ("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=compute_90 "
               "-gencode=arch=compute_90,code=sm_90")


def ninja_line(flags: str) -> str:
    return (f"[1/3] {NVCC} --generate-dependencies-with-compile --dependency-output {SRC}/build/k.o.d "
            f"-I{ENV}/torch/include -c -c {SRC}/csrc/k.cu -o {SRC}/build/k.o -D__CUDA_NO_HALF_OPERATORS__ "
            f"--expt-relaxed-constexpr {flags} -std=c++17")


def test_torchs_own_flags_for_the_arch_list_are_not_the_projects() -> None:
    assert arch_flags.torch_arch_flags("8.0;9.0+PTX") == set(TORCH_FLAGS.split())
    assert arch_flags.own_arch_flags(ninja_line(TORCH_FLAGS), "8.0;9.0+PTX") == []


@pytest.mark.parametrize(("flags", "own"), [
    ("-O3 -gencode arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90",
     ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]),
    ("-arch=sm_80", ["-arch=sm_80"]),
    ("--generate-code=arch=compute_86,code=[sm_86,compute_86]", ["-gencode=arch=compute_86,code=[sm_86,compute_86]"]),
    ("-gencode=arch=compute_90,code=sm_90", ["-gencode=arch=compute_90,code=sm_90"]),  # a subset is not torch's
])
def test_flags_torch_did_not_write_are_the_projects(flags: str, own: list[str]) -> None:
    assert arch_flags.own_arch_flags(ninja_line(flags), "8.0;9.0+PTX") == own


def test_lines_that_are_not_an_nvcc_compile_are_ignored() -> None:
    assert arch_flags.own_arch_flags(f"[1/3] c++ -c {SRC}/csrc/a.cpp -o a.o -march=native", "9.0") == []
    assert arch_flags.own_arch_flags("building 'p._C' extension -gencode=arch=compute_80,code=sm_80", "9.0") == []


def with_mode(target: targets.Target, mode: str) -> targets.Target:
    return dataclasses.replace(target, project=dataclasses.replace(target.project, arch_flags=mode))


def test_the_watcher_names_the_key_first_and_the_source_edit_last() -> None:
    """setuptools without ninja prints each nvcc line before running it (no wrapper there): refused as such."""
    watch = arch_flags.watch_output(stable_target("9.0"))
    assert watch is not None
    assert watch(ninja_line("-gencode=arch=compute_90,code=sm_90")) is None
    error = watch(ninja_line("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86"))
    assert error is not None
    assert error.line() == (
        "error: the project passes its own CUDA architecture flags to nvcc, so torch ignores TORCH_CUDA_ARCH_LIST "
        "(the farm's architectures) (-gencode=arch=compute_80,code=sm_80 and 1 more): set project-arch-flags = "
        "\"replace\" in [tool.cuda-ext-farm] to build the farm's list (9.0 here: cuda-archs or --arch-list choose it) "
        "in their place, or project-arch-flags = \"keep\" to build the project's own list; or drop the flags from "
        "the extension's extra_compile_args (setup.py). The build was stopped at its first nvcc")


def test_keep_and_replace_let_printed_lines_through_but_not_a_build_without_ninja() -> None:
    own = ninja_line("-gencode=arch=compute_80,code=sm_80")
    through = own.replace(NVCC, f"/env/bin/python -I {arch_flags.WRAPPER}")
    keep = arch_flags.watch_output(with_mode(stable_target("9.0"), "keep"))
    replace = arch_flags.watch_output(with_mode(stable_target("9.0"), "replace"))
    assert keep is not None and replace is not None
    assert keep(own) is None and keep(through) is None and replace(through) is None
    error = replace(own)  # nvcc run without the wrapper: nothing can replace its flags
    assert error is not None and "needs torch's ninja build" in error.what
    assert arch_flags.watch_output(dataclasses.replace(stable_target("9.0"), cpu=True)) is None


def test_setuptools_own_compile_through_the_toolkit_folder_of_the_wrapper_is_let_through() -> None:
    """use_ninja=False: setuptools prints CUDA_HOME/bin/nvcc, which on the farm's routes is the wrapper's toolkit
    folder (ci/nvcc/shim.py): the wrapper decides there, so replace mode must not stop the build."""
    own = ninja_line("-gencode=arch=compute_80,code=sm_80")
    shimmed = own.replace(NVCC, "/work/target/nvcc-front/bin/nvcc")
    replace = arch_flags.watch_output(with_mode(stable_target("9.0"), "replace"))
    refuse = arch_flags.watch_output(stable_target("9.0"))
    assert replace is not None and refuse is not None
    assert replace(shimmed) is None and refuse(shimmed) is None
    windows = own.replace(NVCC, r"C:\farm\stage\nvcc-front\bin\nvcc")  # setuptools' spawn prints it so
    assert replace(windows) is None and refuse(windows) is None


def test_the_wrappers_line_is_the_same_error_as_a_printed_compile_line() -> None:
    line = ("cuda-ext-farm nvcc: own architecture flags: -gencode=arch=compute_80,code=sm_80 "
            "-gencode=arch=compute_86,code=sm_86 (the farm's list: 9.0)")
    watch = arch_flags.watch_output(stable_target("9.0"))
    assert watch is not None
    host = watch(ninja_line("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86"))
    container = watch(line)
    assert host is not None and container is not None and container.line() == host.line()
    # From the kept output too (the watcher missed it: a line split by a full pipe, a build that ended first).
    general = CommandFailed("the container build of p failed", "exit 1", "see above")
    explained = failure.explain(general, f"FAILED: /project/build/k.o\n{line}\nninja: build stopped\n"
                                "RuntimeError: Error compiling objects for extension\n", build="the container build")
    assert explained.line() == host.line()


# --- the audit's sass/ptx failure names the flags (read from the build's output) ---------------------------------

def stable_target(arch_list: str, build_env: dict[str, str] | None = None) -> targets.Target:
    target = targets.with_arch_list(targets.default_target(reading.load(ROOT)), arch_list)
    if build_env is not None:
        target = dataclasses.replace(target, project=dataclasses.replace(target.project, build_env=build_env))
    return target


def output_of(*flags: str) -> str:
    """A build's output as torch's ``ninja -v`` prints it: one finished command per line, a C++ compile between."""
    return "\n".join(["running build_ext", f"[1/3] c++ -c {SRC}/csrc/a.cpp -o a.o -march=native",
                      *(ninja_line(f).replace("[1/3]", f"[{i + 2}/3]") for i, f in enumerate(flags)),
                      "copying build/lib/_C.so"])


def test_the_advice_names_flags_of_the_projects_own() -> None:
    output = output_of("-gencode=arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86",
                       "-gencode=arch=compute_80,code=sm_80")
    assert arch_flags.flags_in_output(output) == ["-gencode=arch=compute_80,code=sm_80",
                                                  "-gencode=arch=compute_86,code=sm_86"]
    assert arch_flags.arch_flags_advice(output, stable_target("9.0")) == (
        "nvcc compiled with architecture flags of the project's own: -gencode=arch=compute_80,code=sm_80 "
        "-gencode=arch=compute_86,code=sm_86: set project-arch-flags = \"replace\" in [tool.cuda-ext-farm], or drop "
        "them from the extension's extra_compile_args (setup.py), and let the farm's list apply (9.0 here: "
        "cuda-archs in [tool.cuda-ext-farm] or --arch-list choose it)")


def test_the_advice_tells_build_envs_list_from_the_projects_flags() -> None:
    listed = stable_target("9.0", {"TORCH_CUDA_ARCH_LIST": "8.0"})
    advice = arch_flags.arch_flags_advice(output_of("-gencode=arch=compute_80,code=sm_80"), listed)
    assert advice.startswith("nvcc compiled for TORCH_CUDA_ARCH_LIST=8.0, which build-env of [tool.cuda-ext-farm] "
                             "sets: remove it there")
    own = arch_flags.arch_flags_advice(output_of("-gencode=arch=compute_80,code=sm_80"),
                                       stable_target("9.0", {"TORCH_CUDA_ARCH_LIST": "8.6"}))
    assert own.startswith("nvcc compiled with architecture flags of the project's own: "
                          "-gencode=arch=compute_80,code=sm_80: set project-arch-flags = \"replace\" in "
                          "[tool.cuda-ext-farm] and remove TORCH_CUDA_ARCH_LIST from build-env")


@pytest.mark.parametrize("output", [
    output_of("-gencode=arch=compute_90,code=sm_90"),  # the cell's own flags: nothing to add
    "running build_ext\ncopying build/lib/_C.so\n",  # no nvcc line (a CPU build, a CMake build that hides them)
])
def test_nothing_to_add(output: str) -> None:
    assert arch_flags.arch_flags_advice(output, stable_target("9.0")) == ""


def test_a_failed_sass_check_carries_the_advice_and_the_errors_fix(tmp_path: Path) -> None:
    """The audit's records as a real sm_80-only wheel audited for 9.0 gives them (gpu_code.check_archs), then the
    error the build ends with (wheel_audit.raise_for_failures)."""
    checks = (Check("wheel-tag", True, "tags cp310-abi3-manylinux_2_31_x86_64"),
              *gpu_code.check_archs(("sm_80",), (), ("9.0",), ""))
    result = AuditResult(tmp_path / "p-0.1-cp310-abi3-manylinux_2_31_x86_64.whl", (), 0, (), ("sm_80",), (), checks)
    advice = arch_flags.arch_flags_advice(output_of("-gencode=arch=compute_80,code=sm_80"), stable_target("9.0"))
    named, fix = gpu_code.name_arch_flags(result, advice)
    (sass,) = [c for c in named.checks if c.name == "sass"]
    assert sass.detail == f"SASS for sm_80; missing sm_90; unexpected sm_80; {advice}"
    assert [c.detail for c in named.checks if c.name != "sass"] == [c.detail for c in checks if c.name != "sass"]
    with pytest.raises(AuditFailed) as raised:
        wheel_audit.raise_for_failures(named, fix)
    assert raised.value.line() == (f"error: the wheel audit failed 1 check ({result.wheel.name}): {advice} (a build "
                                   "publishes nothing until every check passes)")
    assert gpu_code.name_arch_flags(result, "") == (result, None)
    passed = dataclasses.replace(result, checks=checks[:1])
    assert gpu_code.name_arch_flags(passed, advice) == (passed, None)  # nothing failed: nothing added


# --- the list the audit holds the wheel to (project-arch-flags) --------------------------------------------------

@pytest.mark.parametrize(("flags", "sass", "ptx"), [
    (["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=compute_90"], ("8.0",), "9.0"),
    (["-arch=sm_86"], ("8.6",), "8.6"),  # nvcc: SASS and PTX of 8.6
    (["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_100a,code=[sm_100a,compute_100a]"],
     ("9.0a", "10.0a"), "10.0a"),
    (["-arch=compute_80", "-code=sm_80,sm_86"], ("8.0", "8.6"), ""),
    (["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_90,code=compute_90"], ("9.0a",), "9.0"),
])
def test_what_nvcc_flags_ask_for(flags: list[str], sass: tuple[str, ...], ptx: str) -> None:
    assert arch_flags.archs_from_flags(flags, stable_target("9.0").cell) == (sass, ptx)


def test_keep_audits_the_wheel_against_the_projects_list() -> None:
    output = output_of("-gencode=arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86")
    kept = arch_flags.audited_target(with_mode(stable_target("9.0"), "keep"), output)
    assert (kept.cell.sass_archs, kept.cell.ptx_arch) == (("8.0", "8.6"), "")
    assert arch_flags.whose_list(kept) == "the project's own (setup.py)"
    refused = stable_target("9.0")
    assert arch_flags.audited_target(refused, output) == refused  # refuse: the farm's list, always


def test_replace_audits_the_farms_list_with_the_specific_targets_asked_for() -> None:
    target = with_mode(stable_target("8.0;9.0+PTX"), "replace")
    output = output_of("-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_70,code=sm_70")
    audited = arch_flags.audited_target(target, output)
    # What the wrapper emits: SASS sm_80 and sm_90a, PTX compute_90 (no plain sm_90: tests/unit/builds/
    # test_arch_flags_held.py builds it with the real nvcc and reads it back).
    assert (audited.cell.sass_archs, audited.cell.ptx_arch) == (("8.0", "9.0a"), "9.0")
    plain = output_of("-gencode=arch=compute_70,code=sm_70")
    assert arch_flags.audited_target(target, plain) == target


def test_a_compile_cache_goes_behind_the_wrapper() -> None:
    """The cache's nvcc front is the wrapper's next command: the wrapper sees the project's flags first (a refused
    compile never reaches the cache), the cache hashes what nvcc will really be given."""
    build_env = {"PYTORCH_NVCC": f"python -I {arch_flags.WRAPPER}", "FARM_NVCC_NEXT": "/tk/bin/nvcc"}
    cache = {"PYTORCH_NVCC": "/work/fronts/nvcc", "CXX": "/work/fronts/g++", "SCCACHE_DIR": "/c"}
    assert arch_flags.behind_wrapper(cache, build_env) == {"FARM_NVCC_NEXT": "/work/fronts/nvcc",
                                                           "CXX": "/work/fronts/g++", "SCCACHE_DIR": "/c"}
    assert arch_flags.behind_wrapper(cache, {}) == cache  # a CPU build: no wrapper, the front is torch's nvcc
