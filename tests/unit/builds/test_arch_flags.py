"""Architecture flags a project passes nvcc itself (ci/builds/arch_flags.py): read from printed nvcc lines and
build.ninja (host, Windows), refused by ci/nvcc/nvcc-arch-guard in front of nvcc (container builds; the script
runs here, in front of a stand-in nvcc that records its arguments), and named by a failed sass/ptx check."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from ci.audit import gpu_code, wheel_audit
from ci.audit.checks import AuditResult, Check
from ci.builds import arch_flags, failure
from ci.errors import AuditFailed, CommandFailed
from ci.universe import project, targets

SRC = "/cache/build/proj-torch2.13-cpu-cp311-linux_x86_64/src"
ENV = "/cache/envs/build-torch2.13.0-py3.11/lib/python3.11/site-packages"
ROOT = Path(__file__).resolve().parents[3]
GUARD = ROOT / "ci" / "nvcc" / arch_flags.ARCH_GUARD_SCRIPT


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


def test_the_watcher_says_what_to_drop() -> None:
    watch = arch_flags.stop_on_own_arch_flags("9.0")
    assert watch(ninja_line("-gencode=arch=compute_90,code=sm_90")) is None
    error = watch(ninja_line("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86"))
    assert error is not None
    assert error.line() == (
        "error: the project passes its own CUDA architecture flags to nvcc, so torch ignores TORCH_CUDA_ARCH_LIST "
        "(the farm's architectures) (-gencode=arch=compute_80,code=sm_80 and 1 more): drop the -gencode/-arch flags "
        "from the extension's extra_compile_args (setup.py) and let torch's TORCH_CUDA_ARCH_LIST apply: cuda-archs "
        "in [tool.cuda-ext-farm] or --arch-list choose the architectures (9.0 here); the build was stopped before "
        "its long compile")


BUILD_NINJA = f"""ninja_required_version = 1.3
cxx = c++
nvcc = /cache/tk/bin/nvcc

cflags = -pthread -fPIC -I{ENV}/torch/include -I/usr/include/python3.11 -c
post_cflags = -O2 -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C -std=c++17
cuda_cflags = -I{ENV}/torch/include -I/cache/tk/include -c
cuda_post_cflags = -D__CUDA_NO_HALF_OPERATORS__ --expt-relaxed-constexpr --compiler-options ''"'"'-fPIC'"'"'' -O2 \
{{flags}} -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C -std=c++17
cuda_dlink_post_cflags =
ldflags =

rule cuda_compile
  depfile = $out.d
  deps = gcc
  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags -c $in -o $out \
$cuda_post_cflags

