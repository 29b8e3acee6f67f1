"""The doctor and free-threaded CPython (issue 48): a ``cp313t`` interpreter gets the ``cp313-cp313t`` wheel and
never a GIL build's (nor an abi3 one), a GIL interpreter never a free-threaded wheel. Judged for environments the
real probe printed here (tests/fixtures/doctor_free_threaded/: the farm's free-threaded CPython 3.13, the same with
packaging 23.2 in a venv, a GIL CPython 3.11), and (extended) by the probe run in both interpreters."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from ci.doctor import diagnose
from ci.doctor import wheels as doctor_wheels

ENVS = Path(__file__).resolve().parents[2] / "fixtures" / "doctor_free_threaded"
T313 = "demo_ext-1.0.0+pt2.11.cpu-cp313-cp313t-manylinux_2_28_x86_64.whl"
GIL313 = "demo_ext-1.0.0+pt2.11.cpu-cp313-cp313-manylinux_2_28_x86_64.whl"
T311 = "demo_ext-1.0.0+pt2.11.cpu-cp311-cp311t-manylinux_2_28_x86_64.whl"
GIL311 = "demo_ext-1.0.0+pt2.11.cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
ABI3 = "demo_ext-1.0.0+cpu-cp310-abi3-manylinux_2_28_x86_64.whl"

#: recorded environment -> (the wheel chosen, {wheel: text its reason must hold})
EXPECT = {
    "python313t": (T313, {GIL313: "built for CPython 3.13 with the GIL (cp313-cp313), this is free-threaded CPython "
                                  "3.13 (cp313t)",
                          ABI3: "abi3 wheels (cp310-abi3) do not load in free-threaded CPython 3.13 (cp313t)"}),
    # packaging 23.2 predates free-threaded CPython: the tags it printed are the GIL build's.
    "python313t_packaging23": (T313, {GIL313: "built for CPython 3.13 with the GIL (cp313-cp313)",
                                      ABI3: "abi3 wheels (cp310-abi3) do not load in free-threaded CPython 3.13"}),
    "python311": (GIL311, {T311: "a free-threaded wheel (cp311-cp311t): it loads only in free-threaded CPython 3.11 "
                                 "(python3.11t), this is CPython 3.11 with the GIL (cp311)",
                           T313: "a free-threaded wheel (cp313-cp313t)"}),
}


def make_wheel(folder: Path, file: str) -> Path:
    """A metadata-only CPU wheel of a classic build for torch 2.11 (stable: torch >= 2.10)."""
    _name, version, _build, tags = parse_wheel_filename(file)
    requirement = "torch>=2.10" if "abi3" in file else "torch==2.11.*"
    info = f"demo_ext-{version}.dist-info"
    files = {
        "demo_ext/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: demo-ext\nVersion: {version}\nRequires-Python: >=3.10\n"
                            f"Requires-Dist: {requirement}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                         + "".join(f"Tag: {t}\n" for t in sorted(map(str, tags))),
        f"{info}/{doctor_wheels.FARM_FILE}": json.dumps({"format": 1, "target": "demo", "cuda": None, "sass": [],
                                                         "ptx": [], "torch_requirement": requirement}),
    }
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / file, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return folder / file


@pytest.fixture
def index(tmp_path: Path) -> Path:
    for file in (T313, GIL313, T311, GIL311, ABI3):
        make_wheel(tmp_path / "wheels", file)
    return tmp_path / "wheels"


def verdicts(report: diagnose.Report) -> tuple[str | None, dict[str, str]]:
    found = report.projects["demo-ext"]
    chosen = found[0].wheel.file if found[0].fits else None
    return chosen, {v.wheel.file: "; ".join(v.reasons) for v in found if not v.fits}


@pytest.mark.parametrize("env", sorted(EXPECT))
def test_recorded_interpreter(env: str, index: Path) -> None:
    chosen, lines = EXPECT[env]
    machine = diagnose.load_env(ENVS / f"{env}.json")
    picked, reasons = verdicts(diagnose.doctor(index, machine))
    assert picked == chosen, reasons
    for file, text in lines.items():
        assert text in reasons[file], f"{file}: {reasons.get(file)}"
    free_threaded = machine.abi.endswith("t")
    # Never a wheel of the other kind of build: each one the doctor lets through is of this interpreter's.
    fitting = [f for f in (T313, GIL313, T311, GIL311, ABI3) if f not in reasons]
    assert fitting and all(("t-manylinux" in f) == free_threaded for f in fitting if "abi3" not in f)


def test_tags_of_a_packaging_that_predates_free_threading_are_not_trusted() -> None:
    raw = json.loads((ENVS / "python313t_packaging23.json").read_text())
    assert raw["python"]["abi"] == "cp313t" and raw["tags"][0].startswith("cp313-cp313-")  # what it recorded
    machine = diagnose.load_env(ENVS / "python313t_packaging23.json")
    assert str(machine.tags[0]) == "cp313-cp313t-manylinux_2_36_x86_64"
    assert not any(t.abi in ("cp313", "abi3") for t in machine.tags)
    assert any("packaging predates free-threaded CPython" in n for n in machine.notes)
    assert "CPython 3.13.5 free-threaded (cp313t;" in machine.describe()[0]
    gil = diagnose.load_env(ENVS / "python311.json")  # a GIL build's recorded tags are kept as they are
    assert [str(t) for t in gil.tags] == json.loads((ENVS / "python311.json").read_text())["tags"]


@pytest.mark.extended
@pytest.mark.parametrize("kind", ["free-threaded", "GIL"])
def test_the_probe_in_each_interpreter(kind: str, index: Path) -> None:
    """The real probe in the farm's free-threaded CPython (built once: ci/toolchain/free_threaded.py) and in a GIL
    build (python3 on PATH, else this interpreter): each gets its own build's wheel."""
    from ci.toolchain import free_threaded

    python = str(free_threaded.ensure("3.13")) if kind == "free-threaded" else shutil.which("python3") or sys.executable
    machine = diagnose.probe(python)
    assert machine.free_threaded == (kind == "free-threaded")
    picked, reasons = verdicts(diagnose.doctor(index, machine))
    minor = f"{machine.python[0]}{machine.python[1]}"
    if kind == "free-threaded":
        assert picked == T313 and "with the GIL (cp313-cp313)" in reasons[GIL313] and "abi3" in reasons[ABI3]
    else:
        assert picked == {"311": GIL311, "313": GIL313}.get(minor, ABI3)  # pip's tag preference: cpXY first
        assert all("a free-threaded wheel" in reasons[f] for f in (T313, T311))
