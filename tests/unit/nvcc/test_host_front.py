"""ci/nvcc/host_front.py: the host compilers' compile front, run as the build runs it (the script it writes, in
front of the machine's real g++): C++ compiles admitted, measured and recorded as kind ``host``, with the objects
g++ makes alone; links and queries are g++ itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci.builds.progress import plan, records
from ci.nvcc import admission, host_front
from ci.nvcc.admission import need

GIB = 2**30
SCRIPT = str(Path(host_front.__file__))
CXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(CXX is None, reason="no g++ on this machine")
SOURCE = "#include <vector>\n#include <string>\nint f() { std::vector<std::string> v(3, \"x\"); return v.size(); }\n"


def fronted(tmp_path: Path, cxx: str) -> str:
    return host_front.write_fronts({"CXX": cxx}, tmp_path / "fronts", [sys.executable, "-I"], SCRIPT)["CXX"]


def run(command: str, *args: str, cwd: Path, record: Path | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], **({admission.RECORD: str(record), admission.ROOT: str(cwd)} if record else {})}
    return subprocess.run([*command.split(), *args], cwd=cwd, env=env, capture_output=True, text=True)


def lines(record: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in record.read_text().splitlines()] if record.exists() else []


def test_the_source_of_a_compile_and_not_of_anything_else() -> None:
    assert host_front.source_of(["-O2", "-c", "/p/csrc/ops.cpp", "-o", "/b/ops.o"]) == "/p/csrc/ops.cpp"
    assert host_front.source_of(["-c", "k.c", "-MF", "k.d", "-include", "pre.cpp"]) == "k.c"
    assert host_front.source_of(["-shared", "a.o", "b.o", "-o", "x.so"]) is None  # a link
    assert host_front.source_of(["-dumpfullversion"]) is None
    assert host_front.source_of(["-c", "a.cpp", "b.cpp"]) is None  # two at once: not one compile to admit


def test_a_front_is_named_as_its_compiler_keeps_its_words_and_is_rewritten_only_when_it_changes(
        tmp_path: Path) -> None:
    """torch accepts a CXX by its name; the front's file time is a key's input (ci/builds/build_key.py)."""
    env = {"CXX": "/opt/gcc/bin/x86_64-linux-gnu-g++ -pthread", "CC": "gcc", "LDSHARED": "gcc -shared"}
    out = host_front.write_fronts(env, tmp_path, ["python", "-I"], SCRIPT)
    assert set(out) == {"CC", "CXX"}  # LDSHARED: links are no compiles
    assert out["CXX"] == f"{tmp_path}/cxx/x86_64-linux-gnu-g++ -pthread" and out["CC"] == f"{tmp_path}/cc/gcc"
    front = tmp_path / "cxx" / "x86_64-linux-gnu-g++"
    assert os.access(front, os.X_OK) and "/opt/gcc/bin/x86_64-linux-gnu-g++" in front.read_text()
    before = front.stat().st_mtime_ns
    os.utime(front, ns=(before - 10**9, before - 10**9))
    host_front.write_fronts(env, tmp_path, ["python", "-I"], SCRIPT)
    assert front.stat().st_mtime_ns == before - 10**9
    seen = host_front.write_fronts(env, tmp_path, ["python", "-I"], SCRIPT, seen_as="/opt/farm-compiles/hf")
    assert seen["CC"] == "/opt/farm-compiles/hf/cc/gcc"
    assert host_front.write_fronts({"CC": " "}, tmp_path, ["python"], SCRIPT) == {}


@needs_gxx
def test_a_compile_through_the_front_is_recorded_as_host_with_g_plus_pluss_own_object(tmp_path: Path) -> None:
    assert CXX is not None
    (tmp_path / "a.cpp").write_text(SOURCE)
    record = tmp_path / "compiles.jsonl"
    front = fronted(tmp_path, CXX)
    done = run(front, "-O2", "-c", str(tmp_path / "a.cpp"), "-o", "fronted.o", cwd=tmp_path, record=record)
    assert done.returncode == 0, done.stderr
    alone = run(CXX, "-O2", "-c", str(tmp_path / "a.cpp"), "-o", "alone.o", cwd=tmp_path, record=None)
    assert alone.returncode == 0, alone.stderr
    assert (tmp_path / "fronted.o").read_bytes() == (tmp_path / "alone.o").read_bytes()
    (line,) = lines(record)
    assert line["source"] == "a.cpp" and line["kind"] == "host" and line["compiled"] and line["rc"] == 0
    assert line["archs"] == 1 and line["threads"] == 1
    assert isinstance(line["peak"], int) and line["peak"] > 10 << 20  # cc1plus of <vector> and <string>
    # a link and a query are g++ itself: nothing admitted, nothing recorded
    linked = run(front, "-shared", "fronted.o", "-o", "a.so", cwd=tmp_path, record=record)
    assert linked.returncode == 0, linked.stderr
    assert run(front, "-dumpversion", cwd=tmp_path, record=record).stdout.strip()
    assert len(lines(record)) == 1
    # a second compile is expected from the first's record
    run(front, "-O2", "-c", str(tmp_path / "a.cpp"), "-o", "again.o", cwd=tmp_path, record=record)
    assert lines(record)[-1]["how"] == "recorded"


@needs_gxx
def test_a_failed_compile_keeps_its_status_and_its_message(tmp_path: Path) -> None:
    assert CXX is not None
    (tmp_path / "bad.cpp").write_text("int f() { return undeclared; }\n")
    record = tmp_path / "compiles.jsonl"
    done = run(fronted(tmp_path, CXX), "-c", "bad.cpp", "-o", "bad.o", cwd=tmp_path, record=record)
    assert done.returncode == 1 and "undeclared" in done.stderr
    assert lines(record)[0]["rc"] == 1


@needs_gxx
def test_without_a_record_or_in_cmakes_probes_the_compile_is_g_plus_plus_alone(tmp_path: Path) -> None:
    assert CXX is not None
    probe = tmp_path / "CMakeFiles" / "CMakeScratch" / "TryCompile-x"
    probe.mkdir(parents=True)
    (probe / "t.cpp").write_text("int main() { return 0; }\n")
    record = tmp_path / "compiles.jsonl"
    front = fronted(tmp_path, CXX)
    assert run(front, "-c", "t.cpp", "-o", "t.o", cwd=probe, record=record).returncode == 0
    assert run(front, "-c", "t.cpp", "-o", "u.o", cwd=probe, record=None).returncode == 0
    assert not record.exists() and (probe / "u.o").is_file()


@needs_gxx
def test_nvccs_host_compiler_is_the_compiler_itself_inside_an_admitted_nvcc_compile(tmp_path: Path) -> None:
    """torch gives nvcc ``-ccbin $CC``: the front runs inside nvcc's compile. Admitted there it would queue behind
    its own parent (never built: it waits for every running compile to end) and be recorded apart under a
    temporary file's name. Here a stand-in nvcc runs the front as nvcc runs its host compiler."""
    assert CXX is not None
    (tmp_path / "a.cudafe1.cpp").write_text(SOURCE)
    front = fronted(tmp_path, CXX)
    nvcc = f"sh -c '{front} -c a.cudafe1.cpp -o k.o' sh"
    env = {"PATH": os.environ["PATH"], admission.RECORD: str(tmp_path / "compiles.jsonl"),
           admission.ROOT: str(tmp_path), "FARM_NVCC_NEXT": nvcc}
    wrapper = Path(SCRIPT).with_name("wrapper.py")
    done = subprocess.run([sys.executable, "-I", str(wrapper), "-c", "k.cu", "-o", "k.o"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = lines(tmp_path / "compiles.jsonl")
    assert line["source"] == "k.cu" and line["kind"] == "device" and line["compiled"]  # cc1plus ran inside it
    assert (tmp_path / "k.o").is_file()


@needs_gxx
def test_at_the_deadline_a_host_compile_is_not_started(tmp_path: Path) -> None:
    """Its record says 60 s, 5 are left: g++ never runs, the front says so and exits with the deadline's status;
    the stop file tells the farm (and every compile after it) that the build stopped at its deadline."""
    assert CXX is not None
    (tmp_path / "a.cpp").write_text(SOURCE)
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"sources": {"a.cpp": {"kind": "host", "peak": 1 << 20, "seconds": 60.0,
                                                          "archs": 1, "threads": 1}}}))
    env = {"PATH": os.environ["PATH"], admission.RECORD: str(tmp_path / "compiles.jsonl"),
           admission.ROOT: str(tmp_path), admission.EXPECTED: str(expected),
           admission.DEADLINE: str(int(time.time()) + 5)}
    done = subprocess.run([*fronted(tmp_path, CXX).split(), "-c", "a.cpp", "-o", "a.o"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == admission.STOPPED, done.stderr
    assert "cuda-ext-farm host compiler: at the deadline: a.cpp not started (60 s expected" in done.stderr
    assert not (tmp_path / "a.o").exists() and (tmp_path / "compiles.jsonl.stopped").exists()


def test_host_and_device_compiles_are_expected_each_from_their_own_kind() -> None:
    """A host compile's 1 GiB is no architecture's: it neither estimates a .cu never built nor is estimated by
    one; records of before the kind existed are nvcc's."""
    known = {"sources": {"ops.cpp": {"kind": "host", "peak": GIB, "seconds": 20.0, "archs": 1, "threads": 1},
                         "k.cu": {"peak": 3 * GIB, "seconds": 60.0, "archs": 1, "threads": 0, "cpus": 2}}}
    assert need.expected("new.cu", 1, 0, known, [], 2) == (3 * GIB, 60.0, "estimated")
    assert need.expected("new.cpp", 1, 1, known, [], 2, need.HOST) == (GIB, 20.0, "estimated")
    assert need.expected("ops.cpp", 1, 1, known, [], 2, need.HOST).how == "recorded"
    device_only = {"sources": {"k.cu": known["sources"]["k.cu"]}}
    assert need.expected("ops.cpp", 1, 1, device_only, [], 2, need.HOST).how == "unknown"
    assert records.unit_peak(known["sources"], 2) == 3 * GIB
    assert records.unit_peak(known["sources"], 2, need.HOST) == GIB


def test_the_plan_holds_a_host_compile_larger_than_a_cuda_one() -> None:
    """8 cores, 6 GiB free, CUDA compiles of 0.5 GiB but a C++ one of 2 GiB: 3 jobs, not 8 (nor 12 of CUDA)."""
    assert plan.choose(8, 6 * GIB, 0.5 * GIB / 1, 1, None)[:2] == (8, None)
    chosen = plan.choose(8, 6 * GIB, 0.5 * GIB, 1, None, host=2 * GIB)
    assert chosen.jobs == 3 and "2.0 GiB per compile" in chosen.line, chosen
