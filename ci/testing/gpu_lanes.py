"""The GPU test lanes: ``nox -s test-gpu`` / ``python -m ci test-gpu``.

Tests the wheel a user would install (or the in-place build) on this machine's
GPUs with the commands the project configures (``[tool.cuda-ext-farm.commands]``),
in lanes:

* ``default``   the ``smoke`` command, then ``gpu-test`` (defaults to ``test``)
* ``sanitizer`` the ``sanitizer`` workload under compute-sanitizer memcheck,
                racecheck, initcheck and synccheck
* ``ptx-jit``   ``gpu-test`` against a wheel whose only code for this GPU is PTX
                of an older architecture (``--ptx-wheel``): the driver JITs it
* ``multi-gpu`` the ``multi-gpu`` command, when two or more GPUs are visible
* ``bench``     the ``bench`` command, ``{out}`` = the results folder

Each command runs in the project's folder with the wheel on ``PYTHONPATH`` and
``FARM_LANE`` naming the lane; pytest commands write JUnit XML per lane
(``PYTEST_ADDOPTS``). A lane whose command is not configured is shown as
skipped, with the key that configures it. Refuses to report success without a
GPU, and before any lane it refuses a torch that cannot exercise the wheel's
kernels: a CPU build (``+cpu``: an index that serves CPU wheels leaked into the
environment) or a CUDA build of another major than the wheel's (:func:`torch_refusal`).
Writes ``summary.json`` into the results folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ci import fsutil, proc, settings
from ci.errors import CommandFailed, MissingRequirement, UsageError
from ci.log import log
from ci.universe import project_commands
from ci.universe.targets import Target

SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

@dataclasses.dataclass
class LaneResult:
    lane: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    status: str = "not run"
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Subject:
    """What is under test: the interpreter (with its torch) and where the package comes from."""

    python: Path
    pythonpath: tuple[str, ...]
    description: str
    wheel: Path | None = None
    #: ``--quick``: every command run on it sees FARM_QUICK=1 (the project's tests shorten themselves)
    quick: bool = False

    def env(self) -> dict[str, str]:
        quick = {"FARM_QUICK": "1"} if self.quick else {}
        return {"PYTHONPATH": os.pathsep.join(self.pythonpath), "PYTHONUNBUFFERED": "1", **quick}


def install_wheel(wheel: Path, target: Path) -> Path:
    if not wheel.is_file():
        raise UsageError("wheel file does not exist", wheel,
                         f"build it ({settings.entry('build')}) or pass --wheel PATH")
    proc.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
              str(target), str(wheel)], what="installing the wheel under test failed")
    return target


def inplace_paths(root: Path) -> tuple[str, ...]:
    """Where an in-place build (``setup.py build_ext --inplace``) leaves the package: src/, package/ or the root."""
    for folder in (root / "src", root / "package"):
        if folder.is_dir():
            return (str(folder),)
    return (str(root),)


def environment_report(subject: Subject) -> dict[str, object]:
    code = (
        "import json, torch;"
        "n = torch.cuda.device_count() if torch.cuda.is_available() else 0;"
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpus': "
        "[dict(name=torch.cuda.get_device_name(i), capability='.'.join(map(str, torch.cuda.get_device_capability(i))),"
        " memory_gib=round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)) for i in range(n)]}))"
    )
    out = proc.run([subject.python, "-c", code], env=subject.env(), capture=True, check=False, log=False)
    if out.returncode != 0:
        raise MissingRequirement("torch does not import in the test interpreter", subject.python,
                                 f"install a CUDA build of torch into it ({settings.entry('test-gpu')} does)")
    info: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    smi = proc.which("nvidia-smi")
    if smi:
        drv = proc.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture=True, check=False,
                       log=False)
        info["driver"] = drv.stdout.strip().splitlines()[0] if drv.returncode == 0 and drv.stdout.strip() else "?"
    return info


def wheel_cuda(wheel: Path | None, target: Target) -> tuple[str | None, str]:
    """The CUDA the code under test was built with, and where that was read: the wheel's own record
    (``<dist-info>/cuda-ext-farm.json``, written by the build that compiled it), else the target's cell (an
    in-place build, or a wheel the farm did not describe). None: a CPU build."""
    from ci import wheelmeta
    from ci.audit.describe import FILE

    if wheel is not None:
        with wheelmeta.open_wheel(wheel) as zf:
            member = f"{wheelmeta.dist_info_dir(zf, wheel)}/{FILE}"
            document = zf.read(member) if member in zf.namelist() else None
        if document is not None:
            with contextlib.suppress(ValueError):
                recorded = json.loads(document)
                if isinstance(recorded, dict) and isinstance(recorded.get("cuda"), (str, type(None))):
                    return recorded.get("cuda"), f"{wheel.name}'s {FILE}"
    if target.cpu:
        return None, f"{target.id}, a CPU build"
    return target.cell.cuda, f"the {target.cell.name} cell of {target.id}"


def _major(cuda: str) -> str:
    return cuda.split(".")[0]


def torch_refusal(torch: str, torch_cuda: str | None, wheel_cuda: str | None) -> str | None:
    """Why a torch (``torch.__version__``, ``torch.version.cuda``) cannot run the GPU lanes of code built with
    CUDA ``wheel_cuda`` (None: a CPU build, any CUDA torch will do); None when it can. A CPU torch has no CUDA
    runtime to load the kernels with; a torch of another CUDA major loads the other major's runtime, which a
    wheel linked against this major's does not run under (the lanes would pass on its CPU fallback, if any)."""
    if not torch_cuda:
        return f"the GPU lanes need a CUDA build of torch (torch {torch} has none)"
    if wheel_cuda and _major(torch_cuda) != _major(wheel_cuda):
        return (f"the GPU lanes need a torch of the wheel's CUDA major {_major(wheel_cuda)} "
                f"(torch {torch} is a CUDA {torch_cuda} build)")
    return None


