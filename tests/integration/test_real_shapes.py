"""Projects in shapes issue 32 found in the wild, each built by the installed command (tests/conftest.py) from a
copy of itself outside the farm's checkout, CPU-only (torch 2.13 and CPython 3.11, the farm's cached build
environment):

* h ``submodule_headers``: a header from a header-only library that is a git submodule of the project, built from
  a real checkout with the submodule initialised; a clone without ``--recursive`` is refused in one line before
  anything is installed (setup.py names the submodule's folder: the build uses it).
* i ``prebuilt_download``: setup.py first downloads a prebuilt wheel (from an address nothing listens on) unless a
  variable says to build; the failed build's last line names the network access and the variable's route.
* j ``hardcoded_gencode``: setup.py passes its own ``-gencode`` flags (a CUDA build, torch 2.11 and the pinned CUDA
  13.0 toolkit): the build is stopped at its first nvcc command line, before the long compile, with the fix.
* k ``test_requires``: the project's tests import pytest and ``tabulate``, which only ``test-requires`` installs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_fixture_projects import Built, copy_fixture, farm

pytestmark = pytest.mark.slow

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

#: The header-only library of fixture h: a repository of its own, made by the test (nothing public copied).
RINGMATH_HPP = """#pragma once
#include <cstdint>

namespace ringmath {
// (value + shift) in [0, modulus), for any sign of value and shift.
inline std::int64_t wrap_add(std::int64_t value, std::int64_t shift, std::int64_t modulus) {
  std::int64_t r = (value + shift) % modulus;
  return r < 0 ? r + modulus : r;
}
}  // namespace ringmath
"""


def git(cwd: Path, *args: str) -> None:
    done = subprocess.run(["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
                          cwd=cwd, env=GIT_ENV, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1]


def cpu_build(command: list[str], folder: Path, out: Path, *args: str) -> Built:
    result = farm(command, folder, "build", "--cpu", "--python", "3.11", "--wheelhouse", str(out / "wheelhouse"),
                  "--build-dir", str(out / "build"), *args)
    return Built(folder, out / "wheelhouse", result)


# -- h: submodule_headers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git checkout of the fixture with the header library added as a submodule at third_party/ringmath."""
    root = tmp_path_factory.mktemp("submodule_headers")
    library = root / "ringmath"
    (library / "include" / "ringmath").mkdir(parents=True)
    (library / "include" / "ringmath" / "ringmath.hpp").write_text(RINGMATH_HPP)
    git(library, "init", "-q")
    git(library, "add", ".")
    git(library, "commit", "-qm", "ringmath")
    project = copy_fixture("submodule_headers", root)
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "submodule", "add", "-q", str(library), "third_party/ringmath")
    git(project, "commit", "-qm", "the project, ringmath as a submodule")
    return project


@pytest.mark.extended
def test_h_the_submodule_header_reaches_the_build(farm_command: list[str], checkout: Path, tmp_path: Path) -> None:
    built = cpu_build(farm_command, checkout, tmp_path)
    wheel = built.wheel
    assert wheel.name.startswith("submodule_headers-0.1.0+pt2.13.cpu-cp311-cp311-manylinux_"), wheel.name
    copied = next((tmp_path / "build").glob("*/src/third_party/ringmath/include/ringmath/ringmath.hpp"))
    assert copied.read_text() == RINGMATH_HPP
    tested = farm(farm_command, checkout, "test", "--python", "3.11", "--wheel", str(wheel))  # the smoke command
    assert tested.returncode == 0, tested.stdout[-3000:]


def test_h_a_clone_without_its_submodule_is_refused_before_compiling(farm_command: list[str], checkout: Path,
                                                                     tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(checkout), str(clone))
    built = cpu_build(farm_command, clone, tmp_path)
    assert built.result.returncode == 2, built.result.stdout[-3000:]
    assert last_line(built.result) == (
        "error: a git submodule the build uses is not checked out (its folder is empty) (third_party/ringmath, named "
        "in setup.py line 10): run `git submodule update --init --recursive` in the project's folder, then build "
        "again")
    assert "building 'submodule_headers._C'" not in built.result.stdout
    assert not (tmp_path / "wheelhouse").exists()  # nothing half-written, not even an empty folder


