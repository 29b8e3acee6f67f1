"""ci/nvcc/admission/: each compile the wrapper lets through admitted by memory and measured over its process
tree, run here as the build runs it (``python -I wrapper.py``), with real processes and the real nvcc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci.nvcc import admission
from ci.nvcc.admission import memory, need

WRAPPER = Path(admission.__file__).parent.with_name("wrapper.py")
MIB = 2**20
#: A stand-in compile tree: the command starts two children that each hold ``MiB`` resident at the same time.
TWO_CHILDREN = """
import subprocess, sys
hold = "import sys, time; b = bytearray(int(sys.argv[1]) * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.8)"
kids = [subprocess.Popen([sys.executable, "-c", hold, sys.argv[1]]) for _ in range(2)]
sys.exit(max(k.wait() for k in kids))
"""


def wrapper_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], admission.RECORD: str(tmp_path / "compiles.jsonl"),
            admission.ROOT: str(tmp_path), **extra}


def run_wrapper(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", str(WRAPPER), *args], env=env, cwd=cwd, capture_output=True,
                          text=True)


def records(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "compiles.jsonl").read_text().splitlines()]


def test_the_peak_is_the_sum_over_the_tree_not_its_largest_process(tmp_path: Path) -> None:
    """Two processes of one compile hold 150 MiB each at the same time: the tree's peak counts both (ru_maxrss
    alone would say 150)."""
    script = tmp_path / "tree.py"
    script.write_text(TWO_CHILDREN)
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} {script} 150")
    done = run_wrapper(["-c", "k.cu", "-o", "k.o", "-gencode=arch=compute_90,code=sm_90"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = records(tmp_path)
    assert line["source"] == "k.cu" and line["archs"] == 1 and line["rc"] == 0
    assert 290 * MIB < int(line["peak"]) < 400 * MIB  # type: ignore[call-overload]
    assert line["compiled"] is False  # no compiler ran (a compile cache's hit looks so)


def test_a_failed_compile_keeps_its_status_and_is_recorded(tmp_path: Path) -> None:
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} -c 'import sys; sys.exit(7)'")
    done = run_wrapper(["-c", "k.cu", "-o", "k.o"], env, tmp_path)
    assert done.returncode == 7
    assert [line["rc"] for line in records(tmp_path)] == [7]


def test_a_compile_waits_while_the_running_ones_hold_its_memory(tmp_path: Path) -> None:
    """Each compile is expected (recorded) to need 60 % of what is free now: the second starts only after the
    first ended, however the two were started together."""
    free = memory.available()
    assert free
    expected = tmp_path / "expected.json"
    need = int(free * 0.6)
    expected.write_text(json.dumps({"sources": {f"k{i}.cu": {"peak": need, "seconds": 1, "archs": 1, "threads": 1}
                                                for i in range(2)}}))
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} -c 'import time; time.sleep(1)'",
                      FARM_COMPILE_EXPECTED=str(expected))
    started = [subprocess.Popen([sys.executable, "-I", str(WRAPPER), "-c", f"k{i}.cu", "-o", "k.o",
                                 "-gencode=arch=compute_90,code=sm_90"], env=env, cwd=tmp_path) for i in range(2)]
    assert [p.wait() for p in started] == [0, 0]
    first, second = sorted(records(tmp_path), key=lambda line: float(line["end"]))  # type: ignore[arg-type]
    assert first["need"] == second["need"] == need and second["how"] == "recorded"
    assert float(second["end"]) - float(second["seconds"]) >= float(first["end"]) - 0.05  # type: ignore[arg-type]


def test_compiles_queued_behind_the_first_of_a_build_never_built_are_expected_from_its_measure(tmp_path: Path
                                                                                              ) -> None:
    """Nothing recorded: the first compile runs alone; the ones that queued meanwhile are not each run alone as
    well but, once it is measured, expected from it (estimated) and run together."""
    cicc = tmp_path / "cicc"  # a compiler by its process name: the compile is measured, not a cache hit
    cicc.symlink_to(sys.executable)
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{cicc} -c 'import time; time.sleep(1.5)'")
    started = []
    for i in range(3):
        started.append(subprocess.Popen([sys.executable, "-I", str(WRAPPER), "-c", f"k{i}.cu", "-o", "k.o",
                                         "-gencode=arch=compute_90,code=sm_90"], env=env, cwd=tmp_path))
        time.sleep(0.3)  # in this order: k0 first
    assert [p.wait() for p in started] == [0, 0, 0]
    first, *rest = sorted(records(tmp_path), key=lambda line: float(line["end"]))  # type: ignore[arg-type]
    assert first["how"] == "unknown" and first["compiled"] and [line["how"] for line in rest] == ["estimated"] * 2
    starts = [float(line["end"]) - float(line["seconds"]) for line in rest]  # type: ignore[arg-type]
    assert min(starts) >= float(first["end"]) - 0.05  # type: ignore[arg-type]
    assert max(starts) < min(float(line["end"]) for line in rest)  # type: ignore[arg-type]  # together


def test_with_the_admission_off_compiles_start_together_and_are_still_measured(tmp_path: Path) -> None:
    """The naive settings (FARM_COMPILE_ADMISSION=off): the same two compiles that would wait for each other by
    their records start at once, and both are recorded."""
    free = memory.available()
    assert free
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"sources": {f"k{i}.cu": {"peak": int(free * 0.6), "seconds": 1, "archs": 1,
                                                             "threads": 1} for i in range(2)}}))
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} -c 'import time; time.sleep(1.5)'",
                      FARM_COMPILE_EXPECTED=str(expected), FARM_COMPILE_ADMISSION="off")
    started = [subprocess.Popen([sys.executable, "-I", str(WRAPPER), "-c", f"k{i}.cu", "-o", "k.o",
                                 "-gencode=arch=compute_90,code=sm_90"], env=env, cwd=tmp_path) for i in range(2)]
    assert [p.wait() for p in started] == [0, 0]
    first, second = sorted(records(tmp_path), key=lambda line: float(line["end"]))  # type: ignore[arg-type]
    assert float(second["end"]) - float(second["seconds"]) < float(first["end"])  # type: ignore[arg-type]
    assert first["waited"] == second["waited"] == 0.0


def test_a_compile_that_alone_exceeds_what_is_free_runs_alone_with_fewer_threads(tmp_path: Path) -> None:
    free = memory.available()
    assert free
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"sources": {"k.cu": {"peak": free * 3, "seconds": 1, "archs": 4, "threads": 0}}}))
    argv, script = tmp_path / "argv.json", tmp_path / "nvcc.py"
    script.write_text(f"import json, sys\nopen({str(argv)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    env = wrapper_env(tmp_path, FARM_COMPILE_EXPECTED=str(expected), FARM_NVCC_NEXT=f"{sys.executable} {script}")
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in (75, 80, 90, 100)]
    done = run_wrapper(["-c", "k.cu", "-o", "k.o", *gencode, "--threads", "0"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(argv.read_text())[-2:] == ["--threads", "1"]  # 3x what is free per 4 archs: 1 fits
    assert "k.cu: runs alone with --threads 1" in done.stderr


@pytest.mark.parametrize(("version", "files"), [
    ("v2", {"memory.max": "1073741824", "memory.current": "805306368", "memory.stat": "inactive_file 268435456\n"}),
    ("v1", {"memory.limit_in_bytes": "1073741824", "memory.usage_in_bytes": "805306368",
            "memory.stat": "total_inactive_file 268435456\n"}),
])
def test_what_a_cgroup_can_still_give_less_its_reclaimable_cache(tmp_path: Path, version: str,
                                                                   files: dict[str, str]) -> None:
    mount = tmp_path / "cgroup"
    folder = mount / ("memory" if version == "v1" else "") / "build" / "job"
    folder.mkdir(parents=True)
    (mount / "build").mkdir(exist_ok=True) if version == "v2" else None
    for name, text in files.items():
        (folder / name).write_text(text)
    cgroup = tmp_path / "self-cgroup"
    cgroup.write_text("0::/build/job\n" if version == "v2" else "4:memory:/build/job\n0::/\n")
    assert memory.cgroup_free(cgroup, mount) == 512 * MIB


def test_the_expected_need_scales_a_record_and_estimates_a_file_never_built() -> None:
    known = {"sources": {"a.cu": {"peak": 4 * 2**30, "seconds": 40.0, "archs": 4, "threads": 0, "cpus": 8}}}
    assert need.expected("a.cu", 4, 2, known, [], 8) == (2 * 2**30, 40.0, "recorded")
    assert need.expected("b.cu", 2, 0, known, [], 8).bytes == 2 * 2**30  # 1 GiB per parallel architecture
    assert need.expected("b.cu", 2, 0, {}, [], 8).how == "unknown"
    this_build = [{"source": "c.cu", "peak": 3 * 2**30, "archs": 1, "threads": 1, "compiled": True}]
    assert need.expected("b.cu", 2, 0, {}, this_build, 8).bytes == 6 * 2**30


def test_threads_0_runs_as_many_architectures_at_once_as_the_machine_has_cpus() -> None:
    """nvcc's --threads 0 is the machine's CPU count: classic_ext's compile (one cicc of 1.24 GiB) peaked at 2.47
    GiB with 6 architectures on 2 CPUs, not 6 x 1.24. A record made with one architecture expects that of a build
    with six on 2 CPUs, and six at once on 16; a record made on 2 CPUs, scaled to 16, by its own CPU count."""
    assert [need.parallel(6, 0, cpus) for cpus in (1, 2, 16)] == [1, 2, 6]
    assert [need.parallel(6, threads, 2) for threads in (1, 4, 9)] == [1, 4, 6]  # an explicit --threads
    one_arch = {"sources": {"k.cu": {"peak": 1.24 * 2**30, "seconds": 30.0, "archs": 1, "threads": 0, "cpus": 2}}}
    assert need.expected("k.cu", 6, 0, one_arch, [], 2).bytes == int(2.48 * 2**30)
    assert need.expected("k.cu", 6, 0, one_arch, [], 16).bytes == int(6 * 1.24 * 2**30)
    six_on_two = {"sources": {"k.cu": {"peak": 2.47 * 2**30, "seconds": 75.0, "archs": 6, "threads": 0, "cpus": 2}}}
    assert need.expected("k.cu", 6, 0, six_on_two, [], 16).bytes == int(3 * 2.47 * 2**30)
    assert need.expected("k.cu", 6, 0, six_on_two, [], 2).bytes == int(2.47 * 2**30)


def test_the_record_says_how_many_cpus_the_compile_had(tmp_path: Path) -> None:
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} -c pass")
    done = run_wrapper(["-c", "k.cu", "-o", "k.o"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = records(tmp_path)
    assert line["cpus"] == os.cpu_count()


def test_with_threads_replaces_or_adds_nvccs_option() -> None:
    assert need.with_threads(["-c", "k.cu", "--threads", "0"], 2) == ["-c", "k.cu", "--threads", "2"]
    assert need.with_threads(["-c", "--threads=0", "k.cu"], 1) == ["-c", "--threads=1", "k.cu"]
    assert need.with_threads(["-c", "k.cu"], 3) == ["-c", "k.cu", "--threads", "3"]


def test_a_real_nvcc_compile_is_measured_and_its_object_is_nvccs_own(tmp_path: Path) -> None:
    """Through the wrapper with a record, the real nvcc's tree (cicc, ptxas) is measured, and the object equals
    nvcc's alone; nvcc's --threads does not change the object."""
    from ci.toolchain import toolkit
    from ci.universe import matrix

    nvcc = str(toolkit.ensure_toolkit(matrix.get_cell("13.0")).nvcc)
    (tmp_path / "k.cu").write_text("template <int N> __global__ void k(float *p) { p[N] = N; }\n"
                                   "template __global__ void k<1>(float *); template __global__ void k<2>(float *);\n")
    # the farm's reproducible flags (ci/builds/environment.py); each object in a folder of its own, same name
    args = ["-c", "../k.cu", "-o", "k.o", "-objtemp", "-frandom-seed=k", "-gencode=arch=compute_80,code=sm_80",
            "-gencode=arch=compute_90,code=sm_90"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NVCC_", "FARM_"))}
    for name in ("wrapped", "t0", "t1"):
        (tmp_path / name).mkdir()
    done = run_wrapper([*args, "--threads", "0"], {**base, **wrapper_env(tmp_path), "FARM_NVCC_NEXT": nvcc},
                       tmp_path / "wrapped")
    assert done.returncode == 0, done.stderr
    for threads in ("0", "1"):
        subprocess.run([nvcc, *args, "--threads", threads], env=base, cwd=tmp_path / f"t{threads}", check=True)
    objects = {(tmp_path / name / "k.o").read_bytes() for name in ("wrapped", "t0", "t1")}
    assert len(objects) == 1
    (line,) = records(tmp_path)
    assert line["compiled"] is True and line["archs"] == 2 and int(line["peak"]) > 50 * MIB  # type: ignore[call-overload]


def test_at_the_deadline_a_compile_is_not_started_nor_any_after_it(tmp_path: Path) -> None:
    """A compile recorded at 60 s with 30 s left is refused with its line and the wrapper's status; a compile
    recorded at 1 s is refused too from then on (the build stops starting compiles); nothing ran."""
    import time

    ran = tmp_path / "ran"
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"sources": {"slow.cu": {"peak": MIB, "seconds": 60, "archs": 1, "threads": 1},
                                                "quick.cu": {"peak": MIB, "seconds": 1, "archs": 1, "threads": 1}}}))
    env = wrapper_env(tmp_path, FARM_COMPILE_EXPECTED=str(expected), FARM_DEADLINE=f"{time.time() + 30:.0f}",
                      FARM_NVCC_NEXT=f"{sys.executable} -c 'import pathlib, sys; pathlib.Path(sys.argv[1]).touch()' "
                                     f"{ran}")
    quick = run_wrapper(["-c", "quick.cu", "-o", "q.o"], env, tmp_path)
    assert quick.returncode == 0 and ran.exists()
    ran.unlink()
    slow = run_wrapper(["-c", "slow.cu", "-o", "s.o"], env, tmp_path)
    assert slow.returncode == admission.STOPPED
    assert "cuda-ext-farm nvcc: at the deadline: slow.cu not started (60 s expected, " in slow.stderr
    again = run_wrapper(["-c", "quick.cu", "-o", "q.o"], env, tmp_path)
    assert again.returncode == admission.STOPPED and not ran.exists()


def test_after_a_compile_that_could_not_be_measured_the_others_are_not_run_alone(tmp_path: Path) -> None:
    """A compile-cache hit (or sccache's server compiling outside the wrapper's tree) finishes without a measure:
    the compiles queued behind it are ``unmeasured`` and start together instead of one at a time for the whole
    build; one measured compile of the project gives an estimate with a duration the deadline can hold it to."""
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} -c 'import time; time.sleep(1.5)'")
    run_wrapper(["-c", "hit.cu", "-o", "hit.o"], {**env, "FARM_NVCC_NEXT": f"{sys.executable} -c pass"}, tmp_path)
    started = [subprocess.Popen([sys.executable, "-I", str(WRAPPER), "-c", f"k{i}.cu", "-o", "k.o"], env=env,
                                cwd=tmp_path) for i in range(2)]
    assert [p.wait() for p in started] == [0, 0]
    hit, *rest = sorted(records(tmp_path), key=lambda line: float(line["end"]))  # type: ignore[arg-type]
    assert hit["how"] == "unknown" and hit["compiled"] is False
    assert [line["how"] for line in rest] == ["unmeasured"] * 2
    starts = [float(line["end"]) - float(line["seconds"]) for line in rest]  # type: ignore[arg-type]
    assert max(starts) < min(float(line["end"]) for line in rest)  # type: ignore[arg-type]  # together
    measured = [{"source": "a.cu", "peak": 2 * MIB, "seconds": 40.0, "archs": 4, "threads": 0, "compiled": True}]
    estimate = need.expected("b.cu", 2, 0, {}, measured, 8)
    assert (estimate.how, estimate.seconds) == ("estimated", 20.0)  # 10 s an architecture, two of them


def test_stale_claims_of_a_killed_build_are_cleared_when_the_next_build_starts(tmp_path: Path) -> None:
    """A wrapper killed outright leaves its claim, named by a process id that may be alive in the next container:
    the next build's start removes every claim (no compile of the target runs then: its lock is held)."""
    from ci.builds.progress import records as compile_records

    work = tmp_path / "work"
    claims = work / (compile_records.RECORD + ".claims")
    claims.mkdir(parents=True)
    (claims / str(os.getpid())).write_text(str(2**50))  # a live process id, claiming more than any machine has
    compile_records.prepare("proj", work, tmp_path / "cache")
    assert not claims.exists()


