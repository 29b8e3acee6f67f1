"""``build-win``'s options and selection, the Windows facts of every cell; the hooks stay standard-library only
(``python -m ci build-win`` and ``matrix`` as a user sees them on Linux: tests/integration/test_win_commands.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ci import cli, options
from ci.universe import matrix

ROOT = Path(__file__).resolve().parents[3]


def test_build_win_options() -> None:
    opts = cli.parse(["build-win", "--cuda", "13", "--toolset", "14.44", "--dll-path", "C:/a", "--dll-path", "C:/b",
                      "--refresh-vcvars", "--no-smoke", "--max-jobs", "4"])
    args = opts.args
    assert (args.toolset, args.dll_path, args.refresh_vcvars, args.no_smoke, opts.max_jobs) == \
        ("14.44", ("C:/a", "C:/b"), True, True, 4)
    assert opts.settings.get("FARM_MSVC_TOOLSET") == "14.44" and opts.settings.source("FARM_MSVC_TOOLSET") == "flag"
    # The nox sessions' selection: the stable-ABI wheel of each CUDA major's release cell, and a wheel per
    # free-threaded CPython of its torch (abi3 does not cover them).
    for major, cuda in (("13", "13.0"), ("12", "12.8")):
        chosen = options.resolve(cli.parse(["build-win", "--cuda", major]), os_name="windows")
        cell = f"fusedops-stable-cu{cuda.replace('.', '')}"
        assert [t.id for t in chosen] == [f"{cell}-{p}-win_amd64" for p in ("cp310abi3", "cp313t", "cp314t")]


def test_classic_project_gets_one_wheel_per_torch_and_python() -> None:
    fixture = str(ROOT / "tests" / "fixtures" / "classic_ext")
    chosen = options.resolve(cli.parse(["build-win", "--project", fixture, "--cuda", "13"]), os_name="windows")
    assert sorted(t.id for t in chosen) == [
        "classic_ext-torch2.11-cu130-cp311-win_amd64", "classic_ext-torch2.11-cu130-cp312-win_amd64",
        "classic_ext-torch2.13-cu130-cp311-win_amd64", "classic_ext-torch2.13-cu130-cp312-win_amd64"]


def test_windows_cli_imports_only_the_standard_library() -> None:
    code = ("import sys; import windows.cli; "
            "print(','.join(sorted(m for m in ('rich', 'pefile', 'filelock', 'packaging', 'delvewheel') "
            "if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_every_cell_has_windows_facts() -> None:
    for cell in matrix.CELLS:
        assert cell.windows is not None, cell.name
        low, high = cell.windows.msc_ver
        assert 1900 < low < high
        if cell.windows.toolkit == "nvidia-installer":
            assert cell.windows.installer.startswith("https://developer.download.nvidia.com/")
            assert all(p.endswith("_" + cell.cuda) for p in cell.windows.packages)
