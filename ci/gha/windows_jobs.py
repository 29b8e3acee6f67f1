"""The Windows jobs of the generated workflows (``ci/gha/jobs.py``): the MSVC toolset a cell pins, the runner image
that can hold it, the CUDA toolkit step and the one folder it caches, the build with the target's CPython."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ci.errors import UsageError
from ci.gha import actions
from ci.gha.steps import MSVC_COMPONENTS, Context, Job, Step, env_step, permissions, prologue, target_python_env, upload
from ci.universe import shapes, targets
from windows.toolkit import wheels as toolkit_wheels


def _windows_toolset_step(cell: shapes.Cell) -> Step:
    assert cell.windows is not None
    toolset = cell.windows.toolset
    if toolset not in MSVC_COMPONENTS:
        raise UsageError(f"no Visual Studio component known for the MSVC toolset of {cell.name}", toolset,
                         f"add it to MSVC_COMPONENTS in ci/gha/jobs.py (known: {', '.join(MSVC_COMPONENTS)})")
    component = MSVC_COMPONENTS[toolset][0]
    low, high = cell.windows.msc_ver
    script = (
        '$vswhere = "${env:ProgramFiles(x86)}\\Microsoft Visual Studio\\Installer\\vswhere.exe"\n'
        "$vs = & $vswhere -latest -products * -property installationPath\n"
        f'if (Test-Path "$vs\\VC\\Tools\\MSVC\\{toolset}.*") {{ "MSVC {toolset} is installed in $vs"; exit 0 }}\n'
        '$installer = "${env:ProgramFiles(x86)}\\Microsoft Visual Studio\\Installer\\vs_installer.exe"\n'
        f"$arguments = @('modify', '--installPath', \"`\"$vs`\"\", '--add', '{component}', '--quiet', "
        "'--norestart', '--nocache')\n"
        "$process = Start-Process -FilePath $installer -ArgumentList $arguments -Wait -PassThru\n"
        f'if (-not (Test-Path "$vs\\VC\\Tools\\MSVC\\{toolset}.*")) {{\n'
        f'  throw "MSVC {toolset} did not install (vs_installer exit code $($process.ExitCode))"\n'
        "}\n"
    )
    return {"name": f"MSVC toolset {toolset} (CUDA {cell.cuda} accepts _MSC_VER {low}-{high - 1})",
            "timeout-minutes": 30, "shell": "pwsh", "run": script}


def windows_runner(cell: shapes.Cell) -> str:
    assert cell.windows is not None
    if cell.windows.toolset not in MSVC_COMPONENTS:
        _windows_toolset_step(cell)  # raises the one-line error
    return MSVC_COMPONENTS[cell.windows.toolset][1]


#: The farm's cache on Windows runners: short (MAX_PATH) and fixed, so the generated cache step can name the
#: toolkit folder the toolkit step fills and the build reads (windows/toolkit/wheels.py ``cached_folder``).
WINDOWS_CACHE = "C:\\farm"


def toolkit_cache_key(cell: shapes.Cell) -> str:
    """Changes whenever the cell's Windows toolkit pins or its locks change (drift shows it)."""
    assert cell.windows is not None
    pins = json.dumps({"cuda": cell.cuda, "windows": dataclasses.asdict(cell.windows),
                       "folder": toolkit_wheels.install_name(cell)}, sort_keys=True)
    return f"cuda-toolkit-windows-{cell.name}-{hashlib.sha256(pins.encode()).hexdigest()[:16]}"


def build_python(target: targets.Target) -> str:
    """abi3 wheels build with the cell's Python (any later one works); per-Python wheels with their own."""
    return target.cell.python if target.abi3 else target.python


def windows_build_job(ctx: Context, target: targets.Target) -> Job:
    cell = target.cell
    assert cell.windows is not None
    facts = cell.windows
    what = ", ".join(facts.packages) if facts.packages else "the cell's PyPI toolkit wheels"
    python = build_python(target)
    steps: list[Step] = [
        *prologue(ctx, target_python=python),
        _windows_toolset_step(cell),
        {"name": "Restore the CUDA toolkit (not in a release: inputs.cache is false there)", "if": "inputs.cache",
         "uses": actions.CACHE.uses(),
         "with": {"path": str(toolkit_wheels.cached_folder(cell, WINDOWS_CACHE)), "key": toolkit_cache_key(cell)}},
        {"name": f"CUDA {cell.cuda} toolkit ({facts.toolkit}: {what})", "timeout-minutes": 30,
         "run": f"python -m ci toolkit --cuda {cell.cuda}"},
        {"name": f"Build with CPython {python}, repair (delvewheel), audit with MSVC {facts.toolset}",
         **env_step(target_python_env(python)),
         "run": f"python -m ci build-win --target {target.id} --wheelhouse wheelhouse"},
        upload(f"wheel-{target.id}", f"wheelhouse/{target.id}/"),
    ]
    return {"name": f"build {target.id}", "runs-on": windows_runner(cell), "timeout-minutes": 180,
            "permissions": permissions(contents="read"), "env": {"FARM_CACHE_DIR": WINDOWS_CACHE}, "steps": steps}
