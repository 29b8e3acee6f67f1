"""A linux_aarch64 wheel built on this x86_64 machine and imported under qemu-user (ci/linux/cross.py,
ci/linux/qemu.py).

Real parts throughout: the cell's x86_64 nvcc with Debian's aarch64 cross g++, PyPI's aarch64 CUDA runtime and
torch 2.11 (GBs, installed once into the farm's cache), auditwheel's aarch64 repair, the audit (symbols resolved
against the aarch64 torch, SASS read by cuobjdump), and an arm64 Debian root run by qemu-aarch64. The classic
fixture from a copy outside the farm, one architecture (sm_90) to keep the compile short.
Extended: ``nox -s tests-extended`` (not CI: the downloads and the emulated import take minutes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci.linux import qemu

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"

pytestmark = [
    pytest.mark.extended,
    pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None,
                       reason="needs the aarch64 cross g++ (apt-get install g++-aarch64-linux-gnu)"),
    pytest.mark.skipif(not any(shutil.which(n) for n in qemu.QEMU_NAMES),
                       reason="needs qemu-user for aarch64 (apt-get install qemu-user-static)"),
]


def run_ci(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "ci", *args], cwd=cwd, text=True,
                            env={**os.environ, "COLUMNS": "250", "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert "Traceback" not in result.stdout, result.stdout[-4000:]
    return result


def test_classic_fixture_cross_builds_for_aarch64_and_imports_under_qemu(tmp_path: Path) -> None:
    project = tmp_path / "classic_ext"
    shutil.copytree(CLASSIC, project)
    common = ("--arch", "aarch64", "--torch", "2.11", "--python", qemu.ROOT_PYTHON)
    built = run_ci(project, "build", *common, "--arch-list", "9.0")
    assert built.returncode == 0, built.stdout[-6000:]
    (wheel,) = sorted((project / "wheelhouse").rglob("*.whl"))
    assert wheel.name.endswith("_aarch64.whl") and "+pt2.11.cu130" in wheel.name
    assert "checks passed" in built.stdout and "elf-machine" not in built.stdout.split("audit")[-1]
    with zipfile.ZipFile(wheel) as zf:
        libraries = [n for n in zf.namelist() if ".so" in n]
        assert libraries
        for name in libraries:
            zf.extract(name, tmp_path / "unpacked")
    for name in libraries:
        header = subprocess.run(["readelf", "-h", str(tmp_path / "unpacked" / name)], capture_output=True,
                                text=True, check=True).stdout
        assert "AArch64" in header, (name, header)
        assert "aarch64-linux-gnu" in name or name.endswith(".abi3.so")
    tested = run_ci(project, "test", *common)
    assert tested.returncode == 0, tested.stdout[-6000:]
    assert "import under qemu: aarch64 python" in tested.stdout
    # The smoke command's own output: the module from the unpacked wheel, compiled against and running on 2.11.
    assert "/wheel/classic_ext/__init__.py {'torch': '2.11.0'" in tested.stdout
    assert "'compiled_torch': '2.11.0'" in tested.stdout
