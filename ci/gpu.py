"""The GPU test matrix: ``nox -s test-gpu`` / ``python -m ci.gpu``.

Tests the wheel a user would install (or an in-tree build) on the GPUs of this
machine, in lanes:

* ``default``   the CUDA cases of the op tests and the GPU matrix (dtypes,
                layouts, every GPU, side streams, CUDA graphs, > 2^31 elements)
* ``sanitizer`` compute-sanitizer memcheck, racecheck, initcheck and synccheck
                over a reduced workload (tests/gpu/smoke.py)
* ``ptx-jit``   a wheel whose only code for this GPU is PTX of an older
                architecture (``--ptx-wheel``): the driver must JIT it
* ``multi-gpu`` the cross-device cases, when two or more GPUs are visible
* ``bench``     ``python -m ci.bench``, JSON next to the reports

Refuses to report success without a GPU. Writes JUnit XML per lane and a
summary (table, JSON) into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
LANES = ("default", "sanitizer", "ptx-jit", "multi-gpu", "bench")

console = Console() if sys.stdout.isatty() else Console(width=200)


@dataclasses.dataclass
class LaneResult:
    lane: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    status: str = "not run"
    detail: str = ""


def log_run(cmd: list[str], env: dict[str, str] | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
    shown = " ".join(f"{k}={v}" for k, v in (env or {}).items() if os.environ.get(k) != v)
    console.print(f"[bold cyan]$[/] {shown + ' ' if shown else ''}{' '.join(cmd)}", soft_wrap=True, highlight=False)
    return subprocess.run(cmd, env={**os.environ, **(env or {})}, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def python_env(site: Path | None) -> dict[str, str]:
    """PYTHONPATH for the package under test: an unpacked wheel, or package/ for --inplace."""
    paths = [str(site)] if site else []
    paths.append(str(ROOT))  # the tests import ci (and conftest) from the checkout
    return {"PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1"}


def install_wheel(wheel: Path, target: Path) -> Path:
    log_run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
             str(target), str(wheel)], check=True)
    return target


def environment_report() -> dict[str, object]:
    code = (
        "import json, torch, fusedops;"
        "n = torch.cuda.device_count();"
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpus': "
        "[dict(name=torch.cuda.get_device_name(i), capability='.'.join(map(str, torch.cuda.get_device_capability(i))),"
        " memory_gib=round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)) for i in range(n)],"
        " 'fusedops': fusedops.__file__, 'build': fusedops.build_info()}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    if out.returncode != 0:
        raise SystemExit(f"could not import torch/fusedops under test:\n{out.stderr}")
    info: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    smi = shutil.which("nvidia-smi")
    if smi:
        drv = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True)
        info["driver"] = drv.stdout.strip().splitlines()[0] if drv.returncode == 0 and drv.stdout.strip() else "?"
    return info


def junit_counts(path: Path) -> tuple[int, int, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return tests - failed - skipped, failed, skipped


def run_pytest(lane: str, args: list[str], env: dict[str, str], out: Path) -> LaneResult:
    xml = out / f"junit-{lane}.xml"
    proc = log_run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={xml}", *args],
                   env=env, cwd=ROOT)
    result = LaneResult(lane)
    if xml.exists():
        result.passed, result.failed, result.skipped = junit_counts(xml)
    result.status = "passed" if proc.returncode == 0 else ("no tests" if proc.returncode == 5 else "failed")
    return result


def run_sanitizer(env: dict[str, str], out: Path) -> LaneResult:
    result = LaneResult("sanitizer")
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        result.status, result.detail = "skipped", "compute-sanitizer is not on PATH"
        return result
    details = []
    for check in SANITIZER_TOOLS:
        cmd = [tool, "--tool", check, "--error-exitcode", "1"]
        proc = log_run([*cmd, sys.executable, str(ROOT / "tests" / "gpu" / "smoke.py")], env=env,
                       capture_output=True)
        text = proc.stdout + proc.stderr
        (out / f"sanitizer-{check}.log").write_text(text)
        # memcheck/initcheck/synccheck: "ERROR SUMMARY: N errors"; racecheck: "... (N errors, M warnings)".
        m = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(
            r"SUMMARY: \d+ hazards? displayed \((\d+) error", text
        )
        errors = int(m.group(1)) if m else -1
        ok = proc.returncode == 0 and errors == 0
        result.passed += ok
        result.failed += not ok
        details.append(f"{check}: {errors if errors >= 0 else '?'} errors")
    result.status = "passed" if result.failed == 0 else "failed"
    result.detail = "; ".join(details)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--wheel", type=Path, help="wheel to test (default: newest in wheelhouse/cu<major>/)")
    src.add_argument("--inplace", action="store_true", help="test the in-tree build (package/)")
    p.add_argument("--ptx-wheel", type=Path, help="a wheel built with PTX only for an older architecture")
    p.add_argument("--lanes", default=",".join(LANES), help=f"comma-separated subset of {', '.join(LANES)}")
    p.add_argument("--quick", action="store_true", help="skip the >2^31-element cases and shorten benchmarks")
    p.add_argument("--out", type=Path, default=ROOT / "test-results")
    args = p.parse_args(argv)
    lanes = [lane.strip() for lane in args.lanes.split(",") if lane.strip()]
    unknown = sorted(set(lanes) - set(LANES))
    if unknown:
        p.error(f"unknown lanes {unknown}; choose from {', '.join(LANES)}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="farm-gpu-") as tmp:
        if args.inplace:
            site: Path | None = ROOT / "package"
        else:
            wheel = args.wheel or _default_wheel()
            site = install_wheel(wheel, Path(tmp) / "site")
        env = python_env(site)
        os.environ.update(env)
        info = environment_report()
        console.print(f"[bold]GPUs[/]: {info['gpus']}\n[bold]driver[/]: {info.get('driver', '?')}  "
                      f"[bold]torch[/]: {info['torch']}  [bold]CUDA[/]: {info['cuda']}\n"
                      f"[bold]fusedops[/]: {info['fusedops']}\n[bold]build[/]: {info['build']}", highlight=False)
        gpus = info["gpus"]
        assert isinstance(gpus, list)
        if not gpus:
            console.print("[bold red]no CUDA GPU is visible[/]: test-gpu cannot report success without one. "
                          "On CPU-only machines run `nox -s tests`.")
            return 1
        build = info["build"]
        if not (isinstance(build, dict) and build.get("cuda_kernels_loaded")):
            console.print(f"[bold red]the CUDA kernels of fusedops did not load[/]: {build}")
            return 1

        results: list[LaneResult] = []
        marker = "cuda and not multigpu" + (" and not large" if args.quick else "")
        if "default" in lanes:
            results.append(run_pytest("default", ["tests/ops", "tests/gpu", "-m", marker, "-q"], env, out))
        if "sanitizer" in lanes:
            results.append(run_sanitizer(env, out))
        if "ptx-jit" in lanes:
            results.append(_ptx_lane(args.ptx_wheel, Path(tmp), out))
        if "multi-gpu" in lanes:
            if len(gpus) < 2:
                results.append(LaneResult("multi-gpu", status="skipped", detail=f"{len(gpus)} GPU visible"))
            else:
                results.append(run_pytest("multi-gpu", ["tests/gpu/test_gpu_matrix.py", "-m", "multigpu or cuda",
                                                        "-k", "every_gpu or second_gpu", "-q"], env, out))
        if "bench" in lanes:
            bench = log_run([sys.executable, "-m", "ci.bench", "--out", str(out),
                             *(["--quick"] if args.quick else [])], env=env, cwd=ROOT)
            results.append(LaneResult("bench", status="passed" if bench.returncode == 0 else "failed",
                                      detail=str(out / "bench-cuda.json")))
    table = Table(title=f"test-gpu on {', '.join(str(g['name']) for g in gpus)}")
    for col in ("lane", "passed", "failed", "skipped", "status", "detail"):
        table.add_column(col)
    for r in results:
        style = "green" if r.status == "passed" else ("red" if r.status == "failed" else "yellow")
        table.add_row(r.lane, str(r.passed), str(r.failed), str(r.skipped), f"[{style}]{r.status}[/]", r.detail)
    console.print(table)
    (out / "summary.json").write_text(json.dumps({"environment": info,
                                                  "lanes": [dataclasses.asdict(r) for r in results]}, indent=2))
    return 1 if any(r.status == "failed" for r in results) else 0


def _default_wheel() -> Path:
    wheels = sorted(ROOT.glob("wheelhouse/cu*/fusedops-*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise SystemExit("no wheel in wheelhouse/: build one (nox -s build) or pass --wheel / --inplace")
    return wheels[-1]


def _ptx_lane(ptx_wheel: Path | None, tmp: Path, out: Path) -> LaneResult:
    if ptx_wheel is None:
        return LaneResult("ptx-jit", status="skipped",
                          detail="pass --ptx-wheel (build one: nox -s build -- --arch-list 8.0+PTX)")
    site = install_wheel(ptx_wheel, tmp / "ptx-site")
    env = python_env(site)
    # The wheel has no SASS for this GPU (checked below), so every kernel it runs is JIT-compiled PTX.
    probe = log_run([sys.executable, "-c", "import torch, fusedops, json; print(json.dumps(fusedops.build_info()))"],
                    env=env, capture_output=True)
    result = run_pytest("ptx-jit", ["tests/gpu/test_gpu_matrix.py", "-m", "cuda and not large and not multigpu",
                                    "-k", "dtype_and_layout or graph", "-q"], env, out)
    result.detail = f"wheel archs: {json.loads(probe.stdout.strip().splitlines()[-1]).get('arch_list')}" \
        if probe.returncode == 0 else probe.stderr[-300:]
    return result


if __name__ == "__main__":
    sys.exit(main())
