"""ci/nvcc/wrapper.py, the script in front of nvcc on every route: run here as the build runs it (``python -I
wrapper.py <args>``), in front of a stand-in nvcc that records the arguments and the flag variables it was given
(the real nvcc's part is in tests/integration/test_arch_flags_builds.py)."""

from __future__ import annotations

import json
import os
import re
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
    """An "nvcc" that writes its arguments and the variables nvcc would read flags from (NVCC_*, joined) as JSON to
    ``ran.json`` beside it."""
    nvcc = folder / "nvcc"
    nvcc.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"open({str(folder / 'ran.json')!r}, 'w').write(json.dumps("
                    "[sys.argv[1:], ' '.join(f'{k}={v}' for k, v in sorted(os.environ.items()) "
                    "if k.startswith('NVCC_'))]))\n")
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
        # the same words, in order, the variable's on the command line (where a compile cache hashes them)
        assert ran_with(tmp_path) == ([*args, "-DPROJECT_OWN", "-objtemp"], "")


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
    assert ran == ([*compile_args(""), "-DOWN", "-objtemp", *sorted(TORCH_FLAGS.split())], "")
    assert done.stderr.endswith("; NVCC_APPEND_FLAGS: -DOWN -objtemp\n")  # the project's flags, less -arch


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


# --- what nvcc reads from its environment, folded onto the command line --------------------------------------


def test_the_flag_variables_are_folded_in_nvccs_order_and_leave_the_environment(tmp_path: Path) -> None:
    """NVCC_PREPEND_FLAGS before the arguments, NVCC_APPEND_FLAGS after them, NVCC_CCBIN as -ccbin: a compile
    cache behind the wrapper hashes them; nvcc must not read them a second time."""
    args = compile_args(TORCH_FLAGS)
    done = run(tmp_path, args, extra={"NVCC_PREPEND_FLAGS": "-DFIRST -O0", "NVCC_APPEND_FLAGS": "-DFOO=1  -O3",
                                      "NVCC_CCBIN": "/opt/a b/g++"})
    assert done.returncode == 0, done.stderr
    assert ran_with(tmp_path) == (["-DFIRST", "-O0", *args, "-DFOO=1", "-O3", "-ccbin", "/opt/a b/g++"], "")


@pytest.mark.parametrize("given", [["-ccbin", "/usr/bin/g++-12"], ["-ccbin=/usr/bin/g++-12"],
                                   ["--compiler-bindir", "/usr/bin/g++-12"], ["--compiler-bindir=/usr/bin/g++-12"]])
