"""``python -m ci build-win`` and ``matrix`` as a user sees them on Linux; the hooks stay standard-library only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci import cli, options
from ci.universe import matrix

ROOT = Path(__file__).resolve().parents[3]


def _farm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)


@pytest.mark.skipif(sys.platform == "win32", reason="the Linux behaviour")
@pytest.mark.parametrize("args", [(), ("--cuda", "13"), ("--cuda", "12"), ("--toolset", "14.44", "--cuda", "13.2")])
def test_build_win_exits_at_once_off_windows(args: tuple[str, ...]) -> None:
    result = _farm("build-win", *args)
    assert result.returncode == 3
    last = (result.stdout + result.stderr).strip().splitlines()[-1]
    assert last == ("error: Windows builds need a Windows host with Visual Studio (linux): run this on Windows "
                    "(or in the GitHub Actions release workflow)")


def test_build_win_options() -> None:
    opts = cli.parse(["build-win", "--cuda", "13", "--toolset", "14.44", "--dll-path", "C:/a", "--dll-path", "C:/b",
                      "--refresh-vcvars", "--no-smoke", "--max-jobs", "4"])
    args = opts.args
    assert (args.toolset, args.dll_path, args.refresh_vcvars, args.no_smoke, opts.max_jobs) == \
        ("14.44", ("C:/a", "C:/b"), True, True, 4)
    assert opts.settings.get("FARM_MSVC_TOOLSET") == "14.44" and opts.settings.source("FARM_MSVC_TOOLSET") == "flag"
    # The nox sessions' selection: one stable-ABI wheel per CUDA major, its release cell.
    for major, cuda in (("13", "13.0"), ("12", "12.8")):
        chosen = options.resolve(cli.parse(["build-win", "--cuda", major]), os_name="windows")
        assert [t.id for t in chosen] == [f"fusedops-stable-cu{cuda.replace('.', '')}-cp310abi3-win_amd64"]


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


def test_matrix_shows_the_windows_facts() -> None:
    result = _farm("matrix", "--os", "windows", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    msvc = {t["cuda"]: t["msvc"] for t in data["targets"]}
    # fusedops has a Windows target in every cell but the local stand-ins, each with its cell's facts.
    assert msvc == {
        c.cuda: {"msc_ver": list(c.windows.msc_ver), "toolset": c.windows.toolset, "toolkit": c.windows.toolkit}
        for c in matrix.CELLS if c.windows is not None and not c.stand_in_for
    }
    assert msvc["13.0"] == {"msc_ver": [1920, 1950], "toolset": "14.44", "toolkit": "pypi"}
    table = _farm("matrix", "--os", "windows")
    assert "1920-1949" in table.stdout and "MSVC 14.44" in table.stdout and "nvidia-installer" in table.stdout


def test_every_cell_has_windows_facts() -> None:
    for cell in matrix.CELLS:
        assert cell.windows is not None, cell.name
        low, high = cell.windows.msc_ver
        assert 1900 < low < high
        if cell.windows.toolkit == "nvidia-installer":
            assert cell.windows.installer.startswith("https://developer.download.nvidia.com/")
            assert all(p.endswith("_" + cell.cuda) for p in cell.windows.packages)
