"""``test-requires`` and ``test-extras`` of [tool.cuda-ext-farm]: read and checked once (one line for a bad value),
and turned into what the clean test environment's one ``pip install`` gets (ci/testing/wheel_tests.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from ci.errors import UsageError
from ci.testing import wheel_tests
from ci.universe import project, targets
from ci.universe.project import reading


def write_project(folder: Path, table: str) -> project.ProjectConfig:
    (folder / "pyproject.toml").write_text(f'[project]\nname = "my-ext"\nversion = "1.0"\n\n'
                                           f"[tool.cuda-ext-farm]\n{table}")
    (folder / "setup.py").write_text("")
    return reading.load(folder)


def write_wheel(folder: Path, *extras: str) -> Path:
    wheel = folder / "my_ext-1.0-cp311-cp311-linux_x86_64.whl"
    meta = "Metadata-Version: 2.1\nName: my-ext\nVersion: 1.0\n" + "".join(f"Provides-Extra: {e}\n" for e in extras)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("my_ext-1.0.dist-info/METADATA", meta)
        zf.writestr("my_ext-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        zf.writestr("my_ext-1.0.dist-info/RECORD", "")
    return wheel


def test_the_keys_default_to_nothing(tmp_path: Path) -> None:
    config = write_project(tmp_path, "")
    assert (config.test_requires, config.test_extras) == ((), ())


def test_requirements_and_extras_are_read(tmp_path: Path) -> None:
    config = write_project(tmp_path, 'test-requires = ["pytest>=8", "numpy; python_version >= \'3.10\'"]\n'
                                     'test-extras = ["Test_Extra", "cuda"]\n')
    assert config.test_requires == ("pytest>=8", "numpy; python_version >= '3.10'")
    assert config.test_extras == ("test-extra", "cuda")


@pytest.mark.parametrize(("table", "line"), [
    ('test-requires = ["pytest numpy"]',
     "error: [tool.cuda-ext-farm] test-requires has an invalid requirement ('pytest numpy'): write one requirement "
     'per string, like test-requires = ["pytest>=8", "numpy"]'),
    ("test-requires = [3]",
     "error: [tool.cuda-ext-farm] test-requires must be a list of strings ([3]): write test-requires = [\"...\"]"),
    ('test-extras = ["[test]"]',
     "error: [tool.cuda-ext-farm] test-extras has a bad extra name ('[test]'): write the names of the wheel's "
     'extras, like test-extras = ["test"]'),
])
def test_a_bad_value_is_one_line(tmp_path: Path, table: str, line: str) -> None:
    with pytest.raises(UsageError) as err:
        write_project(tmp_path, table)
    assert err.value.line() == line


def test_the_install_holds_the_wheel_its_extras_and_the_requirements(tmp_path: Path) -> None:
    config = write_project(tmp_path, 'test-requires = ["pytest", "packaging>=22"]\ntest-extras = ["cuda"]\n')
    target = targets.targets_for(config)[0]
    wheel = write_wheel(tmp_path, "cuda", "test")
    # "bench" is not provided: left out (the implicit extras are used only where the wheel has them).
    assert wheel_tests.test_install(target, wheel, "test", "bench") == [f"{wheel}[cuda,test]", "pytest",
                                                                         "packaging>=22"]


def test_without_the_keys_the_wheel_alone_or_with_its_test_extra(tmp_path: Path) -> None:
    target = targets.targets_for(write_project(tmp_path, ""))[0]
    plain = write_wheel(tmp_path)
    assert wheel_tests.test_install(target, plain, "test") == [str(plain)]
    with_test = write_wheel(tmp_path, "test")
    assert wheel_tests.test_install(target, with_test, "test") == [f"{with_test}[test]"]


def test_an_extra_the_wheel_does_not_provide_is_one_line(tmp_path: Path) -> None:
    target = targets.targets_for(write_project(tmp_path, 'test-extras = ["gpu"]'))[0]
    with pytest.raises(UsageError) as err:
        wheel_tests.test_install(target, write_wheel(tmp_path, "test"), "test")
    assert err.value.line() == (
        "error: the wheel provides no extra 'gpu' (test-extras of [tool.cuda-ext-farm]) "
        "(my_ext-1.0-cp311-cp311-linux_x86_64.whl: test): add it to [project.optional-dependencies] or remove it "
        "from test-extras")
