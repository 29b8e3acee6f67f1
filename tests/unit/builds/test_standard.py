"""The C++ standard per torch release: a project pinning an older one on every path of its build is refused before
its build, in one line; only the files the backend reads count, conditions are followed for each target (or warned
about), and ``cxx-standard-check = false`` turns the check off."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest

from ci.builds import standard
from ci.errors import UsageError
from ci.universe import matrix, targets
from ci.universe.project import reading
from ci.universe.targets import Target
from ci.universe.tomlvalues import ConfigError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _target(name: str, torch: str) -> targets.Target:
    config = reading.load(FIXTURES / name if name != "std17_ext" else _std17_ext())
    return next(t for t in targets.targets_for(config) if t.torch_minor == torch)


_STD17: Path | None = None


def _std17_ext() -> Path:
    """classic_ext with its C++ flags pinned to -std=c++17, as some extension projects write it (made once per test
    run in a temporary folder, rather than kept as a second copy of the fixture)."""
    global _STD17
    if _STD17 is None:
        folder = Path(tempfile.mkdtemp(prefix="farm-std17-")) / "std17_ext"
        shutil.copytree(FIXTURES / "classic_ext", folder, ignore=shutil.ignore_patterns("build", "__pycache__"))
        setup = folder / "setup.py"
        text = setup.read_text()
        assert '"cxx": ["-O3"]' in text
        setup.write_text(text.replace('"cxx": ["-O3"]', '"cxx": ["-O3", "-std=c++17"]'))
        pyproject = folder / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace('name = "classic-ext"', 'name = "std17-ext"'))
        _STD17 = folder
    return _STD17


def test_each_torch_release_carries_its_standard() -> None:
    assert matrix.get_torch("2.11").cxx == 17
    assert all(r.cxx == 20 for r in matrix.TORCH_RELEASES if r.minor not in ("2.8", "2.9", "2.10", "2.11"))
    assert _target("classic_ext", "2.13").cxx == 20
    assert _target("classic_ext", "2.13").as_dict()["cxx"] == 20


def test_a_cxx17_pin_is_refused_for_torch_2_13_in_one_line() -> None:
    target = _target("std17_ext", "2.13")
    with pytest.raises(UsageError) as caught:
        standard.check(target)
    line = caught.value.line()
    assert "\n" not in line
    assert line == (f"error: std17-ext pins C++17 with -std=c++17 in setup.py line 41, but torch 2.13's headers need "
                    f"C++20 ({target.id}): drop the flag (torch's cpp_extension passes -std=c++20 itself) or raise "
                    "it to C++20; or leave torch 2.13 out of [tool.cuda-ext-farm] torch; cxx-standard-check = false "
                    "there builds it as it is")


def test_the_same_project_is_accepted_for_torch_2_11() -> None:
    standard.check(_target("std17_ext", "2.11"))


def test_a_project_naming_no_standard_is_accepted() -> None:
    assert standard.scan(FIXTURES / "classic_ext") == []
    standard.check(_target("classic_ext", "2.13"))


@pytest.mark.parametrize(("text", "flag", "std"), [
    ('extra_compile_args={"cxx": ["-O3", "-std=c++17"]}', "-std=c++17", 17),
    ("nvcc_flags = ['--std=c++14', '-O3']", "--std=c++14", 14),
    ("flags = ['-std=gnu++1z']", "-std=gnu++1z", 17),
    ('cflags = ["/std:c++17"]', "/std:c++17", 17),
    ("set(CMAKE_CXX_STANDARD 17)", "CMAKE_CXX_STANDARD 17", 17),
    ('cmake.args = ["-DCMAKE_CUDA_STANDARD=17"]', "CMAKE_CUDA_STANDARD=17", 17),
    ('cmake.define = {CMAKE_CXX_STANDARD = "17"}', 'CMAKE_CXX_STANDARD = "17', 17),
    ("target_compile_features(_C PRIVATE cxx_std_17)", "cxx_std_17", 17),
    ("set_target_properties(_C PROPERTIES CXX_STANDARD 17)", "CXX_STANDARD 17", 17),
    ("flags = ['-std=c++20']", "-std=c++20", 20),
    ("flags = ['/std:c++latest']", "/std:c++latest", 99),
])
def test_the_scanner_finds_each_way_of_pinning_a_standard(text: str, flag: str, std: int) -> None:
    (pin,) = standard.scan_text(text, Path("setup.py"), "setup.py")
    assert (pin.flag, pin.std, pin.line) == (flag, std, 1)


def test_docstrings_and_comments_of_setup_py_pin_nothing() -> None:
    text = '"""Built with ``-std=c++17``."""\n# "-std=c++17" once\nargs = ["-O3"]  # not "-std=c++14"\n'
    assert standard.scan_text(text, Path("setup.py"), "setup.py") == []


@pytest.mark.parametrize("text", [
    "# extra_compile_args = ['-std=c++17']",
    "set(CMAKE_CXX_STANDARD_REQUIRED ON)",
    "'-std=c++' + str(version)",
    "flags = ['-stdlib=libc++']",
])
def test_the_scanner_ignores_what_pins_nothing(text: str) -> None:
    assert standard.scan_text(text, Path("CMakeLists.txt"), "CMakeLists.txt") == []


class _Untouched:
    """Outputs, a job or a console that no refused build may touch."""

    def __init__(self, **known: object) -> None:
        self.known = known

    def __getattr__(self, name: str) -> object:
        if name in self.__dict__.get("known", {}):
            return self.known[name]
        raise AssertionError(f"touched {name} before the refusal")


def test_host_container_and_build_all_refuse_before_anything_else() -> None:
    from ci.linux import buildall, container, host

    target = _target("std17_ext", "2.13")
    with pytest.raises(UsageError, match=r"pins C\+\+17 with -std=c\+\+17 in setup.py"):
        host.build(target, _Untouched())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"pins C\+\+17 with -std=c\+\+17 in setup.py"):
        container.build_in_container(_Untouched(target=target))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"pins C\+\+17 with -std=c\+\+17 in setup.py"):
        buildall.build_all((_target("std17_ext", "2.11"), target), _Untouched(),  # type: ignore[arg-type]
                           jobs=1, base_image=None, max_jobs=None)


# --- only what the backend reads, conditions followed for each target ---------------------------------------------

FARM_TABLE = '[tool.cuda-ext-farm]\ntorch = ["2.11", "2.13"]\npython = ["3.11"]\n'
SETUPTOOLS = '[build-system]\nrequires = ["setuptools", "torch"]\nbuild-backend = "setuptools.build_meta"\n'
SKBUILD = '[build-system]\nrequires = ["scikit-build-core", "torch"]\nbuild-backend = "scikit_build_core.build"\n'
TOP_CMAKE = "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES CXX)\nfind_package(Torch REQUIRED)\n"


def make(tmp_path: Path, files: dict[str, str], system: str = SETUPTOOLS, extra: str = "") -> dict[str, Target]:
    """A project of ``files`` with the given [build-system]: its targets by torch minor."""
    root = tmp_path / "p"
    for name, text in {"pyproject.toml": f'{system}[project]\nname = "p"\nversion = "1"\n{extra}{FARM_TABLE}',
                       **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return {t.torch_minor: t for t in targets.targets_for(reading.load(root)) if t.arch == "x86_64" and t.os == "linux"}


def outcome(target: Target, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """("refused: <line>" or "built", the warnings said)."""
    capsys.readouterr()
    try:
        standard.check(target)
        verdict = "built"
    except UsageError as exc:
        verdict = f"refused: {exc.line()}"
    return verdict, " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("flag", [
    '"-std=c++20" if TORCH_VERSION >= (2, 12) else "-std=c++17"',
    '"-std=c++17" if Version(torch.__version__) < Version("2.12") else "-std=c++20"',
    '"-std=c++17" if (TORCH_MAJOR, TORCH_MINOR) < (2, 12) else "-std=c++20"',
])
def test_a_flag_chosen_by_torchs_version_is_read_for_each_target(tmp_path: Path, flag: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    setup = ("import torch\nfrom packaging.version import Version\n"
             "TORCH_VERSION = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2])\n"
             "TORCH_MAJOR = int(torch.__version__.split('.')[0])\nTORCH_MINOR = int(torch.__version__.split('.')[1])\n"
             f"args = {{'cxx': ['-O3', {flag}]}}\n")
    chosen = make(tmp_path, {"setup.py": setup})
    assert outcome(chosen["2.13"], capsys) == ("built", "")
    assert outcome(chosen["2.11"], capsys) == ("built", "")
    # The same flags the other way round: torch 2.13 gets C++17 and is refused.
    flipped = make(tmp_path / "flipped", {"setup.py": setup.replace("c++20", "c++XX").replace("c++17", "c++20")
                                          .replace("c++XX", "c++17")})
    assert outcome(flipped["2.13"], capsys)[0].startswith("refused: error: p pins C++17 with -std=c++17 in setup.py")


def test_a_flag_under_a_condition_the_farm_cannot_read_is_a_warning(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    chosen = make(tmp_path, {"setup.py": "import os\nHAS_CXX20 = os.environ.get('CXX20') == '1'\n"
                                         "flags = ['-std=c++20' if HAS_CXX20 else '-std=c++17']\n"})
    verdict, said = outcome(chosen["2.13"], capsys)
    assert verdict == "built"
    assert said == ("warning: p passes -std=c++17 in setup.py line 3 when not HAS_CXX20 (a condition the farm cannot "
                    "read before the build), and torch 2.13's headers need C++20: if the build fails in torch's "
                    "headers, that flag is why (cxx-standard-check = false in [tool.cuda-ext-farm] silences this)")
    assert outcome(chosen["2.11"], capsys) == ("built", "")  # C++17 is torch 2.11's own


def test_the_same_old_flag_on_every_branch_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chosen = make(tmp_path, {"setup.py": "flags = ['/std:c++17' if IS_MSVC else '-std=c++17']\n"})
    assert outcome(chosen["2.13"], capsys)[0].startswith("refused: error: p pins C++17 with /std:c++17 in setup.py")


def test_a_platform_condition_is_read_for_the_targets_platform(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    chosen = make(tmp_path, {"setup.py": "import sys\nflags = ['/std:c++17'] if sys.platform == 'win32' else "
                                         "['-std=c++20']\n"})
    assert outcome(chosen["2.13"], capsys) == ("built", "")
    windows = dataclasses.replace(chosen["2.13"], os="windows")
    assert outcome(windows, capsys)[0].startswith("refused: error: p pins C++17 with /std:c++17 in setup.py line 2")


def test_cmake_files_count_when_the_top_file_reaches_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An examples/ tree nobody adds and a vendored library are not the build's; one added under an option is a
    warning; the extension's own folder is refused."""
    files = {
        "CMakeLists.txt": TOP_CMAKE + "add_subdirectory(third_party/fmt)\nif(BUILD_TESTS)\n  add_subdirectory(tests)\n"
                                      "endif()\n",
        "examples/cpp/CMakeLists.txt": "set(CMAKE_CXX_STANDARD 14)\n",
        "third_party/fmt/CMakeLists.txt": "set(CMAKE_CXX_STANDARD 11)\n",
        "tests/CMakeLists.txt": "set(CMAKE_CXX_STANDARD 17)\n",
    }
    chosen = make(tmp_path, files, SKBUILD)
    verdict, said = outcome(chosen["2.13"], capsys)
    assert verdict == "built"
    assert said.startswith("warning: p passes CMAKE_CXX_STANDARD 17 in tests/CMakeLists.txt line 1 when the if() that "
                           "adds this file (a condition")
    files["CMakeLists.txt"] += "add_subdirectory(csrc)\n"
    files["csrc/CMakeLists.txt"] = "target_compile_features(_C PRIVATE cxx_std_17)\n"
    verdict, _ = outcome(make(tmp_path / "2", files, SKBUILD)["2.13"], capsys)
    assert verdict.startswith("refused: error: p pins C++17 with cxx_std_17 in csrc/CMakeLists.txt line 1")


