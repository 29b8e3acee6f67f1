"""Small by construction, on a real build (issue 33, item 1): tests/fixtures/tiny_ext built CPU-only through
``python -m ci build``: its library loses ~10 MB of DWARF, kept in ``debug/<build-id>.debug`` beside the wheel;
the rebuild gives the same bytes; ``strip-debug = false`` keeps the DWARF in the wheel (the audit warns)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci.audit import debug_info

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
TARGET = "tiny_ext-torch2.13-cpu-cp311-linux_x86_64"

# A full build with DWARF: nox -s tests-extended.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def build(project: Path, out: Path) -> tuple[Path, dict[str, object]]:
    result = subprocess.run([sys.executable, "-m", "ci", "build", "--project", str(project), "--cpu", "--max-jobs",
                             "1", "--wheelhouse", str(out / "wh"), "--build-dir", str(out / "build")], cwd=ROOT,
                            env={**os.environ, "COLUMNS": "250", "PYTHONPATH": str(ROOT)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    assert result.returncode == 0, result.stdout[-5000:]
    folder = out / "wh" / TARGET
    [wheel] = folder.glob("*.whl")
    return wheel, json.loads((folder / "report.json").read_text())


def library_of(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        [member] = [n for n in zf.namelist() if n.endswith(".so")]
        zf.extract(member, dest)
    return dest / member


def test_the_tiny_fixture_ships_without_its_dwarf_and_keeps_it_by_build_id(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    shutil.copytree(TINY, project, ignore=shutil.ignore_patterns("build", "wheelhouse", "*.egg-info"))
    wheel, report = build(project, tmp_path / "out")
    split = report["debug_split"]
    assert isinstance(split, dict)
    [lib] = split["libraries"]
    print(f"\n{lib['member']}: {lib['before']} -> {lib['after']} bytes; wheel {split['wheel_before']} -> "
          f"{split['wheel_after']} bytes; {lib['debug_file']} {lib['debug_bytes']} bytes")
    assert lib["before"] > 10 * lib["after"]  # the 10.7 MB of DWARF around the code
    so = library_of(wheel, tmp_path / "unpacked")
    assert so.stat().st_size == lib["after"] and debug_info.debug_sections(so) == {}
    debug = wheel.parent / "debug" / lib["debug_file"]
    assert debug_info.build_id(debug) == debug_info.build_id(so) == lib["build_id"]
    assert ".debug_info" in debug_info.debug_sections(debug)
    checks = {c["name"]: c for c in report["checks"]}  # type: ignore[attr-defined]
    assert checks["debug-info"]["ok"] and not checks["debug-info"]["warn"]
    assert checks["fatbin"]["detail"] == "no library holds a fatbin"
    with zipfile.ZipFile(wheel) as zf:
        assert not [n for n in zf.namelist() if n.endswith(".debug")]  # never in the wheel

    # Again: the same bytes, the same debug file.
    digest = report["sha256"]
    again, report2 = build(project, tmp_path / "out")
    assert report2["sha256"] == digest and again.read_bytes() == wheel.read_bytes()
    assert sorted(p.name for p in (wheel.parent / "debug").iterdir()) == [lib["debug_file"]]

    # strip-debug = false: the wheel keeps its DWARF, the audit says so, the debug folder holds nothing stale.
    with (project / "pyproject.toml").open("a") as fh:
        fh.write("strip-debug = false\n")
    kept, report3 = build(project, tmp_path / "out")
    assert report3["debug_split"] is None
    assert sum(debug_info.debug_sections(library_of(kept, tmp_path / "kept")).values()) > 1_000_000
    checks = {c["name"]: c for c in report3["checks"]}  # type: ignore[attr-defined]
    assert checks["debug-info"]["ok"] and checks["debug-info"]["warn"]
    assert "strip-debug = false" in checks["debug-info"]["detail"]
    assert list((wheel.parent / "debug").glob("*.debug")) == []
