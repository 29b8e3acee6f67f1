"""The CUDA 12 half of a project whose kernel is gated on ``__CUDA_ARCH__ >= 890`` (tests/fixtures/arch_gated), built
in its cell's container (the cu124 stand-in of cu128 here: Debian trixie's CUDA 12.4), holds sm_89 SASS beside the
generation floors of ``older-majors-sass`` (7.0 8.0 9.0, PTX 9.0): cuobjdump reads it from the wheel, and the build's
audit checked the list. Without the gate the same half holds no sm_89 (tests/unit/universe/test_arch_gates.py).

Extended (``nox -s tests-extended``): the cu124 builder image (about 5 GB) and torch 2.10's CUDA volume (about 5 GB)
on a fresh machine; a few minutes once they exist.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci.audit.gpu_code import list_archs
from ci.linux import images
from ci.toolchain import toolkit
from ci.universe import matrix

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "arch_gated"

pytestmark = [pytest.mark.docker, pytest.mark.extended]


@pytest.fixture(scope="module")
def trixie_base() -> None:
    """The cell's Debian base (trixie), bootstrapped as tests/integration/test_containers.py bootstraps bookworm's:
    no registry here (``python -m ci base-image --suite trixie``; a no-op once the image exists)."""
    try:
        images.require_engine()
    except images.ImageError as exc:
        pytest.fail(f"needs a Docker engine: {exc}")
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (apt-get install debootstrap): it bootstraps the trixie base")
    done = subprocess.run([sys.executable, "-m", "ci", "base-image", "--suite", "trixie"], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.usefixtures("trixie_base")
def test_the_cuda_12_half_keeps_sm_89_for_the_gate(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    # --python: the abi3 wheel alone (built with the trixie base's Python), not the cell's free-threaded ones.
    done = subprocess.run([sys.executable, "-m", "ci", "build-cuda", "--cuda", "12.4", "--python",
                           matrix.DEBIAN_PYTHON["trixie"], "--project", str(FIXTURE),
                           "--wheelhouse", str(wheelhouse), "--build-dir", str(tmp_path / "build")], cwd=ROOT,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200",
                               "FARM_BASE_IMAGE": os.environ.get("FARM_BASE_IMAGE", images.BASE_REPO)})
    assert done.returncode == 0, done.stdout[-5000:]
    folder = wheelhouse / "arch_gated-stable-cu124-cp310abi3-linux_x86_64"
    report = json.loads((folder / "report.json").read_text())
    assert report["sass"] == ["sm_70", "sm_80", "sm_89", "sm_90"] and report["ptx"] == ["sm_90"]
    assert all(c["ok"] for c in report["checks"]), [c for c in report["checks"] if not c["ok"]]
    (wheel,) = folder.glob("arch_gated-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if n.startswith("arch_gated/_C_cuda")]
        zf.extract(member, tmp_path / "unpacked")
    sass, ptx = list_archs(toolkit.ensure_cuobjdump(), [tmp_path / "unpacked" / member])
    assert "sm_89" in sass and sass == ("sm_70", "sm_80", "sm_89", "sm_90") and ptx == ("sm_90",)
