"""A CUDA extension that links a toolkit library (cuBLAS), built by the installed command from its own folder:
without `toolkit-libraries` the link fails and the farm names the key; with it the wheel links libcublas from
the user's torch install and carries none of it (issue 19, fixture f)."""

from __future__ import annotations

import shutil
import zipfile

import pytest

from ci import wheelmeta
from tests.integration.test_fixture_projects import (
    FIXTURES,
    LOCAL,
    PYTHON,
    TORCH,
    Built,
    assert_every_check_passed,
    farm,
)

# Its own build environment and build: nox -s tests-extended.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


@pytest.fixture(scope="module")
def builds(farm_command: list[str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Built, Built]:
    root = tmp_path_factory.mktemp("cublas_ext")
    project = root / "cublas_ext"
    shutil.copytree(FIXTURES / "cublas_ext", project, ignore=shutil.ignore_patterns("__pycache__", "build"))
    pyproject = project / "pyproject.toml"
    configured = pyproject.read_text()
    pyproject.write_text(configured.replace('toolkit-libraries = ["cublas"]\n', ""))
    args = ["build", "--arch-list", "9.0", "--torch", TORCH, "--python", PYTHON,
            "--build-dir", str(root / "build")]
    without = Built(project, root / "wh-without", farm(farm_command, project, *args, "--wheelhouse",
                                                        str(root / "wh-without")))
    pyproject.write_text(configured)  # the same build folder: the second build only links again
    with_key = Built(project, root / "wheelhouse", farm(farm_command, project, *args, "--wheelhouse",
                                                       str(root / "wheelhouse")))
    return without, with_key


def test_a_missing_toolkit_library_names_the_key_that_adds_it(builds: tuple[Built, Built]) -> None:
    without = builds[0]
    assert without.result.returncode == 1, without.result.stdout[-3000:]
    assert "cannot find -lcublas" in without.result.stdout, without.result.stdout[-3000:]
    last = without.result.stdout.strip().splitlines()[-1]
    # The cause read from the build's output (ci/builds/failure/): the library, and the key that adds it.
    assert 'the linker cannot find a CUDA library (-lcublas): add toolkit-libraries = ["cublas"] to ' \
        "[tool.cuda-ext-farm]" in last, last
    assert not without.wheels


def test_the_wheel_links_cublas_from_torchs_install_and_carries_none(builds: tuple[Built, Built],
                                                                     farm_command: list[str]) -> None:
    built = builds[1]
    wheel = built.wheel
    assert wheel.name.startswith(f"cublas_ext-0.1.0{LOCAL}-cp311-cp311-manylinux_"), wheel.name
    checks = assert_every_check_passed(wheel, "needed", "bundled", "symbols", "cuda-code", "sass")
    assert "libcublas.so.13" in str(checks["needed"]["detail"])
    with zipfile.ZipFile(wheel) as zf:
        assert not [n for n in zf.namelist() if "libcublas" in n], "the repair grafted cuBLAS into the wheel"
    assert f"torch=={TORCH}.*" in wheelmeta.read_metadata(wheel)["Requires-Dist"]
    result = farm(farm_command, built.project, "test", "--torch", TORCH, "--python", PYTHON,
                  "--wheelhouse", str(built.wheelhouse))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "3 passed, 1 skipped" in result.stdout  # the GPU case skips here
