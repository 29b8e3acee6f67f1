"""ci/nvcc/wrapper.py, the script in front of nvcc on every route: run here as the build runs it (``python -I
wrapper.py <args>``), in front of a stand-in nvcc that records the arguments and the flag variables it was given
(the real nvcc's part is in tests/integration/test_arch_flags_builds.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.builds import arch_flags
from ci.nvcc import wrapper

ROOT = Path(__file__).resolve().parents[3]
ARCHS = "8.0;9.0+PTX"
TORCH_FLAGS = ("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=compute_90 "
               "-gencode=arch=compute_90,code=sm_90")


def stand_in_nvcc(folder: Path) -> Path:
    """An "nvcc" that writes its arguments and NVCC_APPEND_FLAGS as JSON to ``ran.json`` beside it."""
    nvcc = folder / "nvcc"
    nvcc.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"open({str(folder / 'ran.json')!r}, 'w').write(json.dumps("
                    "[sys.argv[1:], os.environ.get('NVCC_APPEND_FLAGS', '')]))\n")
    nvcc.chmod(0o755)
    return nvcc


def run(tmp_path: Path, args: list[str], mode: str = "refuse", arch_list: str = ARCHS,
        extra: dict[str, str] | None = None, next_nvcc: str | None = None) -> subprocess.CompletedProcess[str]:
    nvcc = stand_in_nvcc(tmp_path)
    env = {"PATH": os.environ["PATH"], "FARM_NVCC_NEXT": next_nvcc or str(nvcc), "FARM_NVCC_ARCH_MODE": mode,
           "FARM_NVCC_ARCH_LIST": arch_list, **(extra or {})}
    return subprocess.run([sys.executable, "-I", str(arch_flags.WRAPPER), *args], env=env, text=True,
                          capture_output=True, cwd=tmp_path)


def ran_with(tmp_path: Path) -> tuple[list[str], str] | None:
    ran = tmp_path / "ran.json"
    if not ran.exists():
        return None
    args, append = json.loads(ran.read_text())
    return args, append


def compile_args(flags: str) -> list[str]:
    return ["--generate-dependencies-with-compile", "--dependency-output", "k.o.d", "-I/x y/include", "-c", "k.cu",
            "-o", "k.o", "--compiler-options", "'-fPIC'", *flags.split(), "-std=c++17"]


def test_torchs_flags_for_the_farms_list_run_nvcc_unchanged(tmp_path: Path) -> None:
    assert wrapper.torch_arch_flags(ARCHS) == sorted(TORCH_FLAGS.split())
    args = compile_args(TORCH_FLAGS)
    for mode in wrapper.MODES:
        done = run(tmp_path, args, mode, extra={"NVCC_APPEND_FLAGS": "-DPROJECT_OWN -objtemp"})
        # one line: what nvcc compiles for, and what it reads from NVCC_APPEND_FLAGS (no command line shows it)
        flags = " ".join(sorted(TORCH_FLAGS.split()))
        assert (done.returncode, done.stderr) == (
            0, f"cuda-ext-farm nvcc: k.cu: {flags}; NVCC_APPEND_FLAGS: -DPROJECT_OWN -objtemp\n")
        assert ran_with(tmp_path) == (args, "-DPROJECT_OWN -objtemp")  # the same words, in order


@pytest.mark.parametrize(("flags", "own"), [
    ("-gencode=arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86",
     "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86"),
    ("-arch=sm_80", "-arch=sm_80"),
    ("-arch sm_90", "-arch=sm_90"),
    ("--generate-code=arch=compute_86,code=[sm_86,compute_86]", "-gencode=arch=compute_86,code=[sm_86,compute_86]"),
    ("--generate-code arch=compute_89,code=sm_89", "-gencode=arch=compute_89,code=sm_89"),
    # a part of the list: torch added none, the project chose these itself
    ("-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=sm_90"),
])
def test_refuse_stops_a_compile_with_flags_of_the_projects_own_before_nvcc_runs(tmp_path: Path, flags: str,
                                                                                own: str) -> None:
    done = run(tmp_path, compile_args(flags))
    assert done.returncode == wrapper.REFUSED and ran_with(tmp_path) is None
    assert done.stdout == ""
    assert done.stderr == f"cuda-ext-farm nvcc: own architecture flags: {own} (the farm's list: {ARCHS})\n"
    error = arch_flags.refusal("FAILED: k.o\n" + done.stderr)
    assert error is not None and error.value.startswith(own.split()[0]) and f"({ARCHS} here" in error.fix
    assert error.fix.startswith(f'set {arch_flags.KEY} = "replace"')


def test_the_refusal_counts_every_flag_of_the_projects_own(tmp_path: Path) -> None:
    """Nine -gencode pairs (one of them the farm's 9.0): the error names the first and 8 more."""
    nine = " ".join(f"-gencode arch=compute_{a},code=sm_{a}" for a in (70, 75, 80, 86, 87, 89, 90, 100, 120))
    done = run(tmp_path, compile_args(nine), arch_list="9.0")
    error = arch_flags.refusal(done.stderr)
    assert error is not None and error.value == "-gencode=arch=compute_70,code=sm_70 and 8 more"


def test_a_flag_in_nvcc_append_flags_counts_as_the_projects_own(tmp_path: Path) -> None:
    done = run(tmp_path, compile_args(TORCH_FLAGS), extra={"NVCC_APPEND_FLAGS": "-O3 -arch=sm_75"})
    assert done.returncode == wrapper.REFUSED and "-arch=sm_75" in done.stderr


def test_a_compile_without_architecture_flags_is_refused_with_its_cause(tmp_path: Path) -> None:
    """torch drops TORCH_CUDA_ARCH_LIST's flags when an nvcc flag contains 'arch' (-Xcompiler -march=native)."""
    args = ["-c", "csrc/k.cu", "-o", "k.o", "-Xcompiler", "-march=native"]
    for mode in ("refuse", "keep"):
        done = run(tmp_path, args, mode)
        assert done.returncode == wrapper.REFUSED and ran_with(tmp_path) is None
        assert done.stderr == f"cuda-ext-farm nvcc: no architecture flags: csrc/k.cu (the farm's list: {ARCHS})\n"
    error = arch_flags.refusal(done.stderr)
    assert error is not None and error.value == "csrc/k.cu"
    assert "contains the letters 'arch'" in error.what and f'{arch_flags.KEY} = "replace"' in error.fix


def test_replace_compiles_for_the_farms_list(tmp_path: Path) -> None:
    own = "-gencode arch=compute_70,code=sm_70 -gencode=arch=compute_80,code=sm_80 -arch=sm_86"
    done = run(tmp_path, compile_args(own), "replace")
    assert done.returncode == 0, done.stderr
    assert ran_with(tmp_path) == ([*compile_args(""), *sorted(TORCH_FLAGS.split())], "")


def test_replace_keeps_the_architecture_specific_target_the_project_asks_for(tmp_path: Path) -> None:
    """sm_90a kernels (wgmma) compile for nothing else: 9.0 of the farm's list becomes 9.0a; 8.0 stays; PTX stays
    plain (an arch-specific PTX runs on no other GPU); sm_100a is not in the farm's list: dropped."""
    own = ("-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_100a,code=sm_100a "
           "-gencode=arch=compute_80,code=sm_80")
    done = run(tmp_path, compile_args(own), "replace")
    ran = ran_with(tmp_path)
    assert done.returncode == 0 and ran is not None
    assert ran[0][-3:] == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=compute_90",
                           "-gencode=arch=compute_90a,code=sm_90a"]


