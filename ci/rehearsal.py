"""The release dry run's rehearsal of the release workflow's jobs: the commands the generated workflow runs
(``ci/gha.py``), run here the way the workflow runs them.

What differs from GitHub, and why it keeps the check honest:

* PyTorch's indexes (download.pytorch.org) cannot be reached here. For the CUDA import test the torch from
  pip's own index replaces ``--torch-index …/cu130``: PyTorch publishes on PyPI exactly the build of its
  ``cu<matrix.TorchRelease.cuda>`` index, which is the index ``gha.torch_cuda_index`` names. For the CPU-only
  import test ``--cpu-torch`` (a CPU torch pip can reach) replaces ``--torch-index …/cpu``.
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

from ci import gha, proc

if TYPE_CHECKING:
    from ci.release_manifest import Manifest
    from ci.targets import Target


def local_command(command: str, *, wheel: Path, cpu_torch: str | None, cpu_python: str | None = None) -> list[str]:
    """A generated ``python -m ci release --import-test`` line as this machine runs it (see the module's note);
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
    args[args.index("--import-test") + 1] = str(wheel)
    return [sys.executable, "-m", "ci", *args]


def import_tests(out: Path, manifest: Manifest, by_id: Mapping[str, Target], project_root: Path, *,
                 cpu_torch: str | None, cpu_python: str | None = None) -> dict[str, dict[str, str]]:
    """Every Linux wheel's import-test steps, from the generated workflow's own commands."""
    from ci.release_checks import host_can_run

    results: dict[str, dict[str, str]] = {}
    for item in manifest.wheels:
        target = by_id[str(item.target)]
        wheel = out / "assets" / item.name
        reason = host_can_run(item, target.python)
        checks: dict[str, str] = {}
        for name, command in gha.import_commands(target):
            kind = "import-cpu" if "--torch-kind cpu" in command else "import-cuda"
            if reason is not None:
                checks[kind] = f"not run here: {reason}"
                continue
            local = local_command(command, wheel=wheel, cpu_torch=cpu_torch, cpu_python=cpu_python)
            proc.run(local, cwd=project_root, what=f"the workflow's step failed here: {name}",
                     hint=f"the generated command: {command}")
            python = local[local.index("--test-python") + 1]
            here = [f"CPython {python}"] if python != target.python else []
            if kind == "import-cpu" and cpu_torch:
                here.append(f"CPU torch {cpu_torch}")
            checks[kind] = f"ok: {name}" + (f" (here: {', '.join(here)})" if here else "")
        checks.setdefault("import-cpu", "not applicable: the project declares no cpu-libraries")
        results[item.name] = checks
    return results


def tool_installs() -> str:
    """What every job's ``pip install --require-hashes -r ci/requirements/<lock>.txt`` installs, resolved for each
    CPython and platform the lock serves (Windows jobs included): a wheel with a hash of the lock for every pin,
    from the index pip uses (``ci/lockcheck.py``)."""
    from ci import lockcheck, pins

    names = pins.all_locks()
    lockcheck.require(names)
    environments = sum(len(lockcheck.environments(name)) for name in names)
    return f"{len(names)} locks install from wheels in each of their {environments} (CPython, platform) pairs"


def windows_toolkits(windows_targets: Sequence[Target]) -> dict[str, str]:
    """The Windows jobs' toolkit step (``python -m ci toolkit --cuda X``) for each Windows cell, run here on the
    real win_amd64 wheels: the cell's hash-pinned lock installed for win_amd64 and the farm's Python, then the
    Windows layout found in it (nvcc.exe, include, lib/x64/cudart.lib, the DLL folders). nvcc.exe cannot run here:
    the nvcc wheel's version stands in for its ``--version``. NVIDIA's installer (CUDA 12) runs on Windows only."""
    from windows import toolkit as windows_toolkit

    results: dict[str, str] = {}
    for cell in {t.cell.name: t.cell for t in windows_targets}.values():
        assert cell.windows is not None
        if cell.windows.toolkit != "pypi":
            results[cell.name] = f"not run here: NVIDIA's {cell.windows.toolkit} runs on Windows only"
            continue
        found = windows_toolkit.ensure_pypi(cell, probe=None, pip_platform=(
            "--platform", "win_amd64", "--python-version", gha.FARM_PYTHON, "--only-binary=:all:"))
        results[cell.name] = f"ok: nvcc {found.nvcc_version} for win_amd64 at {found.cuda_home}"
    return results
