"""The compile front on the container route (ci/linux/container_compiles.py): the variables and mounts of
cibuildwheel's container that make its compiles admitted, measured, recorded and held to the deadline as on the
host, MAX_JOBS and --threads chosen against the container's memory limit, and the records folded in around the
build (no engine needed; the real container build is tests/integration/test_container_compile_records.py)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from cibuildwheel.environment import parse_environment

from ci import errors
from ci.builds import arch_flags, tail
from ci.builds.progress import deadline, plan, records
from ci.linux import container as wheels
from ci.linux import container_compiles, images
from ci.nvcc import admission
from ci.nvcc.admission import memory, need
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30


def job_for(target: targets.Target, tmp_path: Path) -> wheels.ContainerBuild:
    spec = images.spec_for(target.cell, f"{images.BASE_REPO}:bookworm")
    outputs = tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "build")
    return wheels.ContainerBuild(target=target, spec=spec, image=spec.tag, outputs=outputs, job="job1")


def container_env(job: wheels.ContainerBuild) -> tuple[dict[str, str], str]:
    python = wheels.build_python(job.target, job.spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(job.target, python), None)
    seen = parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary({"PATH": "/usr/bin"})
    return seen, env["CIBW_CONTAINER_ENGINE"]


def record_project(cache: Path, project: str, peak: int, archs: int) -> None:
    """A measured earlier build in the farm's cache: one source, ``peak`` bytes with every architecture at once."""
    path = records.cache_file(project, cache)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"sources": {"csrc/a.cu": {"peak": peak, "seconds": 40.0, "archs": archs,
                                                          "threads": 0}}}))


def test_the_container_build_is_recorded_held_to_its_deadline_and_sized_to_its_memory_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The landed container route passed none of the compile front's variables (its compiles went unmeasured and
    unrecorded, no deadline held them) and MAX_JOBS was the core count whatever the memory."""
    target = targets.default_target(reading.load(ROOT))
    archs = len(arch_flags.torch_arch_flags(arch_flags.arch_list_of(target)))
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    record_project(tmp_path / "cache", target.project.name, 5 * GIB, archs)  # 5 GiB with --threads 0
    monkeypatch.setenv("FARM_CONTAINER_MEMORY", "6g")
    monkeypatch.setenv("FARM_DEADLINE", "2h")
    monkeypatch.setattr(container_compiles.os, "cpu_count", lambda: 8)
    job = job_for(target, tmp_path)
    before = time.time()
    seen, engine = container_env(job)
    assert seen[admission.RECORD] == f"{container_compiles.MOUNT}/{records.RECORD}"
    assert seen[admission.EXPECTED] == f"{container_compiles.MOUNT}/{records.EXPECTED}"
    assert seen[admission.ROOT] == "/project"
    assert before + 7200 - 5 <= float(seen[admission.DEADLINE]) <= time.time() + 7200 + 5
    assert f"--volume={job.outputs.work_dir(target) / 'compiles'}:{container_compiles.MOUNT}" in engine.split()
    assert "--memory=6g" in engine.split() and "--memory-swap=6g" in engine.split()
    chosen = plan.choose(8, 6 * GIB, 5 * GIB / need.parallel(archs, 0, 8), archs, None)
    assert int(seen["MAX_JOBS"]) == chosen.jobs < 8
    each = 5 * GIB / need.parallel(archs, 0, 8) * need.parallel(archs, int(seen[admission.THREADS]), 8)
    assert int(seen["MAX_JOBS"]) * each <= 6 * GIB


def test_without_a_limit_the_hosts_memory_counts_and_the_users_max_jobs_and_project_build_env_win(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = targets.default_target(reading.load(ROOT))
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FARM_CONTAINER_MEMORY", raising=False)
    monkeypatch.delenv("FARM_DEADLINE", raising=False)
    monkeypatch.setattr(container_compiles.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(memory, "available", lambda: 64 * GIB)
    seen, engine = container_env(job_for(target, tmp_path))
    assert seen["MAX_JOBS"] == "8" and admission.THREADS not in seen and admission.DEADLINE not in seen
    assert "--memory" not in engine
    seen, _ = container_env(dataclasses.replace(job_for(target, tmp_path), max_jobs=3))
    assert seen["MAX_JOBS"] == "3"
    own = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, "MAX_JOBS": "2"}))
    assert container_env(job_for(own, tmp_path))[0]["MAX_JOBS"] == "2"


@pytest.mark.parametrize(("args", "expected"), [
    (["--memory=6g"], 6 * GIB), (["-m", "512m"], 512 << 20), (["--memory", "1.5g"], int(1.5 * GIB)),
    (["--volume=a:b"], None)])
def test_memory_limit_reads_dockers_units(args: list[str], expected: int | None) -> None:
    assert container_compiles.memory_limit(args) == expected


def test_a_memory_limit_that_is_not_an_amount_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CONTAINER_MEMORY", "lots")
    with pytest.raises(errors.UsageError) as info:
        container_compiles.memory_args()
    assert info.value.line() == ("error: FARM_CONTAINER_MEMORY is not an amount of memory ('lots'): give docker's "
                                 "form: 6g, 6144m")


def test_the_records_are_prepared_before_and_folded_in_after_and_the_deadline_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the wrapper in the container writes into the mounted folder reaches the farm's cache; a build that
    fails after the wrapper refused a compile at the deadline stops with status 75 and the deadline's line."""
    target = targets.default_target(reading.load(ROOT))
    cache = tmp_path / "cache"
    monkeypatch.setenv("FARM_CACHE_DIR", str(cache))
    record_project(cache, target.project.name, 2 * GIB, 1)
    job = job_for(target, tmp_path)
    folder = job.outputs.work_dir(target) / "compiles"
    cibw = {"CIBW_ENVIRONMENT": 'A="1" MAX_JOBS="2"'}
    with pytest.raises(deadline.DeadlineReached) as info:
        with container_compiles.measured(job, tmp_path / "src", cibw):
            expected = json.loads((folder / records.EXPECTED).read_text())
            assert set(expected["sources"]) == {"csrc/a.cu"} and expected["sources"]["csrc/a.cu"]["peak"] == 2 * GIB
            record = folder / records.RECORD
            admission.record_line(record, {"source": "csrc/b.cu", "archs": 2, "threads": 0, "seconds": 3.0,
                                           "peak": GIB, "compiled": True, "rc": 0})
            (folder / (records.RECORD + ".stopped")).touch()
            raise errors.CommandFailed("the container build of x failed", "", "")
    assert info.value.exit_code == deadline.EXIT_DEADLINE == 75
    assert info.value.line() == "stopped at the deadline: 1 of 2 compiles done and cached; the same command resumes"
    assert set(records.load(target.project.name, cache)) == {"csrc/a.cu", "csrc/b.cu"}
    # Another failure is left as it is (records still folded in).
    (folder / (records.RECORD + ".stopped")).unlink()
    with pytest.raises(errors.CommandFailed):
        with container_compiles.measured(job, tmp_path / "src", cibw):
            raise errors.CommandFailed("the container build of x failed", "", "")
