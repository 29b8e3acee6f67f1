"""The files a project's build backend reads (ci/builds/backend_files.py): CMake's commands as CMake reads them, and
the CMake files reachable from the top one."""

from __future__ import annotations

from pathlib import Path

from ci.builds import backend_files

CMAKE = """cmake_minimum_required(VERSION 3.18)  # set(CMAKE_CXX_STANDARD 11) in a comment
#[[ a bracket comment:
add_subdirectory(commented)
]]
set(FLAGS "-O3 ; (parens) # not a comment" [=[raw ) text]=])
target_compile_options(_C PRIVATE
  -Wall   # a comment between arguments
  $<$<COMPILE_LANGUAGE:CUDA>:--use_fast_math>)
if((A AND B) OR NOT C)
endif()
"""


def test_cmake_commands_as_cmake_reads_them() -> None:
    found = [(c.name, c.args, c.line) for c in backend_files.commands(CMAKE)]
    assert found == [
        ("cmake_minimum_required", ("VERSION", "3.18"), 1),
        ("set", ("FLAGS", "-O3 ; (parens) # not a comment", "raw ) text"), 5),
        ("target_compile_options", ("_C", "PRIVATE", "-Wall", "$<$<COMPILE_LANGUAGE:CUDA>:--use_fast_math>"), 6),
        ("if", ("(", "A", "AND", "B", ")", "OR", "NOT", "C"), 9),
        ("endif", (), 10),
    ]


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_cmake_files_reachable_from_the_top_one(tmp_path: Path) -> None:
    root = write(tmp_path, {
        "pyproject.toml": '[build-system]\nbuild-backend = "scikit_build_core.build"\n'
                          '[tool.scikit-build]\ncmake.source-dir = "cpp"\n',
        "setup.py": "",  # not read by scikit-build-core
        "cpp/CMakeLists.txt": "list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_SOURCE_DIR}/cmake)\ninclude(Flags)\n"
                              "include(${PROJECT_SOURCE_DIR}/cmake/extra.cmake)\nadd_subdirectory(kernels)\n"
                              "add_subdirectory(${SOME_VAR}/x)\nadd_subdirectory(../third_party/cutlass)\n"
                              "option(BUILD_EXAMPLES OFF)\nif(BUILD_EXAMPLES)\n  add_subdirectory(examples)\nendif()\n",
        "cpp/cmake/Flags.cmake": "", "cpp/cmake/extra.cmake": "", "cpp/kernels/CMakeLists.txt": "",
        "cpp/examples/CMakeLists.txt": "", "cpp/tests/CMakeLists.txt": "", "third_party/cutlass/CMakeLists.txt": "",
        "examples/CMakeLists.txt": "",
    })
    found = [(f.shown, f.conditional) for f in backend_files.build_files(root)]
    assert found == [("pyproject.toml", False), ("cpp/CMakeLists.txt", False), ("cpp/cmake/Flags.cmake", False),
                     ("cpp/cmake/extra.cmake", False), ("cpp/examples/CMakeLists.txt", True),
                     ("cpp/kernels/CMakeLists.txt", False)]


def test_setuptools_reads_setup_py_and_its_cmake_only_when_it_runs_cmake(tmp_path: Path) -> None:
    root = write(tmp_path, {"setup.py": "from setuptools import setup\nsetup()\n", "setup.cfg": "",
                            "CMakeLists.txt": "add_subdirectory(csrc)\n", "csrc/CMakeLists.txt": ""})
    assert [f.shown for f in backend_files.build_files(root)] == ["setup.py", "setup.cfg"]
    (root / "setup.py").write_text("import subprocess\nsubprocess.check_call(['cmake', '--build', 'build'])\n")
    assert [f.shown for f in backend_files.build_files(root)] == ["setup.py", "setup.cfg", "CMakeLists.txt",
                                                                 "csrc/CMakeLists.txt"]


def test_pyproject_is_read_for_the_backends_tables_alone(tmp_path: Path) -> None:
    text = ('[project]\nname = "p"\n[tool.ruff]\nexclude = ["third_party/x"]\n[tool.scikit-build]\n'
            'cmake.args = ["-DX=1"]\n# cmake.args = ["-DY=1"]\n')
    (tmp_path / "pyproject.toml").write_text(text)
    (file,) = backend_files.build_files(tmp_path)
    assert file.text().split("\n") == ["", 'name = "p"', "", "", "", 'cmake.args = ["-DX=1"]', ""]
