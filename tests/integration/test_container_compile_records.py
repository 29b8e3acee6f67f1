"""A real container build's compiles admitted, measured and recorded as on the host: tests/fixtures/many_kernels
in the CUDA 13.0 cell's image, every kernel file changed so that each compile misses the compile cache; the nvcc
wrapper in the container writes a line per compile (source, architectures, seconds, peak of its process tree)
into the work folder's record, and the build folds them into the farm's cache.

docker and extended (``nox -s tests-extended``): a whole container build.
"""

from __future__ import annotations

import json
import re
import shutil
import time
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


def many_kernels(folder: Path) -> tuple[Path, list[Path]]:
    """many_kernels with a device variable of a new run in each kernel file: every compile misses the compile
    cache the container route keeps in its volume."""
    project = folder / "many_kernels"
    shutil.copytree(ROOT / "tests" / "fixtures" / "many_kernels", project)
    mark(project, uuid.uuid4().hex[:12])
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '\n[tool.cuda-ext-farm.commands]\n'
                         'smoke = "python -c \'import torch, many_kernels\'"\n')
    return project, sorted((project / "csrc").glob("k*.cu"))


def mark(project: Path, run: str) -> None:
    for kernel in (project / "csrc").glob("k*.cu"):
        text = re.sub(r"\n__device__ int farm_run_\w+;\n", "", kernel.read_text())
        kernel.write_text(text + f"\n__device__ int farm_run_{run}_{kernel.stem};\n")


def test_the_container_builds_compiles_are_recorded(image: str, tmp_path: Path) -> None:  # noqa: F811
    project, kernels = many_kernels(tmp_path)
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


def container_build(project: Path, tmp_path: Path, wheelhouse: str,
                    *extra: str) -> tuple[str, int, list[dict[str, object]]]:
    """A container build in the same build folder; its output, status and the compiles its record holds."""
    build = tmp_path / "build"
    result = run_ci("build-cuda", "13.0", "--project", str(project), "--arch-list", "8.0;9.0", "--wheelhouse",
                    str(tmp_path / wheelhouse), "--build-dir", str(build), *extra,
                    env={"FARM_BASE_IMAGE": images.BASE_REPO, "MAX_JOBS": "2"})
    found = list(build.glob(f"**/compiles/{records.RECORD}"))
    lines = [json.loads(x) for x in found[0].read_text().splitlines()] if found else []
    return result.stdout, result.returncode, [x for x in lines if x["rc"] == 0]


def test_a_container_build_stopped_at_its_deadline_resumes_with_the_same_bytes(image: str,  # noqa: F811
                                                                              tmp_path: Path) -> None:
    """Records from a first build; then, sources changed (every compile misses), a build stopped at a deadline
    its records say the last compiles cannot meet exits 75 with its line; the same command resumes, compiling
    only what is missing (the two runs' compiles add up to one build's), and its wheel has the bytes of an
    uninterrupted build of the same sources (all compile-cache hits by then)."""
    project, kernels = many_kernels(tmp_path)
    started = time.time()
    said, code, first = container_build(project, tmp_path, "w0")
    assert code == 0, said[-4000:]
    longest = max(float(x["seconds"]) for x in first)  # type: ignore[arg-type]
    lead = min(float(x["end"]) - float(x["seconds"]) for x in first) - started  # type: ignore[arg-type]
    # The deadline counts from the command's start (resolved once at the entry): the first compiles (MAX_JOBS=2)
    # fit, the last ones not by their records. Eight compiles, two at once, are four waves of ``longest``: a
    # deadline 2.5 waves after the first build's lead leaves a wave of slack either way for the container's
    # start-up, which varies from build to build.
    seconds = int(lead + 2.5 * longest)
    mark(project, uuid.uuid4().hex[:12])
    said, code, stopped = container_build(project, tmp_path, "w2", "--deadline", f"{seconds}s")
    print("\n".join(x for x in said.splitlines() if "deadline" in x))
    assert code == 75, said[-4000:]
    assert len(re.findall(r"stopped at the deadline: \d+ of \d+ compiles done and cached; the same command resumes",
                          said)) == 1
    assert not list((tmp_path / "w2").glob("*/*.whl"))
    done = [str(x["source"]) for x in stopped if x["compiled"]]
    said, code, resumed = container_build(project, tmp_path, "w3")
    assert code == 0, said[-4000:]
    again = [str(x["source"]) for x in resumed if x["compiled"]]
    assert 0 < len(done) < len(kernels)
    assert sorted(done + again) == sorted(f"csrc/{k.name}" for k in kernels)  # none twice, none left out
    said, code, whole = container_build(project, tmp_path, "w4")
    assert code == 0, said[-4000:]
    assert not [x for x in whole if x["compiled"]]  # all hits: the same objects
    (wheel,) = (tmp_path / "w3").glob("*/*.whl")
    (uninterrupted,) = (tmp_path / "w4").glob("*/*.whl")
    assert wheel.read_bytes() == uninterrupted.read_bytes()
