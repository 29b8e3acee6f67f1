"""Projects in the shapes real extension projects take, each built by the farm from its own folder.

Every fixture under tests/fixtures/ is copied into pytest's tmp_path (outside the farm's checkout, outside
git) and the farm runs with that copy as its current folder:

* ``template_abi3``: the pytorch/extension-cpp template's shape: a flat layout (the package at the project
  root), ops registered with ``TORCH_LIBRARY`` only, ``py_limited_api=True`` with
  ``-DPy_LIMITED_API=0x03090000`` and ``bdist_wheel py_limited_api = "cp39"``: one cp39-abi3 wheel per torch,
  built with the Python the farm already has a build environment for.
* ``no_pyproject``: no pyproject.toml, ``import torch`` at the top of setup.py (buildable only without
  isolation), one top-level pybind11 module; configured with ``--config FILE`` from outside the project.
* ``cuda_if_available``: setup.py compiles CUDA only when ``torch.cuda.is_available()``: the farm's build sees
  True (``cuda-available-in-build``), so the unchanged project builds a wheel that holds CUDA code; with the key
  off the audit refuses the CPU-only library with its advice and publishes nothing; setup_fixed.py (the advice's
  fix: FORCE_CUDA, which the farm sets) decides on CUDA without the farm's answer.

Real toolchain, as in tests/integration/test_classic_fixture.py: the pinned CUDA 13.0 toolkit, torch 2.11 in the farm's
cached build environment for CPython 3.11 (so nothing new is downloaded), one architecture (sm_90).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci import wheelmeta
from ci.builds import report
from ci.toolchain import envs
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TORCH = "2.11"
PYTHON = "3.11"
LOCAL = "+pt2.11.cu130"

pytestmark = pytest.mark.slow


@dataclasses.dataclass
class Built:
    project: Path
    wheelhouse: Path
    result: subprocess.CompletedProcess[str]

    @property
    def wheels(self) -> list[Path]:
        return sorted(self.wheelhouse.glob("*/*.whl"))

    @property
    def wheel(self) -> Path:
        assert self.result.returncode == 0, self.result.stdout[-5000:]
        (wheel,) = self.wheels
        return wheel


def farm(command: list[str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed command (tests/conftest.py) with ``cwd`` (the project's copy) as the current folder."""
    result = subprocess.run([*command, *args], cwd=cwd, text=True, env={**os.environ, "COLUMNS": "250"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert "Traceback" not in result.stdout, result.stdout[-4000:]
    return result


def copy_fixture(name: str, dest: Path) -> Path:
    folder = dest / name
    shutil.copytree(FIXTURES / name, folder,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "wheelhouse"))
    return folder


def files_of(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts)


def build(command: list[str], folder: Path, wheelhouse: Path, *args: str) -> Built:
    result = farm(command, folder, "build", "--arch-list", "9.0", "--torch", TORCH,
                  "--python", PYTHON, "--wheelhouse", str(wheelhouse),
                  "--build-dir", str(wheelhouse.parent / "build"), *args)
    return Built(folder, wheelhouse, result)


def assert_every_check_passed(wheel: Path, *required: str) -> dict[str, dict[str, object]]:
    rep = report.read_report(wheel.parent)
    assert rep is not None and rep["sha256"] == wheelmeta.sha256_file(wheel)
    failed = [c for c in rep["checks"] if not c["ok"]]
    assert not failed, failed
    checks = {c["name"].split(":")[0]: c for c in rep["checks"]}
    for name in required:
        assert name in checks, sorted(checks)
    return checks


# -- template_abi3 -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("template_abi3")
    folder = copy_fixture("template_abi3", root)
    return build(farm_command, folder, root / "wheelhouse")


def test_template_builds_one_cp39_abi3_wheel_pinned_to_its_torch(template: Built) -> None:
    wheel = template.wheel
    assert wheel.name.startswith(f"template_abi3-0.1.0{LOCAL}-cp39-abi3-manylinux_"), wheel.name
    assert wheel.name.endswith("_x86_64.whl")
    assert f"torch=={TORCH}.*" in wheelmeta.read_metadata(wheel)["Requires-Dist"]
    with zipfile.ZipFile(wheel) as zf:
        assert "template_abi3/_C.abi3.so" in zf.namelist()


def test_template_audit_passed_with_the_limited_api(template: Built) -> None:
    checks = assert_every_check_passed(template.wheel, "wheel-tag", "module-suffix", "abi3audit", "cuda-code",
                                       "cuda-runtime", "c10_cuda", "symbols", "sass", "metadata")
    assert "cp39-abi3" in str(checks["wheel-tag"]["detail"])


def test_template_host_and_cuda_compiles_were_each_admitted_and_measured(template: Built) -> None:
    """The C++ source with torch's headers went through the host compilers' front (ci/nvcc/host_front.py) as the
    .cu through nvcc's: each measured (its compiler ran, a peak of its process tree) and in the report by kind."""
    rep = report.read_report(template.wheel.parent)
    assert rep is not None
    compiles = {c["source"]: c for c in rep["compiles"]}
    host = compiles["template_abi3/csrc/scaled_add.cpp"]
    device = compiles["template_abi3/csrc/cuda/scaled_add.cu"]
    assert host["kind"] == "host" and device["kind"] == "device", compiles
    assert host["archs"] == 1 and host["threads"] == 1
    # a compile-cache hit runs no compiler and says nothing of memory: only what ran carries a peak worth checking
    for line in (host, device):
        assert not line["compiled"] or line["peak"] > 100 << 20, line  # torch's headers: hundreds of MiB


def test_template_ops_run_on_the_cpu_from_the_installed_wheel(template: Built, tmp_path: Path) -> None:
    """The wheel in a clean environment, its own tests run from a folder outside the project: the flat
    layout's source package (no _C library in it) cannot shadow the installed one."""
    config = reading.load(template.project)
    target = select(config, Selection(torch=TORCH, python=PYTHON))[0]
    env = envs.test_env(envs.target_env(target), tmp_path / "venv")
    subprocess.run([env.python, "-m", "pip", "install", "--quiet", f"{template.wheel}[test]"], check=True,
                   env={**os.environ, "PIP_CONSTRAINT": os.devnull})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run([env.python, "-m", "pytest", str(template.project / "test"), "-q",
                             "-p", "no:cacheprovider"], cwd=elsewhere, text=True,
                            env={**os.environ, "PYTHONPATH": ""}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "3 passed" in result.stdout and "failed" not in result.stdout, result.stdout[-2000:]


def test_template_test_command_through_the_farm(template: Built, farm_command: list[str]) -> None:
    """The farm's own test subcommand, from the project's folder: smoke (import) and `pytest test`."""
    assert template.result.returncode == 0, template.result.stdout[-3000:]
    result = farm(farm_command, template.project, "test", "--torch", TORCH, "--python", PYTHON,
                  "--wheelhouse", str(template.wheelhouse))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "3 passed" in result.stdout


# -- no_pyproject ------------------------------------------------------------------------------------------

NO_PYPROJECT_CONFIG = """\
# The farm's table for a project that has no pyproject.toml, kept outside it.
name = "no-pyproject-ext"
torch = ["2.11"]
python = ["3.11"]

[commands]
# A top-level pybind11 module of a classic extension loads only after torch (libc10.so & co.).
smoke = "python -c 'import torch, no_pyproject_ext; print(no_pyproject_ext.has_cuda())'"
test = "pytest {project}/tests -q"
"""


@pytest.fixture(scope="module")
def no_pyproject(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("no_pyproject")
    folder = copy_fixture("no_pyproject", root)
    (root / "farm.toml").write_text(NO_PYPROJECT_CONFIG)
    assert not (folder / "pyproject.toml").exists()
    return build(farm_command, folder, root / "wheelhouse", "--config", "../farm.toml")


@pytest.mark.extended
def test_no_pyproject_builds_from_a_config_file_outside_the_project(no_pyproject: Built) -> None:
    wheel = no_pyproject.wheel
    assert wheel.name.startswith(f"no_pyproject_ext-1.2.0{LOCAL}-cp311-cp311-manylinux_"), wheel.name
    assert f"torch=={TORCH}.*" in wheelmeta.read_metadata(wheel)["Requires-Dist"]
    checks = assert_every_check_passed(wheel, "wheel-tag", "cuda-code", "cuda-runtime", "c10_cuda", "symbols",
                                       "needed", "sass", "metadata")
    assert "libc10_cuda.so" in str(checks["needed"]["detail"])
    # The farm wrote nothing into the project (no pyproject.toml, no build/, no egg-info, no wheelhouse/).
    assert files_of(no_pyproject.project) == files_of(FIXTURES / "no_pyproject")


@pytest.mark.extended
def test_no_pyproject_test_command_through_the_farm(no_pyproject: Built, farm_command: list[str]) -> None:
    assert no_pyproject.result.returncode == 0, no_pyproject.result.stdout[-3000:]
    result = farm(farm_command, no_pyproject.project, "test", "--config", "../farm.toml",
                  "--torch", TORCH, "--python", PYTHON, "--wheelhouse", str(no_pyproject.wheelhouse))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "No broken requirements found" in result.stdout
    assert "3 passed, 1 skipped" in result.stdout
    assert files_of(no_pyproject.project) == files_of(FIXTURES / "no_pyproject")


# -- cuda_if_available -------------------------------------------------------------------------------------


def build_cuda_if_available(command: list[str], root: Path, key: bool) -> Built:
    """The project as found (its setup.py asks torch.cuda.is_available()), with ``cuda-available-in-build`` as
    the farm has it by default, or turned off in the copy's table."""
    folder = copy_fixture("cuda_if_available", root)
    if not key:
        pyproject = folder / "pyproject.toml"
        text = pyproject.read_text()
        pyproject.write_text(text.replace("[tool.cuda-ext-farm]\n", "[tool.cuda-ext-farm]\n"
                                          "cuda-available-in-build = false\n", 1))
    return build(command, folder, root / "wheelhouse")


@pytest.fixture(scope="module")
def cuda_if_available(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_cuda_if_available(farm_command, tmp_path_factory.mktemp("cuda_if_available"), key=True)


@pytest.fixture(scope="module")
def cuda_if_available_key_off(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_cuda_if_available(farm_command, tmp_path_factory.mktemp("cuda_if_available_off"), key=False)


def test_cuda_only_if_a_gpu_is_visible_builds_a_wheel_with_cuda_code_as_it_comes(cuda_if_available: Built,
                                                                                 farm_command: list[str]) -> None:
    """The unchanged setup.py: the build saw torch.cuda.is_available() True (ci/buildsite/sitecustomize.py from
    the installed command), so its library holds the CUDA kernel; the farm's test step did not see it (its test
    skips the GPU case: torch.cuda.is_available() is False in the clean environment)."""
    built = cuda_if_available
    wheel = built.wheel
    assert wheel.name.startswith(f"cuda_if_available-0.2.0{LOCAL}-cp311-cp311-manylinux_"), wheel.name
    assert "torch.cuda.is_available() is True in this build" in built.result.stdout
    assert "cuda-available-in-build = false in [tool.cuda-ext-farm] gives torch's own answers" in built.result.stdout
    checks = assert_every_check_passed(wheel, "cuda-code", "cuda-runtime", "c10_cuda", "symbols", "sass", "ptx")
    assert "sm_90" in str(checks["sass"]["detail"])
    assert files_of(built.project) == files_of(FIXTURES / "cuda_if_available")  # setup.py as it came
    result = farm(farm_command, built.project, "test", "--torch", TORCH, "--python", PYTHON,
                  "--wheelhouse", str(built.wheelhouse))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "2 passed, 1 skipped" in result.stdout  # the CUDA kernel is registered; the GPU case skips here


def test_with_the_key_off_the_audit_refuses_the_cpu_only_library_with_the_advice(
        cuda_if_available_key_off: Built) -> None:
    off = cuda_if_available_key_off
    out = off.result.stdout
    assert off.result.returncode == 4, out[-3000:]
    assert "torch.cuda.is_available() is True in this build" not in out
    assert "cuda-code:cuda_if_available/_C" in out, out[-3000:]
    assert "holds no CUDA code although this is a CUDA build (cu130)" in out
    assert "decides on CUDA from torch.cuda.is_available(), which is False" in out
    assert "cuda-available-in-build = false keeps that answer: remove that line" in out
    assert "[tool.cuda-ext-farm] build-env" in out and "the farm sets FORCE_CUDA=1" in out  # setup_fixed.py's fix
    assert out.strip().splitlines()[-1].startswith("error: the wheel audit failed")
    assert not off.wheels and not list(off.wheelhouse.glob("*/report.json"))


DECIDE = """
import runpy, sys, setuptools
setuptools.setup = lambda **kw: print("sources:", *[s for e in kw["ext_modules"] for s in e.sources])
runpy.run_path(sys.argv[1], run_name="__main__")
"""


@pytest.mark.parametrize(("setup_py", "force_cuda", "cuda"), [
    ("setup.py", "1", False), ("setup_fixed.py", "1", True), ("setup_fixed.py", "0", False)])
def test_the_force_cuda_fix_decides_on_cuda_without_the_farms_answer(setup_py: str, force_cuda: str, cuda: bool,
                                                                     tmp_path: Path) -> None:
    """What the advice says for the key off (or another builder): setup_fixed.py also reads FORCE_CUDA, which the
    farm sets. Its decision alone, in a Python with the target's torch and no ci/buildsite (no compile)."""
    python = envs.target_env(select(reading.load(FIXTURES / "cuda_if_available"),
                                    Selection(torch=TORCH, python=PYTHON))[0]).python
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([python, "-c", DECIDE, setup_py], cwd=FIXTURES / "cuda_if_available", text=True,
                            env={**env, "FORCE_CUDA": force_cuda, "CUDA_HOME": str(tmp_path)},
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    sources = result.stdout.strip().splitlines()[-1]
    assert sources.startswith("sources: csrc/twice.cpp") and ("csrc/twice_cuda.cu" in sources) == cuda, sources
