"""A real container build's compiles admitted, measured and recorded as on the host: tests/fixtures/many_kernels
in the CUDA 13.0 cell's image, every kernel file changed so that each compile misses the compile cache; the nvcc
wrapper in the container writes a line per compile (source, architectures, seconds, peak of its process tree)
into the work folder's record, and the build folds them into the farm's cache.

docker and extended (``nox -s tests-extended``): a whole container build.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from ci.builds.progress import records
from ci.linux import images
from ci.universe.project import reading
from tests.integration.test_containers import (  # noqa: F401 - base, image: the fixtures
    REASON,
    base,
    image,
    run_ci,
)

pytestmark = [pytest.mark.docker, pytest.mark.extended, pytest.mark.slow,
              pytest.mark.skipif(REASON is not None, reason=f"no Docker engine: {REASON}")]

ROOT = Path(__file__).resolve().parents[2]


def test_the_container_builds_compiles_are_recorded(image: str, tmp_path: Path) -> None:  # noqa: F811
    project = tmp_path / "many_kernels"
    shutil.copytree(ROOT / "tests" / "fixtures" / "many_kernels", project)
    run = uuid.uuid4().hex[:12]
    kernels = sorted((project / "csrc").glob("k*.cu"))
    for kernel in kernels:
        kernel.write_text(kernel.read_text() + f"\n__device__ int farm_run_{run}_{kernel.stem};\n")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '\n[tool.cuda-ext-farm.commands]\n'
                         'smoke = "python -c \'import torch, many_kernels\'"\n')
    build = tmp_path / "build"
    result = run_ci("build-cuda", "13.0", "--project", str(project), "--arch-list", "8.0;9.0", "--wheelhouse",
                    str(tmp_path / "wheelhouse"), "--build-dir", str(build),
                    env={"FARM_BASE_IMAGE": images.BASE_REPO, "FARM_CONTAINER_MEMORY": "4g"})
    said = result.stdout
    assert result.returncode == 0, said[-5000:]
    print("\n".join(line for line in said.splitlines() if "jobs x --threads" in line or "compiled " in line))
    assert any("(the container memory limit)" in line and "4.0 GiB available" in line for line in said.splitlines())
    found = list(build.glob(f"**/compiles/{records.RECORD}"))
    assert len(found) == 1, found
    lines = [json.loads(line) for line in found[0].read_text().splitlines()]
    cuda = {line["source"]: line for line in lines}
    assert {f"csrc/{k.name}" for k in kernels} <= set(cuda), sorted(cuda)
    for kernel in kernels:
        line = cuda[f"csrc/{kernel.name}"]
        # measured in the container: nvcc ran (a miss), two architectures, a peak of its tree of some MiB
        assert line["rc"] == 0 and line["compiled"] and line["archs"] == 2, line
        assert line["peak"] > 20 << 20 and line["seconds"] > 0, line
    kept = records.load(reading.load(project).name)
    assert all(kept[f"csrc/{k.name}"]["peak"] == cuda[f"csrc/{k.name}"]["peak"] for k in kernels)
    assert f"compiled {len(lines)}/" in said  # the line per finished compile
    assert said.count("slowest compiles (all ") == 1
    (written,) = (tmp_path / "wheelhouse").glob("*/report.json")
    reported = {c["source"]: c for c in json.loads(written.read_text())["compiles"]}
    assert all(reported[f"csrc/{k.name}"]["peak"] == cuda[f"csrc/{k.name}"]["peak"] for k in kernels)
