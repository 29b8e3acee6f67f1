"""A ``cp313-cp313t`` wheel of the classic fixture for torch 2.11 (CUDA 13.0), built by the installed
``cuda-ext-farm`` command as a user would (issue 48). On the host: the farm finds no free-threaded CPython and
builds one once (ci/toolchain/free_threaded.py), installs torch's cp313t wheel, builds, audits and import-tests the
wheel under the free-threaded interpreter. In the container (docker): the builder image's free-threaded stage and
cibuildwheel 3.x (ci/builds/free_threaded_cibw.py).

Two copies of the fixture: as it is (its pybind11 module declares nothing: the audit's ``gil:`` warning, and the
import re-enables the GIL), and with ``py::mod_gil_not_used()`` (no warning, the GIL stays disabled).

Real toolchain: the pinned CUDA 13.0 toolkit, torch 2.11's cp313t wheel, one architecture (sm_90). The first run
builds the interpreter (about 9 minutes on 2 shared cores), later ones reuse it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from ci import wheelmeta
from ci.linux import images
from tests.integration import engine
from tests.integration.test_fixture_projects import farm

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
TARGET = "classic_ext-torch2.11-cu130-cp313t-linux_x86_64"

pytestmark = [pytest.mark.slow, pytest.mark.extended,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the host route of Linux")]


def project_copy(folder: Path, declared: bool) -> Path:
    """The classic fixture, its python list naming 3.13t, and (``declared``) its module declaring that it needs
    no GIL."""
    shutil.copytree(CLASSIC, folder)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^python = .*$', 'python = ["3.12", "3.13t"]', pyproject.read_text()))
    if declared:
        ops = folder / "csrc" / "ops.cpp"
        text = ops.read_text()
        assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {" in text
        ops.write_text(text.replace("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {",
                                    "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m, py::mod_gil_not_used()) {"))
    return folder


@pytest.fixture(scope="module", params=[False, True], ids=["undeclared", "declared"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          farm_command: list[str]) -> dict[str, object]:
    declared: bool = request.param
    root = tmp_path_factory.mktemp("ft")
    project = project_copy(root / "classic", declared)
    common = ["--torch", "2.11", "--python", "3.13t", "--wheelhouse", str(root / "wheelhouse")]
    build = farm(farm_command, project, "build", *common, "--arch-list", "9.0", "--build-dir", str(root / "build"))
    assert build.returncode == 0, build.stdout[-5000:]
    test = farm(farm_command, project, "test", *common)
    assert test.returncode == 0, test.stdout[-5000:]
    (wheel,) = (root / "wheelhouse" / TARGET).glob("*.whl")
    report = json.loads((root / "wheelhouse" / TARGET / "report.json").read_text())
    return {"declared": declared, "wheel": wheel, "report": report, "build": build.stdout, "test": test.stdout}


def test_the_wheel_is_a_cp313t_one(built: dict[str, object]) -> None:
    wheel = built["wheel"]
    assert isinstance(wheel, Path)
    assert re.fullmatch(r"classic_ext-0\.3\.0\+pt2\.11\.cu130-cp313-cp313t-manylinux_2_\d+_x86_64\.whl", wheel.name)
    assert "torch==2.11.*" in wheelmeta.read_metadata(wheel)["Requires-Dist"]
    report = built["report"]
    assert isinstance(report, dict) and report["python"] == "3.13t"
    assert all(c["ok"] for c in report["checks"])  # the gil: check warns, never fails


def test_the_audit_warns_only_without_the_declaration(built: dict[str, object]) -> None:
    report = built["report"]
    assert isinstance(report, dict)
    (gil,) = [c for c in report["checks"] if c["name"].startswith("gil:")]
    if built["declared"]:
        assert not gil.get("warn") and "declares free-threading support" in gil["detail"]
    else:
        assert gil.get("warn") and "Py_mod_gil" in gil["detail"] and "py::mod_gil_not_used()" in gil["detail"]


def test_the_import_test_runs_free_threaded_and_reports_the_gil(built: dict[str, object]) -> None:
    out = str(built["test"])
    assert re.search(r"PYTHON_GIL=0 .*python", out)  # the project's commands ran with the GIL forced off
    if built["declared"]:
        assert "GIL: stayed disabled after importing classic_ext" in out, out[-3000:]
    else:
        assert "GIL: re-enabled by classic_ext._C when classic_ext was imported" in out, out[-3000:]


@pytest.mark.docker
def test_the_container_route_builds_and_import_tests_the_cp313t_wheel(farm_command: list[str], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """cu130's image on the bootstrapped Debian base (no registry here): its free-threaded stage's
    /opt/python/cp313-cp313t builds the wheel with cibuildwheel 3.x; the test command in the image runs the smoke
    command with PYTHON_GIL=0 and the probe says what the import did to the GIL."""
    engine.skip_without(base=engine.BOOKWORM)
    monkeypatch.setenv("FARM_BASE_IMAGE", images.BASE_REPO)
    base = farm(farm_command, tmp_path, "base-image", "--suite", "bookworm")
    assert base.returncode == 0, base.stdout[-3000:]
    project = project_copy(tmp_path / "classic", declared=False)
    result = farm(farm_command, project, "build-cuda", "--torch", "2.11", "--python", "3.13t", "--arch-list", "9.0",
                  "--wheelhouse", str(tmp_path / "wheelhouse"), "--build-dir", str(tmp_path / "build"))
    out = result.stdout
    assert result.returncode == 0, out[-5000:]
    (wheel,) = (tmp_path / "wheelhouse" / TARGET).glob("*.whl")
    assert re.fullmatch(r"classic_ext-0\.3\.0\+pt2\.11\.cu130-cp313-cp313t-manylinux_2_\d+_x86_64\.whl", wheel.name)
    assert "farm-gil-probe: " in out and '"free_threaded": true' in out, out[-5000:]
    report = json.loads((tmp_path / "wheelhouse" / TARGET / "report.json").read_text())
    assert all(c["ok"] for c in report["checks"]) and report["mode"] == "container"
