"""abi3 floors (issue 19): a target's build Python and the oldest CPython its abi3 wheel serves are two things.

The pytorch/extension-cpp template builds ``Py_LIMITED_API=0x03090000`` (cp39-abi3) wheels with whatever
Python builds them; the farm's ids, its wheel-tag check and ``--python`` must read the floor from
``requires-python``, not from the build Python.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from ci.audit import checks, naming, wheel_audit
from ci.errors import TargetError
from ci.universe import build_files, project, targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[3]
PLATFORM = "manylinux_2_28_x86_64"


def write_project(tmp_path: Path, table: str, requires_python: str | None = ">=3.9") -> project.ProjectConfig:
    requires = f'requires-python = "{requires_python}"\n' if requires_python else ""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "tmpl"\nversion = "0.1.0"\n{requires}\n[tool.cuda-ext-farm]\n{table}')
    (tmp_path / "setup.py").write_text("")
    return reading.load(tmp_path)


def template(tmp_path: Path, requires_python: str | None = ">=3.9") -> targets.Target:
    """The extension-cpp shape: a classic abi3 project built with CPython 3.12 only."""
    config = write_project(tmp_path, 'python-abi = "abi3"\ntorch = ["2.11"]\npython = ["3.12"]\n', requires_python)
    (target,) = targets.targets_for(config)
    return target


def wheel_tag(target: targets.Target, interpreter_abi: str) -> checks.Check:
    (check,) = [c for c in naming.check_tags(Path(f"tmpl-0.1.0-{interpreter_abi}-{PLATFORM}.whl"), target)[1]
                if c.name == "wheel-tag"]
    return check


@pytest.mark.parametrize(("spec", "floor"), [
    (">=3.9", "3.9"), (">3.9", "3.9"), (">=3.9.2,<4", "3.9"), ("~=3.10", "3.10"), ("==3.11.*", "3.11"),
    (">=3.8,>=3.10", "3.10"), ("<4", None), ("!=3.10.*", None),
])
def test_declared_floor_is_the_lower_bound_minor(spec: str, floor: str | None) -> None:
    assert build_files.declared_floor(SpecifierSet(spec)) == floor
    assert build_files.declared_floor(None) is None


def test_floor_comes_from_requires_python_not_the_build_python(tmp_path: Path) -> None:
    target = template(tmp_path)
    assert target.id == "tmpl-torch2.11-cu130-cp39abi3-linux_x86_64"
    assert (target.python, target.oldest_python, target.wheel_tag_prefix) == ("3.12", "3.9", "cp39-abi3")
    data = target.as_dict()
    assert (data["python"], data["abi3_floor"], data["wheel_tag"]) == ("3.12", "3.9", "cp39-abi3-linux_x86_64")


def test_without_requires_python_the_floor_is_the_lowest_python_of_the_target(tmp_path: Path) -> None:
    target = template(tmp_path, requires_python=None)
    assert target.id == "tmpl-torch2.11-cu130-cp312abi3-linux_x86_64" and target.oldest_python == "3.12"


def test_a_stable_project_builds_with_a_torch_python_but_keeps_its_floor(tmp_path: Path) -> None:
    config = write_project(tmp_path, 'abi = "stable"\ncuda = ["13.0"]\n')
    (target,) = [t for t in targets.targets_for(config) if t.abi3]
    assert target.id == "tmpl-stable-cu130-cp39abi3-linux_x86_64"
    assert target.python == "3.10" and target.oldest_python == "3.9"


def test_fusedops_ids_keep_their_floor() -> None:
    built = targets.targets_for(reading.load(ROOT))
    abi3 = [t for t in built if not t.free_threaded]
    assert {t.python_tag for t in abi3} == {"cp310abi3"} and {t.python for t in abi3} == {"3.10"}
    assert {t.python_tag for t in built if t.free_threaded} == {"cp313t", "cp314t"}
    assert targets.default_target(reading.load(ROOT)).id == "fusedops-stable-cu130-cp310abi3-linux_x86_64"


def test_a_per_python_target_has_no_floor(tmp_path: Path) -> None:
    config = write_project(tmp_path, 'torch = ["2.11"]\npython = ["3.12"]\n')
    (target,) = targets.targets_for(config)
    assert target.abi3_floor is None and target.wheel_tag_prefix == "cp312-cp312"
    assert target.as_dict()["abi3_floor"] is None


def test_the_templates_cp39_wheel_passes_and_names_its_floor(tmp_path: Path) -> None:
    check = wheel_tag(template(tmp_path), "cp39-abi3")
    assert check.ok, check.detail
    assert "abi3 floor cp39 (requires-python >=3.9)" in check.detail


def test_an_older_floor_serves_every_python_of_the_target(tmp_path: Path) -> None:
    check = wheel_tag(template(tmp_path), "cp38-abi3")
    assert check.ok and "abi3 floor cp38" in check.detail


def test_a_floor_above_the_declared_one_fails(tmp_path: Path) -> None:
    check = wheel_tag(template(tmp_path), "cp311-abi3")
    assert not check.ok
    assert "would not install on CPython 3.9 to 3.10, which requires-python >=3.9 promises" in check.detail
    assert "-DPy_LIMITED_API=0x03090000" in check.detail and 'py_limited_api = "cp39"' in check.detail


def test_a_floor_above_the_build_python_fails(tmp_path: Path) -> None:
    check = wheel_tag(template(tmp_path, requires_python=None), "cp313-abi3")
    assert not check.ok and "above the build Python 3.12, so pip would never install it there" in check.detail


def test_an_abi3_target_refuses_a_per_python_wheel(tmp_path: Path) -> None:
    check = wheel_tag(template(tmp_path), "cp312-cp312")
    assert not check.ok and "expected cp39-abi3 (requires-python >=3.9) or an older cpXY-abi3" in check.detail


def test_python_selection_of_an_abi3_target_is_judged_by_its_floor(tmp_path: Path) -> None:
    config = template(tmp_path).project
    (chosen,) = select(config, Selection(python="3.10"))
    # Built and tested with the Python asked for (not silently 3.12); the wheel is the same cp39-abi3 one.
    assert (chosen.python, chosen.oldest_python) == ("3.10", "3.9")
    assert chosen.id == "tmpl-torch2.11-cu130-cp39abi3-linux_x86_64"
    assert select(config, Selection(python="3.13"))[0].python == "3.13"
    with pytest.raises(TargetError, match=r"torch 2.11 has no wheel for the Python asked for \(3.99\): its "
                       r"wheels are for .*\(the project's cp39-abi3 wheel serves every one of them\)"):
        select(config, Selection(python="3.99"))
    with pytest.raises(TargetError, match=r"builds abi3 wheels for CPython 3.9 and newer \(3.8\)"):
        select(config, Selection(python="3.8"))


def test_auditing_a_cp39_abi3_wheel_built_with_312(tmp_path: Path) -> None:
    target = template(tmp_path / "project")
    wheel = tmp_path / f"tmpl-0.1.0+{target.local_version}-cp39-abi3-{PLATFORM}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tmpl/__init__.py", "")
        zf.writestr("tmpl-0.1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: tmpl\nVersion: 0.1.0\n"
                    f"Requires-Python: >=3.9\nRequires-Dist: {target.torch_pin}\n")
    result = wheel_audit.audit_wheel(wheel, target, None, abi3audit=False)
    by_name = {c.name: c for c in result.checks}
    assert by_name["wheel-tag"].ok and "abi3 floor cp39" in by_name["wheel-tag"].detail
    assert by_name["metadata"].ok, by_name["metadata"].detail


# --- issue 32: the floor the build writes, and coverage of abi3 wheels below the target's Python ---------------


@pytest.mark.parametrize(("file", "text"), [
    ("setup.py", 'setup(options={"bdist_wheel": {"py_limited_api": "cp39"}})\n'),
    ("setup.cfg", "[bdist_wheel]\npy_limited_api = cp39\n"),
    ("setup.py", "# py_limited_api = cp37 (a comment says nothing)\n"
                 "setup(options={'bdist_wheel': {'py_limited_api': 'cp39'}})\n"),
])
def test_the_floor_comes_from_py_limited_api_before_the_build(tmp_path: Path, file: str, text: str) -> None:
    config = write_project(tmp_path, 'python-abi = "abi3"\ntorch = ["2.11"]\npython = ["3.12"]\n', None)
    (tmp_path / file).write_text(text)
    config = reading.load(tmp_path)
    assert config.limited_api_floor == "3.9"
    (target,) = targets.targets_for(config)
    assert (target.id, target.wheel_tag_prefix) == ("tmpl-torch2.11-cu130-cp39abi3-linux_x86_64", "cp39-abi3")


def test_a_build_that_says_py_limited_api_makes_the_project_abi3(tmp_path: Path) -> None:
    """pytorch/extension-cpp's shape: no python-abi key, setup.py sets py_limited_api (cp39): its wheels are abi3,
    so its targets are (before, the audit refused the built wheel's cp39-abi3 tag for a per-Python target)."""
    config = write_project(tmp_path, 'torch = ["2.11"]\npython = ["3.12"]\n', None)
    assert config.python_abi == "per-python"  # an empty setup.py says nothing
    (tmp_path / "setup.py").write_text('setup(options={"bdist_wheel": {"py_limited_api": "cp39"}} if abi3 else {})\n')
    config = reading.load(tmp_path)
    assert config.python_abi == "abi3"
    (target,) = targets.targets_for(config)
    assert target.wheel_tag_prefix == "cp39-abi3"
    (tmp_path / "pyproject.toml").write_text((tmp_path / "pyproject.toml").read_text() + 'python-abi = "per-python"\n')
    assert reading.load(tmp_path).python_abi == "per-python"  # the key, where given, decides


def test_coverage_takes_any_abi3_wheel_at_or_below_the_targets_python(tmp_path: Path) -> None:
    from ci.release import coverage

    target = template(tmp_path, requires_python=None)  # floor unknown before the build: the id says cp312abi3
    assert target.id == "tmpl-torch2.11-cu130-cp312abi3-linux_x86_64"
    local = target.local_version
    name = f"tmpl-0.1.0+{local}" if local else "tmpl-0.1.0"
    assert coverage.matches(f"{name}-cp39-abi3-{PLATFORM}.whl", target)
    assert coverage.matches(f"{name}-cp312-abi3-{PLATFORM}.whl", target)
    assert not coverage.matches(f"{name}-cp313-abi3-{PLATFORM}.whl", target)  # does not install on 3.12
    assert not coverage.matches(f"{name}-cp39-cp39-{PLATFORM}.whl", target)


def test_the_wheel_tag_failure_names_the_python_abi_key(tmp_path: Path) -> None:
    """abi3 target, per-Python wheel (and the reverse): the fix names `python-abi` and its value."""
    check = wheel_tag(template(tmp_path / "abi3"), "cp311-cp311")
    assert not check.ok
    assert ('the project has python-abi = "abi3" ([tool.cuda-ext-farm]): build with -DPy_LIMITED_API=0x03090000 '
            'and bdist_wheel py_limited_api = "cp39", or set python-abi = "per-python"') in check.detail
    config = write_project(tmp_path / "per", 'torch = ["2.11"]\npython = ["3.11"]\n')
    (target,) = targets.targets_for(config)
    (check,) = [c for c in naming.check_tags(Path(f"tmpl-0.1.0-cp311-abi3-{PLATFORM}.whl"), target)[1]
                if c.name == "wheel-tag"]
    assert not check.ok and 'expected cp311-cp311 for this target; the wheel is abi3 (py_limited_api): set ' \
        'python-abi = "abi3" in [tool.cuda-ext-farm]' in check.detail