@pytest.mark.parametrize("where", ["args", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"])
def test_nvcc_ccbin_gives_way_to_a_host_compiler_option(tmp_path: Path, given: list[str], where: str) -> None:
    """As nvcc: NVCC_CCBIN is the host compiler only when no option names one (on the command line or in the
    flag variables)."""
    args = compile_args(TORCH_FLAGS)
    extra = {"NVCC_CCBIN": "/opt/other/g++"}
    if where == "args":
        args = [*args, *given]
    else:
        extra[where] = " ".join(given)
    done = run(tmp_path, args, extra=extra)
    ran = ran_with(tmp_path)
    assert done.returncode == 0 and ran is not None
    assert "/opt/other/g++" not in ran[0] and ran[1] == ""


def test_a_query_is_folded_too(tmp_path: Path) -> None:
    done = run(tmp_path, ["--version"], extra={"NVCC_APPEND_FLAGS": "-DX"})
    assert done.returncode == 0 and ran_with(tmp_path) == (["--version", "-DX"], "")


@pytest.mark.parametrize("value", ['-DA="x', '-Xcompiler="-O2 -DB=1', '-DA=a\\"b', '-DA="a\\" -DB=1'])
@pytest.mark.parametrize("name", ["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"])
def test_an_unbalanced_quote_is_one_error_line_not_a_traceback(tmp_path: Path, value: str, name: str) -> None:
    done = run(tmp_path, compile_args(TORCH_FLAGS), extra={name: value})
    assert done.returncode == wrapper.BAD_VARIABLE and ran_with(tmp_path) is None
    assert done.stderr == wrapper.UNBALANCED.format(name=name, value=value) + "\n"
    assert "Traceback" not in done.stderr and f"{name} has an unbalanced double quote ({value})" in done.stderr


@pytest.mark.parametrize(("value", "words"), [
    ("", []),
    ("  -DA=1\t-DB=2  ", ["-DA=1", "-DB=2"]),
    ('-Xcompiler="-ffile-prefix-map=/a b=." -O3', ['-Xcompiler="-ffile-prefix-map=/a b=."', "-O3"]),
    ('-DA="a b"c -DQ=\'x y\'', ['-DA="a b"c', "-DQ='x", "y'"]),  # single quotes group nothing
    ('-DA="a\\"b c" -DB', ['-DA="a\\"b c"', "-DB"]),  # \" inside quotes does not close them
    ("-DBAR=a\\ b -DA=x\\\\y", ["-DBAR=a\\", "b", "-DA=x\\\\y"]),  # a backslash escapes nothing outside quotes
    ("-DA=1\n-DB=2", ["-DA=1\n-DB=2"]),  # nor does a line break split
])
def test_flags_split_as_nvcc_splits_them(value: str, words: list[str]) -> None:
    assert wrapper.split_flags(value) == words


@pytest.fixture(scope="module")
def real_nvcc() -> Path:
    from ci.toolchain import toolkit
    from ci.universe import matrix

    return toolkit.ensure_toolkit(matrix.get_cell("13.0")).nvcc


def dry_run(nvcc: Path, args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """What nvcc would run (``--dryrun``), its temporary names and its echo of the flag variables left out, in
    sorted order (``--threads`` runs the steps in parallel: their order varies)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_")}
    done = subprocess.run([str(nvcc), "--dryrun", *args], env={**base, **env}, capture_output=True, text=True,
                          cwd=cwd)
    out = re.sub(r"tmpxft_[0-9a-f]+_[0-9a-f]+(-[0-9]+_[0-9a-f]+_std)?", "TMP", done.stdout + done.stderr)
    out = re.sub(r'#\$ NVCC_(APPEND|PREPEND)_FLAGS="(.|\n)*?"\n(?=#|nvcc)', "", out)
    return done.returncode, "\n".join(sorted(out.replace("nvcc fatal", "fatal").splitlines()))


@pytest.mark.parametrize("env", [
    {"NVCC_APPEND_FLAGS": "-DFOO=1 -O3"},
    {"NVCC_APPEND_FLAGS": "-objtemp --threads 0 -frandom-seed=t -Xcompiler=\"-ffile-prefix-map=/a b/src=.\" "
                          "--compress-mode=size"},
    {"NVCC_APPEND_FLAGS": '-DQ="x" -DA="a b"c -DR=\'y\' -DS=x\\\\y -DT="a\\"b c"'},
    {"NVCC_PREPEND_FLAGS": "-DA=1 -O0", "NVCC_APPEND_FLAGS": "-DA=2 -O3"},
    {"NVCC_CCBIN": "/usr/bin/gcc"},
    {"NVCC_CCBIN": "/usr/bin/gcc", "NVCC_APPEND_FLAGS": "-ccbin /usr/bin/g++"},
    {"NVCC_CCBIN": "/usr/bin/gcc", "NVCC_PREPEND_FLAGS": "--compiler-bindir=/usr/bin/g++"},
])
def test_folded_flags_make_nvcc_run_exactly_what_the_variables_did(real_nvcc: Path, tmp_path: Path,
                                                                  env: dict[str, str]) -> None:
    """The real nvcc's sub-commands (preprocessor, cudafe++, cicc, ptxas, fatbinary, the host compile) are the
    same, word for word, whether the flags come from the variables or from the folded command line."""
    (tmp_path / "k.cu").write_text("__global__ void k(int *p) { *p = 1; }\n")
    args = ["-c", "k.cu", "-o", "k.o", "-gencode=arch=compute_90,code=sm_90", "-ccbin", "/usr/bin/g++"]
    for given in (args, args[:-2]):
        with_variables = dry_run(real_nvcc, given, env, tmp_path)
        assert with_variables[0] == 0 and "cicc" in with_variables[1], with_variables[1][-2000:]
        assert dry_run(real_nvcc, wrapper.fold(given, env).args, {}, tmp_path) == with_variables