def check_torch(info: Mapping[str, object], subject: Subject, target: Target) -> None:
    """Stop, with one line, before any lane whose torch (``info``: :func:`environment_report`) cannot run the
    wheel's kernels (:func:`torch_refusal`)."""
    from ci.universe import matrix

    cuda, source = wheel_cuda(subject.wheel, target)
    torch_cuda = info.get("cuda")
    why = torch_refusal(str(info.get("torch")), torch_cuda if isinstance(torch_cuda, str) else None, cuda)
    if why is None:
        return
    wanted = (f"a CUDA {_major(cuda)} build of torch ({matrix.PYTORCH_INDEX}/cu{cuda.replace('.', '')})" if cuda
              else "a CUDA build of torch")
    cause = ("a +cpu torch comes from an index that serves CPU wheels (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, a pip "
             "constraint)" if not isinstance(torch_cuda, str) or not torch_cuda
             else "or test a wheel built in a cell of this torch's CUDA major")
    raise MissingRequirement(why, f"{subject.python}; the wheel: CUDA {cuda or 'none'}, from {source}",
                             f"install {wanted} into the test environment; {cause}")


def junit_counts(path: Path) -> tuple[int, int, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return tests - failed - skipped, failed, skipped


def run_lane(lane: str, command: tuple[str, ...], subject: Subject, out: Path, root: Path) -> LaneResult:
    xml = out / f"junit-{lane}.xml"
    xml.unlink(missing_ok=True)
    no_writes = project_commands.no_writes_env()
    lane_env = {**subject.env(), **no_writes, "FARM_LANE": lane,
                "PYTEST_ADDOPTS": f"{no_writes['PYTEST_ADDOPTS']} --junitxml={xml}"}
    cmd = project_commands.expand(command, python=subject.python, project_root=root, out=out, wheel=subject.wheel or "")
    result = LaneResult(lane)
    with project_commands.scratch_folder() as scratch:
        code = proc.run(cmd, env=lane_env, cwd=scratch, check=False).returncode
    if xml.exists():
        result.passed, result.failed, result.skipped = junit_counts(xml)
    elif code == 0:
        result.passed = 1
    else:
        result.failed = 1
    result.status = "passed" if code == 0 else ("no tests" if code == 5 else "failed")
    result.detail = " ".join(command)
    return result


def not_configured(lane: str, key: str) -> LaneResult:
    return LaneResult(lane, status="skipped", detail=f"not configured: [tool.cuda-ext-farm.commands] {key}")


def run_sanitizer(command: tuple[str, ...], subject: Subject, out: Path, root: Path) -> LaneResult:
    result = LaneResult("sanitizer")
    tool = proc.which("compute-sanitizer") or shutil.which("compute-sanitizer")
    if tool is None:
        result.status, result.detail = "skipped", "compute-sanitizer is not on PATH"
        return result
    details = []
    for check in SANITIZER_TOOLS:
        cmd = [tool, "--tool", check, "--error-exitcode", "1",
               *project_commands.expand(command, python=subject.python, project_root=root, out=out,
                       wheel=subject.wheel or "")]
        with project_commands.scratch_folder() as scratch:
            ran = proc.run(cmd, env={**subject.env(), "FARM_LANE": "sanitizer"}, cwd=scratch, capture=True,
                           check=False)
        text = ran.stdout + ran.stderr
        fsutil.atomic_write_text(out / f"sanitizer-{check}.log", text)
        # memcheck/initcheck/synccheck: "ERROR SUMMARY: N errors"; racecheck: "... (N errors, M warnings)".
        m = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(
            r"SUMMARY: \d+ hazards? displayed \((\d+) error", text
        )
        errors = int(m.group(1)) if m else -1
        ok = ran.returncode == 0 and errors == 0
        result.passed += ok
        result.failed += not ok
        details.append(f"{check}: {errors if errors >= 0 else '?'} errors")
    result.status = "passed" if result.failed == 0 else "failed"
    result.detail = "; ".join(details)
    return result


def run_origin(subject: Subject, import_name: str) -> LaneResult:
    """The package under test came from the wheel (its environment or install folder), not a source folder."""
    result = LaneResult("origin")
    with project_commands.scratch_folder() as scratch:
        ran = proc.run(project_commands.origin_check(subject.python, import_name, *subject.pythonpath),
                env=subject.env(),
                       cwd=scratch, capture=True, check=False)
    lines = (ran.stdout + ran.stderr).strip().splitlines()
    result.detail = lines[-1] if lines else f"exit status {ran.returncode}"
    result.status = "passed" if ran.returncode == 0 else "failed"
    result.passed, result.failed = (1, 0) if ran.returncode == 0 else (0, 1)
    return result


def _grouped(target: Target, lane: str, run: Callable[[], LaneResult]) -> LaneResult:
    """One lane that runs something: a fold group and a step-summary row of its own on GitHub Actions."""
    log.target_start(f"{target.id} {lane}", "test-gpu lane")
    try:
        result = run()
    except BaseException as exc:
        log.target_end(False, str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__)
        raise
    log.target_end(result.status != "failed", f"{result.status}: {result.passed} passed, {result.failed} failed, "
                   f"{result.skipped} skipped")
    return result


def run_gpu_lanes(target: Target, subject: Subject, *, ptx: Subject | None, lanes: list[str], quick: bool,
                  out: Path) -> int:
    fsutil.writable_dir(out, "results folder", "--out", "FARM_TEST_RESULTS")
    if quick:  # in the lanes' environments, not this process's
        subject = dataclasses.replace(subject, quick=True)
        ptx = dataclasses.replace(ptx, quick=True) if ptx is not None else None
    info, gpus = _checked_environment(target, subject, ptx)
    results = _run_lanes(target, subject, ptx, lanes, gpus, out)
    _report(target, info, gpus, results, out)
    return 0


def _checked_environment(target: Target, subject: Subject,
                         ptx: Subject | None) -> tuple[dict[str, object], list[dict[str, object]]]:
    """The lanes' environment, shown, and refused unless its torch exercises the wheel's kernels on a GPU."""
    info = environment_report(subject)
    gpus = info["gpus"]
    assert isinstance(gpus, list)
    log.result(f"[bold]GPUs[/]: {escape(str(gpus))}\n[bold]driver[/]: {escape(str(info.get('driver', '?')))}  "
               f"[bold]torch[/]: {escape(str(info['torch']))}  [bold]CUDA[/]: {escape(str(info['cuda']))}\n"
               f"[bold]under test[/]: {escape(subject.description)}", markup=True)
    check_torch(info, subject, target)
    if ptx is not None and ptx.python != subject.python:
        check_torch(environment_report(ptx), ptx, target)
    if not gpus:
        raise MissingRequirement("no CUDA GPU is visible", f"torch {info['torch']}",
                                 "run test-gpu on a machine with a GPU; on CPU-only machines run the CPU tests: "
                                 f"{settings.entry('test')}")
    return info, gpus


def _run_lanes(target: Target, subject: Subject, ptx: Subject | None, lanes: list[str],
               gpus: list[dict[str, object]], out: Path) -> list[LaneResult]:
    """Each lane asked for, in order; one the project does not configure (or this machine cannot run) is
    skipped with the reason."""
    config = target.project
    configured = config.commands
    results: list[LaneResult] = []
    root = config.root
    if "default" in lanes:
        smoke = _grouped(target, "smoke", lambda: run_lane("smoke", configured.smoke, subject, out, root))
        results.append(smoke)
        if subject.wheel is not None:  # an in-place build is tested from its source folder by design
            results.append(_grouped(target, "origin", lambda: run_origin(subject, config.import_name)))
        if configured.gpu_test is None:
            results.append(not_configured("default", "gpu-test"))
        elif all(r.status == "passed" for r in results):
            gpu_test = configured.gpu_test
            results.append(_grouped(target, "default", lambda: run_lane("default", gpu_test, subject, out, root)))
    if "sanitizer" in lanes:
        sanitizer = configured.sanitizer
        results.append(_grouped(target, "sanitizer", lambda: run_sanitizer(sanitizer, subject, out, root))
                       if sanitizer else not_configured("sanitizer", "sanitizer"))
    if "ptx-jit" in lanes:
        if ptx is None:
            results.append(LaneResult("ptx-jit", status="skipped",
                                      detail="pass --ptx-wheel (build one: "
                                      f"{settings.entry('build', '--arch-list 8.0+PTX')})"))
        elif configured.gpu_test is None:
            results.append(not_configured("ptx-jit", "gpu-test"))
        else:
            gpu_test, ptx_subject = configured.gpu_test, ptx
            results.append(_grouped(target, "ptx-jit", lambda: run_lane("ptx-jit", gpu_test, ptx_subject, out, root)))
    if "multi-gpu" in lanes:
        if len(gpus) < 2:
            results.append(LaneResult("multi-gpu", status="skipped", detail=f"{len(gpus)} GPU visible"))
        elif configured.multi_gpu is None:
            results.append(not_configured("multi-gpu", "multi-gpu"))
        else:
            multi_gpu = configured.multi_gpu
            results.append(_grouped(target, "multi-gpu", lambda: run_lane("multi-gpu", multi_gpu, subject, out, root)))
    if "bench" in lanes:
        bench = configured.bench
        results.append(_grouped(target, "bench", lambda: run_lane("bench", bench, subject, out, root))
                       if bench else not_configured("bench", "bench"))
    return results


def _report(target: Target, info: Mapping[str, object], gpus: list[dict[str, object]], results: list[LaneResult],
            out: Path) -> None:
    """The lanes' table, ``summary.json``, and the error naming the lanes that failed."""
    table = Table(title=escape(f"test-gpu: {target.id} on {', '.join(str(g['name']) for g in gpus)}"))
    for col in ("lane", "passed", "failed", "skipped", "status", "detail"):
        table.add_column(col)
    for r in results:
        style = "green" if r.status == "passed" else ("red" if r.status == "failed" else "yellow")
        table.add_row(r.lane, str(r.passed), str(r.failed), str(r.skipped), f"[{style}]{escape(r.status)}[/]",
                      escape(r.detail))
    log.result(table)
    fsutil.atomic_write_json(out / "summary.json", {"target": target.id, "environment": info,
                                                    "lanes": [dataclasses.asdict(r) for r in results]})
    failed = [r.lane for r in results if r.status == "failed"]
    if failed:
        raise CommandFailed(f"{len(failed)} GPU test lanes failed", ", ".join(failed),
                            f"their output is above; JUnit XML and logs are in {out}")
