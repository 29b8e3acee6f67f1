"""The C++ standard per torch release: a project pinning an older one is refused before its build, in one line."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from ci.builds import standard
from ci.errors import UsageError
from ci.universe import matrix, project, targets

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _target(name: str, torch: str) -> targets.Target:
    config = project.load(FIXTURES / name if name != "std17_ext" else _std17_ext())
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
                    "it to C++20; or leave torch 2.13 out of [tool.cuda-ext-farm] torch")


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


def test_cmake_files_below_the_project_count_and_vendored_ones_do_not(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.26)\n"
                                                      "set(CMAKE_CXX_STANDARD 17)\n")
    (tmp_path / "third_party" / "cutlass").mkdir(parents=True)
    (tmp_path / "third_party" / "cutlass" / "CMakeLists.txt").write_text("set(CMAKE_CXX_STANDARD 14)\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "deps.cmake").write_text("set(CMAKE_CXX_STANDARD 11)\n")
    (tmp_path / "pyproject.toml").write_text('[tool.scikit-build]\ncmake.define = {CMAKE_CXX_STANDARD = "20"}\n')
    found = standard.scan(tmp_path)
    assert [str(p) for p in found] == ['CMAKE_CXX_STANDARD = "20 in pyproject.toml line 2',
                                       "CMAKE_CXX_STANDARD 17 in csrc/CMakeLists.txt line 2"]
    assert [str(p) for p in standard.older_pins(tmp_path, 20)] == ["CMAKE_CXX_STANDARD 17 in csrc/CMakeLists.txt "
                                                                   "line 2"]


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