build {SRC}/build/temp.linux-x86_64-cpython-311/csrc/scale.o: cuda_compile {SRC}/csrc/scale.cu
"""


def test_build_ninja_flags_of_the_projects_own() -> None:
    own = BUILD_NINJA.replace("{flags}", "-gencode=arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86")
    assert arch_flags.ninja_arch_flags(own) == ["-gencode=arch=compute_80,code=sm_80",
                                             "-gencode=arch=compute_86,code=sm_86"]
    torchs = BUILD_NINJA.replace("{flags}", "-gencode=arch=compute_90,code=sm_90")
    assert arch_flags.ninja_arch_flags(torchs) == ["-gencode=arch=compute_90,code=sm_90"]
    assert arch_flags.ninja_arch_flags(own.split("rule ")[0]) is None  # not complete yet: no build edge


def test_the_build_ninja_watcher_objects_once_the_file_is_there(tmp_path: Path) -> None:
    poll = arch_flags.watch_build_ninja(tmp_path, "9.0")
    assert poll() is None
    ninja = tmp_path / "build" / "temp.linux-x86_64-cpython-311" / "build.ninja"
    ninja.parent.mkdir(parents=True)
    ninja.write_text(BUILD_NINJA.replace("{flags}", "-gencode=arch=compute_90,code=sm_90"))
    assert poll() is None  # torch's own flags for 9.0
    ninja.write_text(BUILD_NINJA.replace("{flags}", "-arch=sm_80"))
    os.utime(ninja, (1, 1))
    error = poll()
    assert error is not None and error.value == "-arch=sm_80"




# --- ci/nvcc/nvcc-arch-guard (the script itself, in front of a stand-in nvcc) -------------------------------------

ARCHS = "8.0;9.0+PTX"


def stand_in_nvcc(folder: Path) -> Path:
    """An "nvcc" that writes the arguments it was given, one a line, to ``args`` beside it."""
    nvcc = folder / "nvcc"
    nvcc.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{folder}/args"\n')
    nvcc.chmod(0o755)
    return nvcc


def guard(tmp_path: Path, args: list[str], arch_list: str | None = ARCHS,
          extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    nvcc = stand_in_nvcc(tmp_path)
    env = {"PATH": os.environ["PATH"], **(extra or {})}
    env |= arch_flags.arch_guard_env(arch_list, str(GUARD), str(nvcc)) if arch_list else {
        "FARM_ARCH_GUARD_NVCC": str(nvcc)}
    return subprocess.run([env.get("PYTORCH_NVCC", str(GUARD)), *args], env=env, text=True, capture_output=True,
                          cwd=tmp_path)


def ran_with(tmp_path: Path) -> list[str] | None:
    args = tmp_path / "args"
    return args.read_text().splitlines() if args.exists() else None


def compile_args(flags: str) -> list[str]:
    return ["--generate-dependencies-with-compile", "--dependency-output", "k.o.d", "-I/x y/include", "-c", "k.cu",
            "-o", "k.o", "--compiler-options", "'-fPIC'", *flags.split(), "-std=c++17"]


def test_the_guard_runs_nvcc_with_unchanged_arguments_when_the_flags_are_torchs(tmp_path: Path) -> None:
    args = compile_args(TORCH_FLAGS)
    done = guard(tmp_path, args)
    assert (done.returncode, done.stderr) == (0, "")
    assert ran_with(tmp_path) == args  # the same words, in order: "-I/x y/include" stays one


@pytest.mark.parametrize(("flags", "own"), [
    ("-gencode=arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86",
     "-gencode=arch=compute_86,code=sm_86"),
    ("-arch=sm_80", "-arch=sm_80"),
    ("-arch sm_90", "-arch=sm_90"),
    ("--generate-code=arch=compute_86,code=[sm_86,compute_86]", "-gencode=arch=compute_86,code=[sm_86,compute_86]"),
    ("--generate-code arch=compute_89,code=sm_89", "-gencode=arch=compute_89,code=sm_89"),
    # a part of the list: torch added none, the project chose these itself
    ("-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=sm_90"),
])
def test_the_guard_refuses_flags_of_the_projects_own_before_nvcc_runs(tmp_path: Path, flags: str, own: str) -> None:
    (tmp_path / "-gencode=arch=compute_86,code=s").touch()  # what the flag would match as a glob: it stays a word
    done = guard(tmp_path, compile_args(flags))
    assert done.returncode == 3 and ran_with(tmp_path) is None
    assert done.stdout == ""
    assert done.stderr == (f"cuda-ext-farm nvcc-arch-guard: own architecture flags: {own} "
                           f"(TORCH_CUDA_ARCH_LIST={ARCHS})\n")
    error = arch_flags.guard_refusal("FAILED: k.o\n" + done.stderr)
    assert error is not None and error.value == own.split()[0] and f"({ARCHS} here)" in error.fix


@pytest.mark.parametrize("args", [
    ["--version"],  # not a compile
    ["-dlink", "k.o", "-o", "dlink.o", "-arch=sm_80"],  # not a compile
    ["-c", "k.cu", "-o", "k.o"],  # no architecture flag: nvcc's default (torch always passes some)
])
def test_the_guard_leaves_other_nvcc_commands_alone(tmp_path: Path, args: list[str]) -> None:
    done = guard(tmp_path, args)
    assert done.returncode == 0 and ran_with(tmp_path) == args


def test_without_an_arch_list_the_guard_only_runs_nvcc(tmp_path: Path) -> None:
    args = compile_args("-gencode=arch=compute_80,code=sm_80")
    done = guard(tmp_path, args, arch_list=None)
    assert done.returncode == 0 and ran_with(tmp_path) == args


def test_the_guard_chains_with_the_module_anchor(tmp_path: Path) -> None:
    """guard -> nvcc-module-anchor -> nvcc (CUDA 12.4's container builds): the anchor still adds its define."""
    nvcc = stand_in_nvcc(tmp_path)
    env = {"PATH": os.environ["PATH"], "FARM_NVCC": str(nvcc),
           **arch_flags.arch_guard_env("9.0", str(GUARD), str(ROOT / "ci" / "nvcc" / "nvcc-module-anchor"))}
    args = compile_args("-gencode=arch=compute_90,code=sm_90")
    done = subprocess.run([env["PYTORCH_NVCC"], *args], env=env, text=True, capture_output=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ran = ran_with(tmp_path)
    assert ran is not None and ran[:len(args)] == args and ran[len(args)].startswith("-DFARM_MODULE_ANCHOR=")
    refused = subprocess.run([env["PYTORCH_NVCC"], *compile_args("-arch=sm_80")], env=env, text=True,
                             capture_output=True, cwd=tmp_path)
    assert refused.returncode == 3 and "-arch=sm_80" in refused.stderr


def test_the_guard_line_is_the_same_error_as_the_host_watchers() -> None:
    line = ("cuda-ext-farm nvcc-arch-guard: own architecture flags: -gencode=arch=compute_80,code=sm_80 "
            "-gencode=arch=compute_86,code=sm_86 (TORCH_CUDA_ARCH_LIST=9.0)")
    host = arch_flags.stop_on_own_arch_flags("9.0")(
        ninja_line("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86"))
    container = arch_flags.stop_on_own_arch_flags("9.0")(line)
    assert host is not None and container is not None and container.line() == host.line()
    # From the kept output too (the watcher missed it: a line split by a full pipe, a build that ended first).
    general = CommandFailed("the container build of p failed", "exit 1", "see above")
    explained = failure.explain(general, f"FAILED: /project/build/k.o\n{line}\nninja: build stopped\n"
                                "RuntimeError: Error compiling objects for extension\n", build="the container build")
    assert explained.line() == host.line()


# --- the audit's sass/ptx failure names the flags (read from the build's output) ---------------------------------

def stable_target(arch_list: str, build_env: dict[str, str] | None = None) -> targets.Target:
    target = targets.with_arch_list(targets.default_target(project.load(ROOT)), arch_list)
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
        "-gencode=arch=compute_86,code=sm_86: drop them from the extension's extra_compile_args (setup.py) and let "
        "torch's TORCH_CUDA_ARCH_LIST apply (9.0 here: cuda-archs in [tool.cuda-ext-farm] or --arch-list choose it)")


def test_the_advice_tells_build_envs_list_from_the_projects_flags() -> None:
    listed = stable_target("9.0", {"TORCH_CUDA_ARCH_LIST": "8.0"})
    advice = arch_flags.arch_flags_advice(output_of("-gencode=arch=compute_80,code=sm_80"), listed)
    assert advice.startswith("nvcc compiled for TORCH_CUDA_ARCH_LIST=8.0, which build-env of [tool.cuda-ext-farm] "
                             "sets: remove it there")
    own = arch_flags.arch_flags_advice(output_of("-gencode=arch=compute_80,code=sm_80"),
                                       stable_target("9.0", {"TORCH_CUDA_ARCH_LIST": "8.6"}))
    assert own.startswith("nvcc compiled with architecture flags of the project's own: "
                          "-gencode=arch=compute_80,code=sm_80: drop them from the extension's extra_compile_args "
                          "(setup.py) and remove TORCH_CUDA_ARCH_LIST from build-env")


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
