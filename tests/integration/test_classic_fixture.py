"""A second project, configured only in its own pyproject.toml: the classic (ATen + pybind11 + TORCH_LIBRARY) CUDA
extension of tests/fixtures/classic_ext, built by the farm on the host for two torch releases, audited, tested with
its own test command; and the broken fixtures, each failing the audit with its message.

Real toolchain: the pinned CUDA 13.0 toolkit, the CUDA builds of torch 2.11 and 2.13 in the farm's build
environments, auditwheel, one architecture (sm_90) to keep compile times short.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci import wheelmeta
from ci.toolchain import envs
from ci.universe import targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CLASSIC = FIXTURES / "classic_ext"
PYTHON = "3.11"
TORCHES = ("2.11", "2.13")

# Two torch releases' environments and builds (the newer one a second 4.7 GB torch): nox -s tests-extended;
# the default suite builds foreign projects through test_fixture_projects.py on one torch.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def run_ci(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, text=True,
                            env={**os.environ, "COLUMNS": "250", "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert "Traceback" not in result.stdout, result.stdout[-4000:]
    return result


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("classic")
    return {"wheelhouse": root / "wheelhouse", "build": root / "build"}


def build(dirs: dict[str, Path], fixture: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_ci("build", "--project", str(FIXTURES / fixture), "--arch-list", "9.0", "--python", PYTHON,
                  "--wheelhouse", str(dirs["wheelhouse"]), "--build-dir", str(dirs["build"]), *args)


def target_for(torch: str) -> targets.Target:
    return select(reading.load(CLASSIC), Selection(torch=torch, python=PYTHON))[0]


def build_env_python(torch: str) -> Path:
    return envs.target_env(target_for(torch)).python


@pytest.fixture(scope="module")
def classic_wheels(dirs: dict[str, Path]) -> dict[str, Path]:
    wheels = {}
    for torch in TORCHES:
        result = build(dirs, "classic_ext", "--torch", torch)
        assert result.returncode == 0, result.stdout[-5000:]
        target = target_for(torch)
        (wheel,) = (dirs["wheelhouse"] / target.id).glob("*.whl")
        wheels[torch] = wheel
    return wheels


def test_one_wheel_per_torch_release_pinned_to_it(classic_wheels: dict[str, Path]) -> None:
    for torch, wheel in classic_wheels.items():
        assert wheel.name.startswith(f"classic_ext-0.3.0+pt{torch}.cu130-cp311-cp311-manylinux_"), wheel.name
        assert f"torch=={torch}.*" in wheelmeta.read_metadata(wheel)["Requires-Dist"]
    # Both coexist on one index: different versions of one project.
    assert len({w.name for w in classic_wheels.values()}) == 2


def test_the_audit_proved_linking_and_symbols(classic_wheels: dict[str, Path]) -> None:
    from ci.builds import report

    for wheel in classic_wheels.values():
        rep = report.read_report(wheel.parent)
        assert rep is not None and rep["sha256"] == wheelmeta.sha256_file(wheel)
        checks = {c["name"].split(":")[0]: c for c in rep["checks"]}
        for name in ("symbols", "c10_cuda", "cuda-code", "cuda-runtime", "metadata", "needed", "sass"):
            assert checks[name]["ok"], checks[name]
        assert "libc10_cuda.so" in checks["needed"]["detail"]


def test_the_project_test_command_passes_in_a_clean_environment(classic_wheels: dict[str, Path],
                                                                dirs: dict[str, Path]) -> None:
    result = run_ci("test", "--project", str(CLASSIC), "--torch", "2.13", "--python", PYTHON,
                    "--wheelhouse", str(dirs["wheelhouse"]))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "No broken requirements found" in result.stdout
    assert "'cuda_kernels': True" in result.stdout and " passed" in result.stdout


def test_wheel_beside_another_torch_is_refused_never_an_undefined_symbol(classic_wheels: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    base = envs.PythonEnv(build_env_python("2.13").parent.parent)
    env = envs.test_env(base, tmp_path / "venv")
    # The resolver refuses: the 2.11 wheel requires torch==2.11.*, which this environment cannot have.
    resolved = subprocess.run([env.python, "-m", "pip", "install", "--no-index", str(classic_wheels["2.11"])],
                              capture_output=True, text=True, env={**os.environ, "PIP_CONSTRAINT": os.devnull})
    assert resolved.returncode != 0 and "torch==2.11" in resolved.stdout + resolved.stderr
    # Forced in anyway, the import says which torch it needs instead of failing with an undefined symbol.
    subprocess.run([env.python, "-m", "pip", "install", "--no-deps", "--quiet", str(classic_wheels["2.11"])],
                   check=True)
    imported = subprocess.run([env.python, "-c", "import classic_ext"], capture_output=True, text=True,
                              cwd=tmp_path)
    assert imported.returncode != 0
    assert "built against torch 2.11.0, but torch 2.13.0" in imported.stderr
    assert "undefined symbol" not in imported.stderr


def test_symbols_of_another_torch_release_fail_the_audit(classic_wheels: dict[str, Path]) -> None:
    result = run_ci("audit", str(classic_wheels["2.13"]), "--project", str(CLASSIC), "--torch", "2.11",
                    "--python", PYTHON, "--arch-list", "9.0", "--torch-env", str(build_env_python("2.11")))
    assert result.returncode == 4, result.stdout[-3000:]
    assert "FAIL symbols:classic_ext/_C" in result.stdout
    # The torch searched is named as its interpreter imports it, local label included ("2.11.0+cu130": the CUDA
    # build, whose libraries differ from the +cpu build's), as envs.torch_metadata has asked it since 5843281.
    searched = subprocess.run([build_env_python("2.11"), "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert searched.split("+")[0] == "2.11.0", searched
    assert f"defined nowhere in torch {searched}'s libraries" in result.stdout
    assert "built against another torch release" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("error: the wheel audit failed")


# The same audit check and advice are proven on every CI run by the cuda_if_available fixture with
# cuda-available-in-build = false (tests/integration/test_fixture_projects.py); this older broken fixture, whose
# table turns the key off too, runs with the extended suite.
@pytest.mark.extended
def test_library_without_cuda_code_fails_with_the_usual_cause(dirs: dict[str, Path]) -> None:
    result = build(dirs, "broken_no_cuda")
    assert result.returncode == 4, result.stdout[-3000:]
    assert "holds no CUDA code although this is a CUDA build (cu130)" in result.stdout
    assert "torch.cuda.is_available()" in result.stdout and "[tool.cuda-ext-farm] build-env" in result.stdout
    assert "cuda-available-in-build = false keeps that answer" in result.stdout
    assert not list((dirs["wheelhouse"]).glob("broken_no_cuda*/*.whl"))


def test_library_missing_c10_cuda_fails(dirs: dict[str, Path]) -> None:
    result = build(dirs, "broken_no_c10_cuda")
    assert result.returncode == 4, result.stdout[-3000:]
    assert "uses c10::cuda symbols (c10::cuda::getCurrentCUDAStream(signed char)) but libc10_cuda.so is not in " \
           "NEEDED" in result.stdout
    assert "is defined in libc10_cuda.so, which the library does not link" in result.stdout
    assert not list((dirs["wheelhouse"]).glob("broken_no_c10_cuda*/*.whl"))
