"""A build that compiled nothing (ci/builds/failure/pure.py): the wheel it wrote holds no compiled library, because
the project's setup.py leaves ``ext_modules`` out unless a variable of its own is set. The build tail refuses such a
wheel before its repair, and a container build's output (cibuildwheel stops at a pure wheel) is read the same way;
both name the variables the setup.py decides ``ext_modules`` from, in the shapes public projects write. The real
build: tests/integration/test_first_hour_refusals.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from ci.builds import failure
from ci.builds.failure import pure
from ci.errors import CommandFailed, UsageError

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "ext_if_variable"
HEAD = ("import os\n\nfrom setuptools import setup\n"
        "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n\n")

#: (setup.py, the variables the line names, the example it gives) in the shapes public projects write.
SHAPES = [
    # tests/fixtures/ext_if_variable: the branch sets the list; a debug flag beside it is not a decision.
    ((FIXTURE / "setup.py").read_text(), 'MYEXT_BUILD_CUDA (compared with "1")', 'MYEXT_BUILD_CUDA = "1"'),
    # A name assigned from the variable, a conditional expression as setup()'s argument.
    (HEAD + 'BUILD_EXT = os.getenv("MYEXT_BUILD_EXT", "0") == "1"\n'
     'setup(ext_modules=[CUDAExtension("m._C", ["a.cu"])] if BUILD_EXT else [], cmdclass={"build_ext": '
     'BuildExtension})\n', 'MYEXT_BUILD_EXT (compared with "1")', 'MYEXT_BUILD_EXT = "1"'),
    # A function that returns the list early, under a `not`: the list is built when the variable is set.
    (HEAD + 'def get_extensions():\n    if not os.environ.get("WITH_CUDA_EXT"):\n        return []\n'
     '    return [CUDAExtension("m._C", ["a.cu"])]\n\n\nsetup(ext_modules=get_extensions())\n',
     "WITH_CUDA_EXT", 'WITH_CUDA_EXT = "1"'),
    # A helper that reads the variable its argument names, and setup()'s keywords in a dict.
    (HEAD + 'def _flag(name, default="0"):\n    return os.environ.get(name, default).strip().lower()\n\n\n'
     'kwargs = {}\nif _flag("MYEXT_COMPILE") in ("1", "true"):\n    kwargs["ext_modules"] = [CUDAExtension("m._C", '
     '["a.cu"])]\nsetup(name="m", **kwargs)\n', 'MYEXT_COMPILE (compared with "1")', 'MYEXT_COMPILE = "1"'),
    # A variable that skips the extension when set: named, but never given as the value to set.
    (HEAD + 'ext_modules = []\nif os.getenv("MYEXT_SKIP_CUDA_BUILD", "FALSE") != "TRUE":\n'
     '    ext_modules.append(CUDAExtension("m._C", ["a.cu"]))\nsetup(ext_modules=ext_modules)\n',
     'MYEXT_SKIP_CUDA_BUILD (compared with "TRUE")', None),
]


def wheel(folder: Path, name: str, members: dict[str, str]) -> Path:
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in members.items():
            zf.writestr(member, text)
    return path


PURE = {"myext/__init__.py": "", "myext-0.1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: myext\n"
        "Version: 0.1.0\n", "myext-0.1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n", "myext-0.1.0.dist-info/RECORD": ""}


@pytest.mark.parametrize(("script", "names", "example"), SHAPES, ids=["fixture", "name", "function", "helper", "skip"])
def test_a_wheel_with_no_compiled_library_names_the_variables_that_decide_ext_modules(
        tmp_path: Path, script: str, names: str, example: str | None) -> None:
    (tmp_path / "setup.py").write_text(script)
    built = wheel(tmp_path, "myext-0.1.0-py3-none-any.whl", PURE)
    with pytest.raises(UsageError) as err:
        pure.check_wheel(built, tmp_path, cpu=False)
    shown = f" (build-env = {{ {example} }})" if example else ""
    assert err.value.line() == (
        "error: the build wrote a pure-Python wheel with no compiled library (myext-0.1.0-py3-none-any.whl): setup.py "
        f"decides ext_modules from {names}: set the value that builds the extension in build-env of "
        f"[tool.cuda-ext-farm]{shown}, then build again; nothing was written to the wheelhouse")
    assert err.value.exit_code == 2
    # A CPU build's variables are cpu-env; a wheel that holds a library (Linux, Windows) goes on to its repair.
    with pytest.raises(UsageError, match=r"in cpu-env of \[tool.cuda-ext-farm\]"):
        pure.check_wheel(built, tmp_path, cpu=True)
    for library in ("myext/_C.cpython-311-x86_64-linux-gnu.so", "myext/_C.pyd", "myext.libs/libgomp-a34b3233.so.1"):
        pure.check_wheel(wheel(tmp_path, "myext-0.1.0-cp311-cp311-linux_x86_64.whl", {**PURE, library: "\x7fELF"}),
                         tmp_path, cpu=False)


def test_without_a_setup_py_or_a_variable_the_line_says_what_compiled_nothing(tmp_path: Path) -> None:
    built = wheel(tmp_path, "myext-0.1.0-py3-none-any.whl", PURE)
    with pytest.raises(UsageError, match=r"\(myext-0.1.0-py3-none-any.whl\): the project's build backend compiled "
                       r"nothing: give it the extension to compile"):
        pure.check_wheel(built, tmp_path, cpu=False)
    (tmp_path / "setup.py").write_text(HEAD + 'setup(name="myext", packages=["myext"])\n')
    with pytest.raises(UsageError, match=r"\): setup.py gave setup\(\) no ext_modules in this build"):
        pure.check_wheel(built, tmp_path, cpu=False)


#: What cibuildwheel prints when the build in the image wrote a pure wheel (cibuildwheel/errors.py, 4.3).
CIBUILDWHEEL = """\
Successfully built myext-0.1.0-py3-none-any.whl

cibuildwheel: error: Build failed because a pure Python wheel was generated.

If you intend to build a pure-Python wheel, you don't need
cibuildwheel - use `pip wheel .`, `pipx run build --wheel`, `uv
build --wheel`, etc. instead. You only need cibuildwheel if you
have compiled (not Python) code in your wheels making them depend
on the platform.
"""


def test_a_container_build_that_stopped_at_a_pure_wheel_names_the_variables(tmp_path: Path) -> None:
    general = CommandFailed("the container build of t failed", "exit status 1", "its output is above")
    explained = failure.explain(general, CIBUILDWHEEL, build="the container build of t", source="/project",
                                build_script=(FIXTURE / "setup.py").read_text())
    assert isinstance(explained, UsageError) and explained.exit_code == 2
    assert explained.line() == (
        "error: the container build of t failed: the build wrote a pure-Python wheel with no compiled library (Build "
        'failed because a pure Python wheel was generated): setup.py decides ext_modules from MYEXT_BUILD_CUDA '
        '(compared with "1"): set the value that builds the extension in build-env of [tool.cuda-ext-farm] '
        '(build-env = { MYEXT_BUILD_CUDA = "1" }), then build again; nothing was written to the wheelhouse')
