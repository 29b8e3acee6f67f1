"""What the source alone refuses, before anything is installed (ci/builds/preflight.py), on real git checkouts: an
empty submodule that the build uses (named by a file the backend reads, or holding a header the project's sources
include) stops the build in one line; one it does not use (a documentation theme) is a warning and the build goes
on; a link to what git ignores is a warning. The time it takes on a cold cache:
tests/integration/test_preflight_cold.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

import pytest

from ci.builds import preflight, project_source
from ci.errors import UsageError
from ci.universe import targets
from ci.universe.project import reading

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
PYPROJECT = ('[build-system]\nrequires = ["setuptools", "torch"]\nbuild-backend = "setuptools.build_meta"\n'
             '[project]\nname = "p"\nversion = "1"\n[tool.cuda-ext-farm]\ntorch = ["2.13"]\npython = ["3.11"]\n')


def git(cwd: Path, *args: str) -> None:
    done = subprocess.run(["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
                          cwd=cwd, env=GIT_ENV, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


def clone_without_submodules(tmp_path: Path, files: dict[str, str], submodules: tuple[str, ...]) -> Path:
    """A project of ``files`` whose ``submodules`` (each a repository with one header) are added with `git submodule
    add`, then cloned without --recursive: the submodules' folders are empty."""
    project_dir = tmp_path / "project"
    for name, text in {"pyproject.toml": PYPROJECT, **files}.items():
        (project_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (project_dir / name).write_text(text)
    git(project_dir, "init", "-q")
    for sub in submodules:
        library = tmp_path / "libraries" / sub.replace("/", "_")
        (library / "include").mkdir(parents=True)
        (library / "include" / "lib.h").write_text("#pragma once\n")
        git(library, "init", "-q")
        git(library, "add", ".")
        git(library, "commit", "-qm", "lib")
        git(project_dir, "submodule", "add", "-q", str(library), sub)
    git(project_dir, "add", ".")
    git(project_dir, "commit", "-qm", "project")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project_dir), str(clone))
    return clone


def target_of(root: Path) -> targets.Target:
    return next(t for t in targets.targets_for(reading.load(root)) if t.os == "linux" and t.arch == "x86_64")


SETUP_WITH_PARTS = ('from pathlib import Path\nfrom setuptools import setup\n\nHERE = Path(__file__).parent\n'
                    'setup(include_dirs=[str(HERE / "third_party" / "ringmath" / "include")])\n')


@pytest.mark.parametrize(("files", "where"), [
    ({"setup.py": SETUP_WITH_PARTS}, "setup.py line 5"),
    ({"setup.py": 'include_dirs = ["third_party/ringmath/include"]\n'}, "setup.py line 1"),
    ({"setup.py": "", "csrc/ops.cpp": '#include <vector>\n#include "ringmath/lib.h"\n'},
     "csrc/ops.cpp line 2 (#include ringmath/lib.h)"),
])
def test_an_empty_submodule_the_build_uses_is_refused_naming_where(tmp_path: Path, files: dict[str, str],
                                                                   where: str) -> None:
    clone = clone_without_submodules(tmp_path, files, ("third_party/ringmath",))
    with pytest.raises(UsageError) as err:
        preflight.preflight(target_of(clone))
    assert err.value.line() == (
        f"error: a git submodule the build uses is not checked out (its folder is empty) (third_party/ringmath, named "
        f"in {where}): run `git submodule update --init --recursive` in the project's folder, then build again")


def test_a_cmake_project_uses_what_its_top_file_adds(tmp_path: Path) -> None:
    cmake = ("cmake_minimum_required(VERSION 3.18)\nproject(p)\nfind_package(Torch REQUIRED)\n"
             "add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/extern/fmt)\n")
    clone = clone_without_submodules(tmp_path, {"CMakeLists.txt": cmake}, ("extern/fmt",))
    (clone / "pyproject.toml").write_text(PYPROJECT.replace('"setuptools", "torch"]', '"scikit-build-core"]').replace(
        "setuptools.build_meta", "scikit_build_core.build"))
    with pytest.raises(UsageError, match=r"\(extern/fmt, named in CMakeLists.txt line 4\)"):
        preflight.preflight(target_of(clone))


