"""What the preflight refuses of a project that cannot build the wheel it asks for (ci/builds/preflight.py), before
anything is installed: a folder nothing in it compiles (a pyproject.toml and no setup.py nor backend that compiles),
and a stable-ABI project whose compiled sources are a classic pybind11 extension. Each ends in one line naming the
cause, the value and the fix; the shapes that do build pass. The command line's end of it:
tests/integration/test_first_hour_refusals.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ci.builds import preflight
from ci.errors import UsageError
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
TABLE = '[project]\nname = "myext"\nversion = "0.1.0"\n\n[tool.cuda-ext-farm]\ntorch = ["2.13"]\npython = ["3.11"]\n'
OPS = '#include <torch/extension.h>\n\n__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n'
SETUPTOOLS = '[build-system]\nrequires = ["setuptools", "torch"]\nbuild-backend = "setuptools.build_meta"\n\n'


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "myext"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def target_of(root: Path) -> targets.Target:
    return next(t for t in targets.targets_for(reading.load(root)) if t.os == "linux" and t.arch == "x86_64")


FIX = ('add a setup.py that compiles it: setup(ext_modules=[CUDAExtension("myext._C", ["csrc/ops.cu"])], '
       'cmdclass={"build_ext": BuildExtension}) with torch.utils.cpp_extension; or build with CMake '
       '(build-backend = "scikit_build_core.build" and a CMakeLists.txt)')


@pytest.mark.parametrize(("system", "value"), [
    ("", "no setup.py, and pyproject.toml names no build backend"),
    (SETUPTOOLS, "no setup.py, and the build backend setuptools.build_meta has no [tool.setuptools] ext-modules"),
    ('[build-system]\nrequires = ["flit_core>=3.9"]\nbuild-backend = "flit_core.buildapi"\n\n',
     "the build backend flit_core.buildapi writes pure-Python wheels only"),
])
def test_a_folder_nothing_compiles_in_is_refused_in_one_line(tmp_path: Path, system: str, value: str) -> None:
    root = project(tmp_path, {"pyproject.toml": system + TABLE, "csrc/ops.cu": OPS})
    with pytest.raises(UsageError) as err:
        preflight.preflight(target_of(root))
    assert err.value.line() == f"error: nothing in the project folder compiles an extension ({value}): {FIX}"
    assert err.value.exit_code == 2
    # What does compile is left to build: a setup.py, setuptools' own ext-modules, an in-tree or a CMake backend.
    compiles = (
        {"setup.py": "from setuptools import setup\nsetup()\n"},
        {"pyproject.toml": SETUPTOOLS + TABLE + '[[tool.setuptools.ext-modules]]\nname = "myext._C"\n'
         'sources = ["csrc/ops.cpp"]\n'},
        {"pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
         + TABLE},
        {"pyproject.toml": '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = '
         '"scikit_build_core.build"\n\n' + TABLE})
    for i, extra in enumerate(compiles):
        other = project(tmp_path / str(i), {"pyproject.toml": system + TABLE, "csrc/ops.cu": OPS, **extra})
        preflight.check_backend(other, ["csrc/ops.cu", *extra], "myext")


def test_a_jit_only_project_is_pointed_at_the_jit_command(tmp_path: Path) -> None:
    """tests/fixtures/jit_only compiles when its package is imported (torch.utils.cpp_extension.load): no wheel."""
    root = tmp_path / "jit_only"
    shutil.copytree(FIXTURES / "jit_only", root)
    with pytest.raises(UsageError) as err:
        preflight.preflight(target_of(root))
    assert err.value.value == "no setup.py, and pyproject.toml names no build backend"
    assert err.value.fix.endswith(
        "; a project that compiles when it is imported (torch.utils.cpp_extension.load in jit_round/__init__.py) has "
        "no wheel to build: run its commands with `python -m ci jit -- COMMAND`")


STABLE = SETUPTOOLS + TABLE.replace("[tool.cuda-ext-farm]\n", '[tool.cuda-ext-farm]\nabi = "stable"\n')
STABLE_SETUP = ('from setuptools import setup\nfrom torch.utils.cpp_extension import BuildExtension, CppExtension\n\n'
                'setup(ext_modules=[CppExtension("myext._C", ["csrc/ops.cpp"], py_limited_api=True)],\n'
                '      cmdclass={"build_ext": BuildExtension}, options={"bdist_wheel": {"py_limited_api": "cp310"}})\n')
PYBIND = ('#include <pybind11/pybind11.h>\n\nint twice(int x) { return 2 * x; }\n\n'
          'PYBIND11_MODULE(_C, m) { m.def("twice", &twice); }\n')
STABLE_OPS = ('#include <torch/csrc/stable/library.h>\n#include <torch/csrc/stable/tensor.h>\n\n'
              'STABLE_TORCH_LIBRARY(myext, m) { m.def("twice(Tensor x) -> Tensor"); }\n')
CLASSIC_FIX = (
    "a stable-ABI wheel serves every torch from one build, and pybind11 or torch/extension.h code is bound to one "
    'torch and one CPython: set abi = "classic" in [tool.cuda-ext-farm] (a wheel per torch and Python), or port the '
    "sources to torch's stable ABI headers (torch/csrc/stable/library.h: STABLE_TORCH_LIBRARY; "
    "torch/csrc/stable/tensor.h)")


@pytest.mark.parametrize(("sources", "value"), [
    ({"csrc/ops.cpp": PYBIND}, "csrc/ops.cpp line 1: #include <pybind11/pybind11.h>"),
    # Through a header of the project, from a source under a folder the setup.py names.
    ({"csrc/ops.cpp": '#include "common.h"\n', "csrc/common.h": "#pragma once\n#include <torch/extension.h>\n",
      "csrc/cuda/k.cu": '#include "../common.h"\n#include <pybind11/pybind11.h>\n'},
     "csrc/common.h line 2: #include <torch/extension.h>; and 1 more"),
])
def test_a_stable_project_whose_sources_are_a_classic_extension_is_refused(
        tmp_path: Path, sources: dict[str, str], value: str, capsys: pytest.CaptureFixture[str]) -> None:
    setup = STABLE_SETUP if "csrc/cuda/k.cu" not in sources else "import glob\nimport os\n" + STABLE_SETUP.replace(
        '["csrc/ops.cpp"]', '["csrc/ops.cpp", *glob.glob(os.path.join("csrc", "cuda", "*.cu"))]')
    root = project(tmp_path, {"pyproject.toml": STABLE, "setup.py": setup, **sources})
    with pytest.raises(UsageError) as err:
        preflight.preflight(target_of(root))
    assert err.value.line() == (f'error: abi = "stable" but a source the build compiles includes a classic '
                                f"extension's header ({value}): {CLASSIC_FIX}")
    # Not refused: the same sources as a classic project; a stable project whose pybind11 file is a test helper the
    # build does not compile; one that includes torch/extension.h only where a macro of its own says so.
    preflight.preflight(target_of(project(tmp_path / "classic", {
        "pyproject.toml": STABLE.replace('abi = "stable"', 'abi = "classic"'), "setup.py": setup, **sources})))
    preflight.preflight(target_of(project(tmp_path / "helper", {
        "pyproject.toml": STABLE, "setup.py": STABLE_SETUP, "csrc/ops.cpp": STABLE_OPS, "tests/helper.cpp": PYBIND})))
    capsys.readouterr()
    preflight.preflight(target_of(project(tmp_path / "either", {
        "pyproject.toml": STABLE, "setup.py": STABLE_SETUP, "csrc/ops.cpp": (
            "#ifndef MYEXT_H\n#define MYEXT_H\n#ifdef MYEXT_CLASSIC\n#include <torch/extension.h>\n#else\n"
            + STABLE_OPS + "#endif\n#endif\n")})))
    said = " ".join(capsys.readouterr().err.split())
    assert 'abi = "stable", and csrc/ops.cpp line 4: #include <torch/extension.h> is under a preprocessor ' \
        "condition" in said, said
    for name in ("stable_shim", "arch_gated"):  # the farm's own stable-ABI fixtures
        shutil.copytree(FIXTURES / name, tmp_path / name)
        preflight.preflight(target_of(tmp_path / name))
