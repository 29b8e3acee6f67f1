"""``stable_shim``: a stable-ABI project of the shape found in the wild (setup.py with CppExtension and
py_limited_api, STABLE_TORCH_LIBRARY ops, a flat layout) that declares an unbounded ``torch``. Built by the installed
command from a copy outside the checkout (CPU builds, in the farm's cached torch 2.11 build environment), its wheel
says the torch its binary needs, whatever the project wrote:

* without ``TORCH_TARGET_VERSION`` the torch 2.11 headers it is built against use 2.11's shims (the float4/float8
  dtype handles behind ``scalar_type()``): ``torch>=2.11``;
* with ``TORCH_TARGET_VERSION`` 2.10 (``cpu-env``): ``torch>=2.10``, named by ``torch_library_impl``.

Either wheel loads under this environment's torch (2.13.0+cpu, above both floors) and runs its op.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_fixture_projects import Built, assert_every_check_passed, copy_fixture, farm

from ci import wheelmeta

pytestmark = pytest.mark.slow


def _build(command: list[str], root: Path, target_version: str | None) -> Built:
    folder = copy_fixture("stable_shim", root)
    if target_version:
        config = folder / "pyproject.toml"
        config.write_text(config.read_text().replace(
            'build-env = { STABLE_SHIM_TARGET = "" }', f'cpu-env = {{ STABLE_SHIM_TARGET = "{target_version}" }}'))
    result = farm(command, folder, "build", "--cpu", "--python", "3.11", "--wheelhouse", str(root / "wheelhouse"),
                  "--build-dir", str(root / "build"))
    return Built(folder, root / "wheelhouse", result)


def _document(wheel: Path) -> dict[str, object]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/cuda-ext-farm.json")]
        return dict(json.loads(zf.read(name)))


def _runs_under_this_torch(wheel: Path, tmp: Path) -> str:
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    code = "import torch, stable_shim; print(stable_shim.twice_plus_one(torch.arange(3.0)).tolist())"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp, text=True, capture_output=True,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.mark.parametrize(("target_version", "floor", "symbol"), [
    (None, "2.11", "torch_dtype_float4_e2m1fn_x2"),
    ("0x020a000000000000", "2.10", "torch_library_impl"),
])
def test_the_wheel_says_the_torch_its_binary_needs(farm_command: list[str], tmp_path: Path,
                                                    target_version: str | None, floor: str, symbol: str) -> None:
    built = _build(farm_command, tmp_path, target_version)
    wheel = built.wheel
    assert f"torch requirement torch>={floor}: the project said an unbounded torch" in " ".join(
        built.result.stdout.split())
    assert f"torch>={floor}" in wheelmeta.read_metadata(wheel)["Requires-Dist"]
    checks = assert_every_check_passed(wheel, "torch-range", "coverage-file")
    assert symbol in str(checks["torch-range"]["detail"])
    doc = _document(wheel)
    assert (doc["torch_floor"], doc["torch_floor_source"], doc["cuda"], doc["sass"]) == (floor, "binary", None, [])
    assert symbol in doc["torch_floor_symbols"]  # type: ignore[operator]
    assert _runs_under_this_torch(wheel, tmp_path) == "[1.0, 3.0, 5.0]"
