"""The container build's compile front and cache, in the CUDA 13.0 cell's real image:

* sccache-dist: a scheduler and one build server on loopback (tests/integration/cache_servers.py), the farm pointed
  at them with FARM_SCCACHE_SCHEDULER and FARM_SCCACHE_TOKEN, sccache in the container sending the device compiles
  to the build server. The same build carries a project value with a double quote, a dollar sign and a backquote,
  which must reach setup.py unchanged;
* a project that builds without ninja (tests/fixtures/setuptools_nvcc: torch runs ``CUDA_HOME/bin/nvcc``): its
  compile runs the nvcc wrapper and the image's ccache, as torch's ninja compiles do.

docker and extended (``nox -s tests-extended``): a whole container build. Skipped with the reason where this
machine has no Docker engine or cannot sandbox the build server's compiles.
"""

from __future__ import annotations

import re
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
from tests.integration.test_fixture_projects import copy_fixture

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


COMPILED = re.compile(r"^cuda-ext-farm nvcc: csrc/scale\.cu: (.*?); NVCC_APPEND_FLAGS: ", re.M)


def test_setuptools_own_compile_runs_the_wrapper_and_the_images_ccache(image: str, tmp_path: Path) -> None:  # noqa: F811
    """The landed container build ran the image's nvcc directly there: no wrapper line, no architecture decision,
    no ccache. A device variable of this run misses the shared ccache volume once; the second build hits, with
    the same bytes."""
    project = copy_fixture("setuptools_nvcc", tmp_path)
    kernel = project / "csrc" / "scale.cu"
    kernel.write_text(kernel.read_text() + f"\n__device__ int farm_run_{uuid.uuid4().hex[:12]};\n")
    said, wheels = [], []
    for run in ("first", "second"):
        result = run_ci("build-cuda", "13.0", "--project", str(project), "--arch-list", "8.0;9.0", "--wheelhouse",
                        str(tmp_path / run), "--build-dir", str(tmp_path / "build"),
                        env={"FARM_BASE_IMAGE": images.BASE_REPO})
        assert result.returncode == 0, result.stdout[-5000:]
        said.append(result.stdout)
        wheels.append(next((tmp_path / run).glob("*/*.whl")).read_bytes())
    assert re.search(r"^/tmp/farm-nvcc-front/bin/nvcc .* -c csrc/scale\.cu ", said[0], re.M), said[0][-4000:]
    farm_flags = "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90"
    assert COMPILED.findall(said[0]) == COMPILED.findall(said[1]) == [farm_flags]
    assert "farm-ccache-stats: hits=0 misses=1" in said[0] and "farm-ccache-stats: hits=1 misses=0" in said[1]
    assert wheels[0] == wheels[1]
