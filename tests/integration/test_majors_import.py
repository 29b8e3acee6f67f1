"""fusedops' PyPI wheel across CUDA majors (``release pypi-wheel``) imported, without a GPU, under PyPI's torch 2.10.0
(a CUDA 12.8 build) and 2.11.0 (a CUDA 13.0 build): each loads its own major's ``_C_cuda`` (``_cuda12/`` or
``_cuda13/``), whose CUDA kernels register with the dispatcher (``libcudart.so.<MAJOR>`` comes from torch's
``nvidia-*`` wheels; a dlopen needs no GPU).

Each import runs in the major's cell image (the CUDA 12 half is the cu124 stand-in's: its libraries need that
Debian's glibc) with the torch volume its container build made (``cuda-ext-farm-torch-...``), PyPI's torch of the
target. The wheel: ``FARM_MAJORS_WHEEL``, else ``release pypi-wheel``'s default output; skipped without one.
Extended (``nox -s tests-extended``): a fresh machine downloads both torch releases (about 5 GB each).
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci.linux import buildall, container, images
from ci.release import majors
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.docker, pytest.mark.extended]

SCRIPT = """
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import fusedops
t2 = time.perf_counter()
import fusedops._C_cuda as m
info = fusedops.build_info()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "file": m.__file__,
                  "loaded": fusedops.cuda_kernels_available(), "reason": info["cuda_kernels_reason"],
                  "majors": info.get("cuda_majors"), "built_cuda": info.get("cuda"),
                  "cuda_kernel": torch._C._dispatch_has_kernel_for_dispatch_key("fusedops::round_ste", "CUDA"),
                  "round_ste": fusedops.round_ste(torch.tensor([0.5, 1.5, -1.7])).tolist(),
                  "torch_s": t1 - t0, "fusedops_s": t2 - t1}))
"""


def merged_wheel() -> Path:
    given = os.environ.get("FARM_MAJORS_WHEEL")
    found = [Path(given)] if given else sorted(Path.home().glob(".cache/cuda-ext-farm/build/fusedops/pypi-wheel/*.whl"))
    if not found or not found[-1].is_file():
        pytest.skip("no wheel across CUDA majors: run `python -m ci release pypi-wheel` or set FARM_MAJORS_WHEEL")
    return found[-1]


@pytest.mark.parametrize("major", [12, 13])
def test_the_wheel_loads_the_module_of_torchs_cuda_major(major: int, tmp_path: Path) -> None:
    wheel = merged_wheel()
    config = reading.load(ROOT)
    target = dict(zip(majors.major_targets(config), buildall.local_equivalents(
        tuple(majors.major_targets(config).values())), strict=True))[major]
    base = images.base_image_for(target.cell)
    python = images.image_python(base, target.cell)
    image = images.ensure_image(images.spec_for(target.cell, base))
    volume = container.torch_volume(target, python)
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    site.chmod(0o755)
    done = subprocess.run(
        [images.docker_cli(), "run", "--rm", f"--volume={volume}:/opt/farm-torch:ro", f"--volume={site}:/w:ro",
         "--env=PYTHONPATH=/w:/opt/farm-torch/site", "--workdir=/tmp", image,
         f"/opt/python/{images.python_tag(python)}/bin/python", "-c", SCRIPT],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"torch {found['torch']}: {found['file']}, import fusedops {found['fusedops_s']:.2f} s")
    assert found["torch"].startswith(target.torch) and found["cuda"].split(".")[0] == str(major)
    assert found["file"] == f"/w/fusedops/_cuda{major}/_C_cuda.abi3.so"
    assert found["loaded"] and found["reason"] == "loaded" and found["cuda_kernel"]
    assert found["majors"] == [12, 13] and found["built_cuda"].split(".")[0] == str(major)
    assert found["round_ste"] == [0.0, 2.0, -2.0]
