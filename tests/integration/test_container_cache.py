"""The container build's compile cache with sccache-dist, in the CUDA 13.0 cell's real image: a scheduler and one
build server on loopback (tests/integration/cache_servers.py), the farm pointed at them with FARM_SCCACHE_SCHEDULER
and FARM_SCCACHE_TOKEN, sccache in the container sending the device compiles to the build server. The same build
carries a project value with a double quote, a dollar sign and a backquote, which must reach setup.py unchanged.

docker and extended (``nox -s tests-extended``): a whole container build. Skipped with the reason where this
machine has no Docker engine or cannot sandbox the build server's compiles.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from ci.linux import images
from ci.toolchain.compiler_cache import sccache_server
from tests.integration import cache_servers
from tests.integration.test_containers import (  # noqa: F401 - base, image: the fixtures
    REASON,
    base,
    image,
    run_ci,
)

pytestmark = [pytest.mark.docker, pytest.mark.extended, pytest.mark.slow,
              pytest.mark.skipif(REASON is not None, reason=f"no Docker engine: {REASON}")]

ROOT = Path(__file__).resolve().parents[2]
#: What setup.py must see: a quote of either kind, a dollar sign, a backquote, a backslash (issue 45, 11).
ODD = 'say "hi" it\'s $HOME `id` C:\\x'


def many_kernels(folder: Path, run: str) -> Path:
    """The many_kernels fixture; its setup.py prints FARM_ODD, its build-env gives it the odd value, and each
    kernel file a device variable of this run: every part of every compile misses sccache's local cache in the
    ccache volume (sccache caches nvcc's device steps by their preprocessed code), so they go to the scheduler."""
    project = folder / "many_kernels"
    shutil.copytree(ROOT / "tests" / "fixtures" / "many_kernels", project)
    for kernel in (project / "csrc").glob("k*.cu"):
        kernel.write_text(kernel.read_text() + f"\n__device__ int farm_run_{run}_{kernel.stem};\n")
    setup = project / "setup.py"
    setup.write_text("import os\nprint('farm-odd:', repr(os.environ.get('FARM_ODD')), flush=True)\n"
                     + setup.read_text())
    toml = ODD.replace("\\", "\\\\").replace('"', '\\"')
    pyproject = project / "pyproject.toml"
    # torch first: it loads the CUDA runtime the library needs (the fixture's own smoke is for the host route).
    pyproject.write_text(pyproject.read_text() + f'\n[tool.cuda-ext-farm.build-env]\nFARM_ODD = "{toml}"\n\n'
                         '[tool.cuda-ext-farm.commands]\n'
                         'smoke = "python -c \'import torch, many_kernels\'"\n')
    return project


def test_the_container_sends_its_device_compiles_to_the_scheduler(image: str, tmp_path: Path) -> None:  # noqa: F811
    dist = sccache_server.ensure_sccache().with_name("sccache-dist")
    project = many_kernels(tmp_path, uuid.uuid4().hex[:12])
    with cache_servers.sccache_dist(tmp_path / "dist", dist) as (url, token):
        result = run_ci("build-cuda", "13.0", "--project", str(project), "--arch-list", "9.0", "--wheelhouse",
                        str(tmp_path / "wheelhouse"), "--build-dir", str(tmp_path / "build"),
                        env={"FARM_BASE_IMAGE": images.BASE_REPO, "FARM_SCCACHE_SCHEDULER": url,
                             "FARM_SCCACHE_TOKEN": token})
    said = result.stdout
    assert result.returncode == 0, said[-5000:]
    assert f"farm-odd: {ODD!r}" in said
    assert token not in said  # passed into the container by name, on no command line
    assert not [line for line in said.splitlines() if "warning:" in line and "sccache" in line], said[-3000:]
    line = next(x for x in said.splitlines() if x.startswith("farm-compile-cache:"))
    figures = dict(item.split("=") for item in line.split()[1:])
    print(line)
    # 8 kernel files, one architecture: cudafe++, cicc and ptxas of each on the build server. The host compiles
    # run through the sysroot's wrapper script, which sccache cannot package: they stay in the container.
    assert int(figures["dist"]) == 8 * 3 and figures["misses_PTX"] == figures["misses_CUBIN"] == "8"
    assert len(list((tmp_path / "wheelhouse").glob("*/*.whl"))) == 1