def test_replace_gives_a_compile_without_flags_the_farms_list(tmp_path: Path) -> None:
    done = run(tmp_path, ["-c", "k.cu", "-o", "k.o", "-Xcompiler", "-march=native"], "replace")
    ran = ran_with(tmp_path)
    assert done.returncode == 0 and ran is not None and ran[0][6:] == sorted(TORCH_FLAGS.split())


def test_replace_takes_the_flags_out_of_nvcc_append_flags_too(tmp_path: Path) -> None:
    done = run(tmp_path, compile_args(""), "replace", extra={"NVCC_APPEND_FLAGS": "-DOWN -arch sm_75 -objtemp"})
    ran = ran_with(tmp_path)
    assert done.returncode == 0 and ran is not None
    assert ran == ([*compile_args(""), *sorted(TORCH_FLAGS.split())], "-DOWN -objtemp")


def test_keep_builds_the_projects_own_list(tmp_path: Path) -> None:
    args = compile_args("-gencode arch=compute_70,code=sm_70 -arch=sm_86")
    done = run(tmp_path, args, "keep")
    assert done.returncode == 0 and ran_with(tmp_path) == (args, "")


@pytest.mark.parametrize("args", [
    ["--version"],  # not a compile
    ["-dlink", "k.o", "-o", "dlink.o", "-arch=sm_80"],  # not a compile
])
def test_other_nvcc_commands_run_unchanged(tmp_path: Path, args: list[str]) -> None:
    for mode in wrapper.MODES:
        done = run(tmp_path, args, mode)
        assert done.returncode == 0 and ran_with(tmp_path) == (args, "")


def test_without_an_arch_list_it_only_runs_nvcc(tmp_path: Path) -> None:
    args = compile_args("-gencode=arch=compute_80,code=sm_80")
    done = run(tmp_path, args, arch_list="")
    assert done.returncode == 0 and ran_with(tmp_path) == (args, "")


def test_the_next_command_may_be_a_compile_cache_in_front_of_nvcc(tmp_path: Path) -> None:
    """FARM_NVCC_NEXT is a shell-quoted word list: ``ccache /path/nvcc``; here ``env`` plays the launcher."""
    nvcc = stand_in_nvcc(tmp_path)
    args = compile_args(TORCH_FLAGS)
    done = run(tmp_path, args, next_nvcc=f"env FARM_SEEN=1 '{nvcc}'")
    assert done.returncode == 0 and ran_with(tmp_path) == (args, "")


def test_it_chains_with_the_module_anchor(tmp_path: Path) -> None:
    """wrapper -> nvcc-module-anchor -> nvcc (CUDA 12.4's container builds): the anchor still adds its define."""
    nvcc = stand_in_nvcc(tmp_path)
    args = compile_args("-gencode=arch=compute_90,code=sm_90")
    done = run(tmp_path, args, arch_list="9.0", next_nvcc=str(ROOT / "ci" / "nvcc" / "nvcc-module-anchor"),
               extra={"FARM_NVCC": str(nvcc)})
    assert done.returncode == 0, done.stderr
    ran = ran_with(tmp_path)
    assert ran is not None and ran[0][:len(args)] == args and ran[0][len(args)].startswith("-DFARM_MODULE_ANCHOR=")