# -- k: test_requires ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def test_requires(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("test_requires")
    return cpu_build(farm_command, copy_fixture("test_requires", root), root)


def cpu_test(command: list[str], built: Built) -> subprocess.CompletedProcess[str]:
    return farm(command, built.project, "test", "--python", "3.11", "--wheel", str(built.wheel))


@pytest.mark.extended
def test_k_test_requires_installs_what_the_tests_import(farm_command: list[str], test_requires: Built) -> None:
    result = cpu_test(farm_command, test_requires)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "2 passed" in result.stdout


@pytest.mark.extended
def test_k_without_test_requires_the_same_tests_cannot_run(farm_command: list[str], test_requires: Built) -> None:
    config = test_requires.project / "pyproject.toml"
    text = config.read_text()
    config.write_text(text.replace('test-requires = ["pytest>=7", "tabulate"]\n', ""))
    try:
        result = cpu_test(farm_command, test_requires)
    finally:
        config.write_text(text)
    assert result.returncode == 1, result.stdout[-4000:]
    assert "No module named pytest" in result.stdout
    assert last_line(result).startswith("error: the project's test command failed")


# -- i: prebuilt_download ------------------------------------------------------------------------------------


@pytest.mark.extended
def test_i_a_download_during_the_build_is_named_with_the_variable_that_stops_it(farm_command: list[str],
                                                                                tmp_path: Path) -> None:
    folder = copy_fixture("prebuilt_download", tmp_path)
    args = ["build", "--cpu", "--python", "3.11", "--wheelhouse", str(tmp_path / "wheelhouse"), "--build-dir",
            str(tmp_path / "build")]
    # Port 9 (discard) on this machine: nothing listens, the connection is refused at once.
    env = {**os.environ, "COLUMNS": "250", "PREBUILT_DOWNLOAD_URL": "http://127.0.0.1:9/wheels/"}
    failed = subprocess.run([*farm_command, *args], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert last_line(failed) == (
        "error: the wheel build of prebuilt_download-torch2.13-cpu-cp311-linux_x86_64 failed: the build tried to "
        "reach the network (a download during the build) (http://127.0.0.1:9/wheels/prebuilt_download-0.1.0-cp311-"
        "linux_x86_64.whl: urllib.error.URLError: <urlopen error [Errno 111] Connection refused>): the build script "
        'forces a local build with PREBUILT_DOWNLOAD_FORCE_BUILD (it compares it with "1"): set cpu-env = { '
        'PREBUILT_DOWNLOAD_FORCE_BUILD = "1" } in [tool.cuda-ext-farm], so the farm compiles the project instead; '
        "nothing was written to the wheelhouse")
    assert "--env-dir" not in failed.stdout  # pypa/build's tip names options the farm does not take
    assert not list((tmp_path / "wheelhouse").glob("*/*.whl"))

    config = folder / "pyproject.toml"
    config.write_text(config.read_text() + 'cpu-env = { PREBUILT_DOWNLOAD_FORCE_BUILD = "1" }\n')
    built = subprocess.run([*farm_command, *args], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    assert built.returncode == 0, built.stdout[-3000:]
    (wheel,) = (tmp_path / "wheelhouse").glob("*/*.whl")
    assert wheel.name.startswith("prebuilt_download-0.1.0+pt2.13.cpu-cp311-cp311-manylinux_"), wheel.name


# -- j: hardcoded_gencode ------------------------------------------------------------------------------------


def build_j(farm_command: list[str], tmp_path: Path, table: str = "",
            setup_edit: tuple[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    folder = copy_fixture("hardcoded_gencode", tmp_path)
    if setup_edit:
        setup = folder / "setup.py"
        setup.write_text(setup.read_text().replace(*setup_edit))
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + table)
    return farm(farm_command, folder, "build", "--arch-list", "9.0", "--torch", "2.11", "--python", "3.11",
                "--wheelhouse", str(tmp_path / "wheelhouse"), "--build-dir", str(tmp_path / "build"))


def report_of(tmp_path: Path) -> dict[str, object]:
    (report,) = (tmp_path / "wheelhouse").glob("*/report.json")
    data: dict[str, object] = json.loads(report.read_text())
    return data


def test_j_hard_coded_gencode_flags_stop_the_build_at_its_first_nvcc(farm_command: list[str],
                                                                     tmp_path: Path) -> None:
    result = build_j(farm_command, tmp_path)
    assert result.returncode == 2, result.stdout[-3000:]
    assert last_line(result) == (
        "error: the project passes its own CUDA architecture flags to nvcc, so torch ignores TORCH_CUDA_ARCH_LIST "
        "(the farm's architectures) (-gencode=arch=compute_80,code=sm_80 and 1 more): set project-arch-flags = "
        "\"replace\" in [tool.cuda-ext-farm] to build the farm's list (9.0 here: cuda-archs or --arch-list choose it) "
        "in their place, or project-arch-flags = \"keep\" to build the project's own list; or drop the flags from "
        "the extension's extra_compile_args (setup.py). The build was stopped at its first nvcc")
    assert not list((tmp_path / "wheelhouse").glob("*/*.whl"))
    assert not list((tmp_path / "build").glob("*/src/build/**/*.o"))  # nvcc was stopped, nothing compiled


#: What a user of the installed command cannot act on: a nox session of the farm's checkout, a file of the farm.
DEVELOPERS_WORDS = re.compile(r"nox -s|\bci/[\w/]+\.py\b|noxfile")


def developers_words(log: str) -> list[str]:
    """The lines of a build's log in the farm's own voice (not a command line it replays, `$ ...`, nor one ninja
    ran, `[1/3] ...`, whose programs sit where they sit) that name a nox session or a farm source file."""
    return [line for line in log.splitlines()
            if not line.startswith(("$ ", "[")) and DEVELOPERS_WORDS.search(line)]


def test_j_a_flag_that_contains_arch_drops_torchs_list_and_is_refused(farm_command: list[str],
                                                                      tmp_path: Path) -> None:
    """-Xcompiler -march=native: torch adds no -gencode flag (it contains "arch"), nvcc would build sm_75 alone."""
    result = build_j(farm_command, tmp_path, setup_edit=(
        'GENCODE = ["-gencode=arch=compute_80,code=sm_80", "-gencode", "arch=compute_86,code=sm_86"]',
        'GENCODE = ["-Xcompiler", "-march=native"]'))
    assert result.returncode == 2, result.stdout[-3000:]
    assert last_line(result).startswith("error: an nvcc compile has no architecture flag, so nvcc would build for its "
                                        "default architecture only")
    assert "(csrc/scale.cu): " in last_line(result)  # the file as the project has it, not the farm's copy
    assert not list((tmp_path / "wheelhouse").glob("*/*.whl"))


@pytest.mark.extended
def test_j_with_its_own_list_in_build_env_the_sass_failure_names_it(farm_command: list[str],
                                                                     tmp_path: Path) -> None:
    """A project that sets TORCH_CUDA_ARCH_LIST in build-env chose its architectures: its compiles are held to that
    list, and its wheel then fails the audit's sass check for --arch-list 9.0, naming build-env's list."""
    result = build_j(farm_command, tmp_path, 'build-env = { TORCH_CUDA_ARCH_LIST = "8.6" }\n', setup_edit=(
        'GENCODE = ["-gencode=arch=compute_80,code=sm_80", "-gencode", "arch=compute_86,code=sm_86"]',
        "GENCODE = []"))
    assert result.returncode == 4, result.stdout[-3000:]
    advice = ("nvcc compiled for TORCH_CUDA_ARCH_LIST=8.6, which build-env of [tool.cuda-ext-farm] sets: remove it "
              "there and let the farm's list apply (9.0 here: cuda-archs in [tool.cuda-ext-farm] or --arch-list "
              "choose it)")
    assert f"sass: SASS for sm_86; missing sm_90; unexpected sm_86; {advice}" in result.stdout
    assert last_line(result).startswith("error: the wheel audit failed ")
    assert not list((tmp_path / "wheelhouse").glob("*/*.whl"))