def test_cmake_conditions_on_torchs_version_and_a_default_standard(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    by_torch = TOP_CMAKE + ('if(Torch_VERSION VERSION_GREATER_EQUAL "2.12")\n  set(CMAKE_CXX_STANDARD 20)\n'
                            "else()\n  set(CMAKE_CXX_STANDARD 17)\nendif()\n")
    chosen = make(tmp_path, {"CMakeLists.txt": by_torch}, SKBUILD)
    assert outcome(chosen["2.13"], capsys) == ("built", "") and outcome(chosen["2.11"], capsys) == ("built", "")
    # A default the farm never overrides is the standard the build gets; one the project defines for CMake is not.
    default = TOP_CMAKE + "if(NOT CMAKE_CXX_STANDARD)\n  set(CMAKE_CXX_STANDARD 17)\nendif()\n"
    chosen = make(tmp_path / "2", {"CMakeLists.txt": default}, SKBUILD)
    assert outcome(chosen["2.13"], capsys)[0].startswith("refused: error: p pins C++17 with CMAKE_CXX_STANDARD 17")
    defined = make(tmp_path / "3", {"CMakeLists.txt": default}, SKBUILD,
                   '[tool.scikit-build]\ncmake.define = {CMAKE_CXX_STANDARD = "20"}\n')
    assert outcome(defined["2.13"], capsys) == ("built", "")


def test_setup_py_reads_cmake_files_only_when_it_runs_cmake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cmake = {"CMakeLists.txt": TOP_CMAKE + "set(CMAKE_CXX_STANDARD 17)\n"}
    plain = make(tmp_path, {"setup.py": "from setuptools import setup\nsetup()\n", **cmake})
    assert outcome(plain["2.13"], capsys) == ("built", "")
    runs = make(tmp_path / "2", {"setup.py": "import subprocess\nsubprocess.check_call(['cmake', '-S', '.'])\n",
                                 **cmake})
    assert outcome(runs["2.13"], capsys)[0].startswith("refused: error: p pins C++17 with CMAKE_CXX_STANDARD 17 in "
                                                       "CMakeLists.txt")


def test_other_tools_tables_of_pyproject_are_not_the_builds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chosen = make(tmp_path, {"setup.py": ""}, extra='[tool.clang-tidy]\nargs = ["-std=c++17"]\n'
                                                   '[tool.setuptools]\nzip-safe = false\n')
    assert outcome(chosen["2.13"], capsys) == ("built", "")


def test_the_key_turns_the_check_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {"setup.py": "args = ['-std=c++17', '-std=c++20' if X else '-std=c++14']\n"}
    assert outcome(make(tmp_path, files)["2.13"], capsys)[0].startswith("refused")
    off = make(tmp_path / "off", files, extra="")
    off_target = dataclasses.replace(off["2.13"], project=dataclasses.replace(off["2.13"].project,
                                                                              cxx_standard_check=False))
    assert outcome(off_target, capsys) == ("built", "")
    (tmp_path / "off" / "p" / "pyproject.toml").write_text(
        (tmp_path / "off" / "p" / "pyproject.toml").read_text() + "cxx-standard-check = false\n")
    assert reading.load(tmp_path / "off" / "p").cxx_standard_check is False
    (tmp_path / "off" / "p" / "pyproject.toml").write_text(
        (tmp_path / "off" / "p" / "pyproject.toml").read_text().replace("= false", '= "no"'))
    with pytest.raises(ConfigError, match="cxx-standard-check"):
        reading.load(tmp_path / "off" / "p")


# --- a flag named in a message or a sentence passes nothing (issue 45, item 9) ------------------------------------

@pytest.mark.parametrize(("path", "text"), [
    ("setup.py", 'print("needs -std=c++17")\n'),
    ("setup.py", 'import sys\nif sys.version_info < (3, 9):\n    raise RuntimeError("project needs -std=c++17")\n'),
    ("setup.py", 'import warnings\nwarnings.warn("building with -std=c++14 is not supported")\n'),
    ("setup.py", 'import logging\nlogging.getLogger(__name__).warning("-std=c++17 is required")\n'),
    ("setup.py", 'import sys\nsys.exit("error: -std=c++17 missing")\n'),
    ("setup.py", 'HELP = "Compile with -std=c++17 when your compiler defaults older"\n'),
    ("setup.py", 'assert True, "needs /std:c++17"\n'),
    ("CMakeLists.txt", 'message(STATUS "Building with -std=c++17")\nmessage(WARNING "-std=c++14 is too old")\n'),
    ("pyproject.toml", 'cmake.args = ["-DX=1"]  # not "-std=c++17": torch chooses\n'),
])
def test_a_flag_in_a_message_or_a_sentence_is_not_a_pin(path: str, text: str) -> None:
    assert standard.scan_text(text, Path(path), path) == []


#: Flags among flags, in the same kinds of file: each still pins.
AMONG_FLAGS = [("setup.py", 'flags = "-O3 -std=c++17"\n', "-std=c++17"),
               ("setup.py", 'nvcc = ["-x cu -std=c++14"]\n', "-std=c++14"),
               ("setup.py", 'os.environ["CXXFLAGS"] = "-std=c++17 -fPIC"\n', "-std=c++17"),
               ("CMakeLists.txt", "target_compile_options(_C PRIVATE -std=c++17)\n", "-std=c++17")]


def test_a_setup_py_that_only_talks_about_cxx17_builds_for_torch_2_13(tmp_path: Path) -> None:
    """classic_ext with a line that prints advice naming -std=c++17 builds for torch 2.13; a flag among flags
    still pins."""
    folder = tmp_path / "talks"
    shutil.copytree(FIXTURES / "classic_ext", folder, ignore=shutil.ignore_patterns("build", "__pycache__"))
    setup = folder / "setup.py"
    setup.write_text('print("old compilers: build with -std=c++17 by hand")\n' + setup.read_text())
    target = next(t for t in targets.targets_for(reading.load(folder)) if t.torch_minor == "2.13")
    standard.check(target)
    for path, text, flag in AMONG_FLAGS:
        assert [pin.flag for pin in standard.scan_text(text, Path(path), path)] == [flag], text