def test_the_plans_threads_reach_nvcc_where_nothing_is_recorded(tmp_path: Path) -> None:
    """develop sets the plan's --threads without a record: the wrapper applies it before it execs nvcc."""
    argv = tmp_path / "argv.json"
    script = tmp_path / "nvcc.py"
    script.write_text(f"import json, sys\nopen({str(argv)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    env = {"PATH": os.environ["PATH"], "FARM_NVCC_NEXT": f"{sys.executable} {script}", admission.THREADS: "1"}
    done = run_wrapper(["-c", "k.cu", "-o", "k.o", "--threads", "0"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(argv.read_text())[-2:] == ["--threads", "1"]


def test_cmakes_probes_are_not_admitted_and_its_architectures_count_as_torch_writes_them(tmp_path: Path) -> None:
    """A try_compile in CMakeFiles/ runs unrecorded; CMake's code=[compute_90,sm_90] counts two architectures,
    as torch's two flags for 9.0+PTX do (the plan counts them so)."""
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} -c pass")
    scratch = tmp_path / "CMakeFiles" / "CMakeScratch" / "TryCompile-x"
    scratch.mkdir(parents=True)
    (tmp_path / "k.cu").write_text("")
    assert run_wrapper(["-c", str(tmp_path / "k.cu"), "-o", "p.o"], env, scratch).returncode == 0
    assert not (tmp_path / "compiles.jsonl").exists()
    flag = "--generate-code=arch=compute_90,code=[compute_90,sm_90]"
    assert run_wrapper(["-c", "k.cu", "-o", "k.o", flag], env, tmp_path).returncode == 0
    assert [line["archs"] for line in records(tmp_path)] == [2]


def test_ctrl_c_while_queued_ends_the_compile_without_a_traceback(tmp_path: Path) -> None:
    """A compile waiting for memory (a live claim holds more than there is) gets ninja's SIGINT: status 130, its
    claim gone, no traceback."""
    import signal

    claims = tmp_path / "compiles.jsonl.claims"
    claims.mkdir()
    (claims / str(os.getpid())).write_text(str(2**50))
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"sources": {"k.cu": {"peak": MIB, "seconds": 1, "archs": 1, "threads": 1}}}))
    env = wrapper_env(tmp_path, FARM_NVCC_NEXT=f"{sys.executable} -c pass", FARM_COMPILE_EXPECTED=str(expected))
    # SIGINT as ninja's children get it: a test runner's worker may ignore it, and an ignored signal is inherited
    queued = subprocess.Popen([sys.executable, "-I", str(WRAPPER), "-c", "k.cu", "-o", "k.o"], env=env, cwd=tmp_path,
                              stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(1.5)
        assert queued.poll() is None  # waiting behind the claim
        queued.send_signal(signal.SIGINT)
        _, stderr = queued.communicate(timeout=30)
    finally:
        queued.kill()
    assert queued.returncode == 130 and "Traceback" not in stderr, stderr
    assert [p.name for p in claims.iterdir()] == [str(os.getpid())]
