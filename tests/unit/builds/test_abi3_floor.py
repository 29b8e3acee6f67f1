"""abi3 floors (issue 32): read before the build from more of what projects write, and checked against the built
wheel's tag afterwards (ci/builds/abi3.py): the id stays the one every lookup computes, the report records the
wheel's real floor, and the build says what to declare."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ci.builds import abi3, report
from ci.universe import project, targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
TAIL = "-manylinux_2_31_x86_64"


def abi3_project(tmp_path: Path, files: dict[str, str], tool: str = "") -> project.ProjectConfig:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "tmpl"\nversion = "0.1.0"\n\n[tool.cuda-ext-farm]\npython-abi = "abi3"\n'
        f'torch = ["2.11"]\npython = ["3.12"]\n{tool}')
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return reading.load(tmp_path)


@pytest.mark.parametrize(("files", "tool", "floor"), [
    # a name that holds it (the extension-cpp shape with a constant)
    ({"setup.py": 'LIMITED_API = "cp39"\nsetup(options={"bdist_wheel": {"py_limited_api": LIMITED_API}})\n'}, "",
     "3.9"),
    # scikit-build-core: [tool.scikit-build] wheel.py-api
    ({"setup.py": ""}, '\n[tool.scikit-build]\nwheel.py-api = "cp310"\n', "3.10"),
    # computed: nothing to read before the build
    ({"setup.py": 'setup(options={"bdist_wheel": {"py_limited_api": f"cp3{MINOR}"}})\n'}, "", None),
])
def test_more_shapes_of_the_floor_are_read_before_the_build(tmp_path: Path, files: dict[str, str], tool: str,
                                                           floor: str | None) -> None:
    config = abi3_project(tmp_path, files, tool)
    assert config.limited_api_floor == floor
    (target,) = targets.targets_for(config)
    assert target.python_tag == f"cp{(floor or '3.12').replace('.', '')}abi3"


def test_the_built_floor_is_the_lowest_abi3_tag() -> None:
    assert abi3.built_floor([f"cp39-abi3{TAIL}", f"cp310-abi3{TAIL}"]) == "3.9"
    assert abi3.built_floor([f"cp311-cp311{TAIL}"]) is None


def test_a_floor_only_the_wheel_shows_is_named_with_what_to_declare(tmp_path: Path) -> None:
    config = abi3_project(tmp_path, {"setup.py": 'setup(options={"bdist_wheel": {"py_limited_api": f"cp3{M}"}})\n'})
    (target,) = targets.targets_for(config)
    assert target.id == "tmpl-torch2.11-cu130-cp312abi3-linux_x86_64"  # nothing read before the build
    assert abi3.mismatch(target, [f"cp312-abi3{TAIL}"]) is None
    assert abi3.mismatch(target, [f"cp39-abi3{TAIL}"]) == (
        "the wheel is cp39-abi3 but the target's id names cp312abi3: the farm read no floor from the project before "
        'the build; declare it (requires-python = ">=3.9" in [project], or a literal py_limited_api = "cp39" in '
        "[tool.distutils.bdist_wheel], setup.cfg or setup.py) and the id names cp39abi3")
    declared = abi3_project(tmp_path, {"setup.py": ""}, "").root / "pyproject.toml"
    declared.write_text(declared.read_text().replace('version = "0.1.0"\n', 'version = "0.1.0"\n'
                                                     'requires-python = ">=3.9"\n'))
    (fixed,) = targets.targets_for(reading.load(tmp_path))
    assert fixed.id == "tmpl-torch2.11-cu130-cp39abi3-linux_x86_64"  # what the note says makes the id right
    assert abi3.mismatch(fixed, [f"cp39-abi3{TAIL}"]) is None
    per_python = dataclasses.replace(target, project=dataclasses.replace(target.project, python_abi="per-python"))
    assert abi3.mismatch(per_python, [f"cp39-abi3{TAIL}"]) is None  # the wheel-tag check speaks there


def test_fusedops_keeps_its_id_and_the_report_records_the_floor(tmp_path: Path) -> None:
    target = targets.default_target(reading.load(ROOT))
    assert target.id == "fusedops-stable-cu130-cp310abi3-linux_x86_64"
    assert abi3.mismatch(target, [f"cp310-abi3{TAIL}"]) is None
    rep = report.BuildReport(target.id, "fusedops", "host", f"fusedops-0.1.0-cp310-abi3{TAIL}.whl", "0" * 64, 1,
                             (f"cp310-abi3{TAIL}",), ("sm_90",), (), "13.0", "2.11.0", "3.10", 1.0, (),
                             abi3_floor=abi3.built_floor([f"cp310-abi3{TAIL}"]))
    report.write_report(rep, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["abi3_floor"] == "3.10"
