"""The release dry run's rehearsal of the release workflow's jobs: the commands the generated workflow runs
(``ci/gha/jobs.py``), run here the way the workflow runs them.

What differs from GitHub, and why it keeps the check honest:

* PyTorch's indexes (download.pytorch.org) cannot be reached here. For the CUDA import test the torch from
  pip's own index replaces ``--torch-index …/cu130``: PyTorch publishes on PyPI exactly the build of its
  ``cu<shapes.TorchRelease.cuda>`` index, which is the index ``import_steps.torch_cuda_index`` names. For the CPU-only
  import test pip's own indexes replace ``--torch-index …/cpu``, and the torch is the first of these that pip can
  see there (``release_checks.choose_cpu_torch``; the manifest records which): the CPU build ``--cpu-torch`` names
  when it fits the wheel (a stable-ABI wheel: at or above its floor; a classic one: its own torch minor), the CPU
  build of the wheel's own torch, else PyPI's build of it (a CUDA build) imported with ``CUDA_VISIBLE_DEVICES=""``,
  torch's CPU-only path. PyPI has no CPU builds: a machine whose pip sees PyPI alone takes the last.
* Each command runs as ``python -m ci …`` in the farm's own interpreter, in the project's folder, as the
  workflow's step does; the test environment uses the target's CPython (``--test-python``), found as
  ``FARM_PYTHON_3_10`` or ``python3.10``.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ci import proc
from ci.release import import_steps
from ci.universe import pins, shapes

if TYPE_CHECKING:
    from ci.release.install_checks import CpuImportTorch
    from ci.release.manifest import Manifest, ReleaseFile
    from ci.universe.targets import Target


def local_command(command: str, *, wheel: Path, cpu_torch: str | None, cpu_python: str | None = None) -> list[str]:
    """A generated ``python -m ci release import-test`` line as this machine runs it (see the module's note);
    ``cpu_python``: the CPython of the CPU-only import test where the CPU torch here has no wheel for the
    target's (this machine's CPU torch is one local wheel, for one CPython)."""
    words = shlex.split(command)
    if words[:3] != ["python", "-m", "ci"]:
        raise ValueError(f"not a farm command: {command}")
    args = words[3:]
    index = args.index("--torch-index")
    kind = args[args.index("--torch-kind") + 1]
    del args[index:index + 2]
    if kind == "cpu" and cpu_torch:
        args += ["--cpu-torch", cpu_torch]
    if kind == "cpu" and cpu_python:
        args[args.index("--test-python") + 1] = cpu_python
    args[args.index("import-test") + 1] = str(wheel)
    return [sys.executable, "-m", "ci", *args]


def _cpu_import(target: Target, item: ReleaseFile, cpu_torch: str | None,
                cpu_python: str | None) -> tuple[str, CpuImportTorch]:
    """The CPython and torch of a wheel's CPU-only import test here: the target's CPython, or ``cpu_python`` where
    only that one gets the CPU build ``--cpu-torch`` names (this machine's CPU torch is one wheel, for one CPython)
    and the wheel installs on it; the torch as ``python -m ci release import-test`` chooses it."""
    from ci.release.install_checks import cpu_import_torch, host_can_run

    choice = cpu_import_torch(target, target.python, index_url=None, cpu_torch=cpu_torch)
    if choice.source == "cpu-torch" or not cpu_python or cpu_python == target.python:
        return target.python, choice
    installs = target.abi3 and shapes.version_key(cpu_python) >= shapes.version_key(target.oldest_python)
    if not installs or host_can_run(item, cpu_python) is not None:
        return target.python, choice
    other = cpu_import_torch(target, cpu_python, index_url=None, cpu_torch=cpu_torch)
    return (cpu_python, other) if other.source == "cpu-torch" else (target.python, choice)


def import_tests(out: Path, manifest: Manifest, by_id: Mapping[str, Target], project_root: Path, *,
                 cpu_torch: str | None, cpu_python: str | None = None) -> dict[str, dict[str, str]]:
    """Every Linux wheel's import-test steps, from the generated workflow's own commands. The CPU-only step's check
    names the torch it used (``torch 2.10.0 (PyPI's CUDA 12.8 build, no GPU)``): the one the step's
    ``release_checks.cpu_import_torch`` chooses from what pip sees, the same choice the check makes here first."""
    from ci.release.install_checks import host_can_run

    results: dict[str, dict[str, str]] = {}
    for item in manifest.wheels:
        target = by_id[str(item.target)]
        wheel = out / "assets" / item.name
        reason = host_can_run(item, target.python)
        checks: dict[str, str] = {}
        for name, command in import_steps.import_commands(target):
            kind = "import-cpu" if "--torch-kind cpu" in command else "import-cuda"
            if reason is not None:
                checks[kind] = f"not run here: {reason}"
                continue
            here: list[str] = []
            python = target.python
            if kind == "import-cpu":
                python, choice = _cpu_import(target, item, cpu_torch, cpu_python)
                here.append(choice.record)
            local = local_command(command, wheel=wheel, cpu_torch=cpu_torch,
                                  cpu_python=python if python != target.python else None)
            proc.run(local, cwd=project_root, what=f"the workflow's step failed here: {name}",
                     hint=f"the generated command: {command}")
            if python != target.python:
                here.insert(0, f"CPython {python}")
            checks[kind] = f"ok: {name}" + (f"; here: {', '.join(here)}" if here else "")
        checks.setdefault("import-cpu", "not applicable: the project declares no cpu-libraries")
        results[item.name] = checks
    return results


def tool_installs() -> str:
    """What every job's ``pip install --require-hashes -r ci/requirements/<lock>.txt`` installs, resolved for each
    CPython and platform the lock serves (Windows jobs included): a wheel with a hash of the lock for every pin,
    from the index pip uses (``ci/universe/lockcheck/``)."""
    from ci.universe import lockcheck, pins
    from ci.universe.lockcheck import platforms

    names = pins.all_locks()
    lockcheck.require(names)
    environments = sum(len(platforms.environments(name)) for name in names)
    return f"{len(names)} locks install from wheels in each of their {environments} (CPython, platform) pairs"


def windows_toolkits(windows_targets: Sequence[Target]) -> dict[str, str]:
    """The Windows jobs' toolkit step (``python -m ci toolkit --cuda X``) for each Windows cell, run here on the
    real win_amd64 wheels: the cell's hash-pinned lock installed for win_amd64 and the farm's Python, then the
    Windows layout found in it (nvcc.exe, include, lib/x64/cudart.lib, the DLL folders). nvcc.exe cannot run here:
    the nvcc wheel's version stands in for its ``--version``. NVIDIA's installer (CUDA 12) runs on Windows only."""
    from windows.toolkit import wheels as toolkit_wheels

    results: dict[str, str] = {}
    for cell in {t.cell.name: t.cell for t in windows_targets}.values():
        assert cell.windows is not None
        if cell.windows.toolkit != "pypi":
            results[cell.name] = f"not run here: NVIDIA's {cell.windows.toolkit} runs on Windows only"
            continue
        found = toolkit_wheels.ensure_pypi(cell, probe=None, pip_platform=(
            "--platform", "win_amd64", "--python-version", pins.FARM_PYTHON, "--only-binary=:all:"))
        results[cell.name] = f"ok: nvcc {found.nvcc_version} for win_amd64 at {found.cuda_home}"
    return results