def test_an_empty_submodule_the_build_does_not_use_is_a_warning_said_once(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A documentation theme: nothing the build reads names it; the build goes on (twice: build-all's targets)."""
    clone = clone_without_submodules(tmp_path, {"setup.py": SETUP_WITH_PARTS, "third_party/ringmath/include/lib.h": ""},
                                     ("docs/_themes/rtd",))
    target = target_of(clone)
    preflight.preflight(target)
    preflight.preflight(target)
    said = " ".join(capsys.readouterr().err.split())
    assert said == ("warning: the git submodule docs/_themes/rtd is not checked out (its folder is empty); no file the "
                    "build reads names it, so the build goes on without it (if a compile misses a header under it, "
                    "the error says so; `git submodule update --init --recursive` checks it out)")


def test_a_submodule_named_only_by_another_tools_table_is_not_the_builds(tmp_path: Path) -> None:
    """[tool.ruff] exclude names the folder; ruff is not the build backend."""
    clone = clone_without_submodules(tmp_path, {"setup.py": ""}, ("third_party/bench_data",))
    (clone / "pyproject.toml").write_text(PYPROJECT + '[tool.ruff]\nexclude = ["third_party/bench_data"]\n')
    assert preflight.used_by_build(clone, "third_party/bench_data", project_source.read_tree(clone).files) is None


def test_a_link_to_what_git_ignores_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clone = clone_without_submodules(tmp_path, {"setup.py": "", ".gitignore": "generated/\n"}, ())
    (clone / "generated").mkdir()
    (clone / "generated" / "version.h").write_text("")
    os.symlink("generated", clone / "csrc")
    preflight.preflight(target_of(clone))
    assert "the link csrc -> generated points to what git ignores" in " ".join(capsys.readouterr().err.split())


def test_a_link_out_of_the_project_is_refused_before_anything(tmp_path: Path) -> None:
    clone = clone_without_submodules(tmp_path, {"setup.py": ""}, ())
    os.symlink(str(tmp_path), clone / "outside")
    with pytest.raises(UsageError, match=r"points to an absolute path.*\(outside -> "):
        preflight.preflight(target_of(clone))


# --- an empty submodule whose headers the build finds elsewhere (issue 45, item 9) ---------------------------------

PYBIND_SETUP = 'include_dirs = ["third_party/pybind11/include"]\n'
PYBIND_SOURCE = "#include <torch/extension.h>\n#include <pybind11/pybind11.h>\n#include <pybind11/stl.h>\n"


def test_an_empty_pybind11_submodule_is_a_warning_since_torch_carries_pybind11(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torch's include folder holds pybind11: the build compiles with it (the test environment's torch has it)."""
    from torch.utils import cpp_extension

    assert any((Path(p) / "pybind11" / "stl.h").is_file() for p in cpp_extension.include_paths())
    assert preflight.TORCH_HEADERS == tuple(n for n in preflight.TORCH_HEADERS
                                            if any((Path(p) / n).is_dir() for p in cpp_extension.include_paths()))
    clone = clone_without_submodules(tmp_path, {"setup.py": PYBIND_SETUP, "csrc/ops.cpp": PYBIND_SOURCE},
                                     ("third_party/pybind11",))
    capsys.readouterr()  # torch's import says what it says
    preflight.preflight(target_of(clone))
    said = " ".join(capsys.readouterr().err.split())
    assert said.startswith("warning: the git submodule third_party/pybind11 is not checked out (its folder is "
                           "empty), though the build names it (setup.py line 1); every header the build includes "
                           "from it is on the build's include path elsewhere (<pybind11/pybind11.h> in torch's "
                           "headers; <pybind11/stl.h> in torch's headers), so the build goes on")
    # What the build cannot do without is still refused: CMake building pybind11's own project from the folder, a
    # header named by its path into it.
    for name, files, where in (
            ("cmake", {"setup.py": "import cmake\n", "CMakeLists.txt": "add_subdirectory(third_party/pybind11)\n",
                       "csrc/ops.cpp": PYBIND_SOURCE}, "CMakeLists.txt line 1"),
            ("path", {"setup.py": "", "csrc/ops.cpp": '#include "third_party/pybind11/include/pybind11/pybind11.h"\n'},
             "csrc/ops.cpp line 1 (#include third_party/pybind11/include/pybind11/pybind11.h)")):
        refused = clone_without_submodules(tmp_path / name, files, ("third_party/pybind11",))
        with pytest.raises(UsageError, match=rf"\(third_party/pybind11, named in {re.escape(where)}\)"):
            preflight.preflight(target_of(refused))




def test_cccl_from_the_toolkit_stands_in_for_an_empty_cub_submodule_in_a_cuda_build_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clone = clone_without_submodules(tmp_path, {"setup.py": "", "csrc/k.cu": "#include <cub/cub.cuh>\n"},
                                     ("third_party/cub",))
    target = target_of(clone)
    preflight.preflight(target)
    assert "<cub/cub.cuh> in the CUDA toolkit's headers" in " ".join(capsys.readouterr().err.split())
    with pytest.raises(UsageError, match=r"\(third_party/cub, named in csrc/k.cu line 1 \(#include cub/cub.cuh\)\)"):
        preflight.preflight(dataclasses.replace(target, cpu=True))


# --- architecture gates the farm cannot read (issue 45, item 7) ----------------------------------------------------


def test_a_gate_the_farm_cannot_read_is_a_warning_naming_the_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    source = ("#include <cuda_runtime.h>\nconstexpr int kMinArch = 890;\n"
              "__global__ void k(float* x) {\n#if __CUDA_ARCH__ >= kMinArch\n  x[0] = 1;\n#endif\n}\n")
    clone = clone_without_submodules(tmp_path, {"setup.py": "", "csrc/k.cu": source}, ())
    target = target_of(clone)
    preflight.preflight(target)
    preflight.preflight(target)  # said once
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("warning:") == 1 and said.startswith(
        "warning: the farm cannot read 1 use(s) of the GPU architecture in the sources the build compiles: "
        "csrc/k.cu:4 (#if __CUDA_ARCH__ >= kMinArch).")
    assert "cuda-archs or extra-cuda-archs" in said
    (clone / "csrc" / "k.cu").write_text(source.replace("kMinArch\n#", "890\n#"))
    preflight.check_gates(clone)
    assert capsys.readouterr().err == ""
