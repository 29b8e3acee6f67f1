"""Free-threaded CPythons in the universe (issue 48): read from torch's own files on PyPI (the recorded snapshot of
tests/fixtures/pypi_torch/), written into TORCH_RELEASES by adopt-torch, and targets of their own (``cp313t`` in
the id, ``cp313-cp313t`` in the wheel tag), in classic and abi3 projects alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ci.errors import TargetError
from ci.universe import adoption, matrix, project, pypi_torch, shapes, targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select
from ci.universe.targets import axes
from ci.universe.tomlvalues import ConfigError

SNAPSHOT = Path(__file__).resolve().parents[2] / "fixtures" / "pypi_torch"


def load(tmp_path: Path, table: str, requires_python: str = ">=3.10") -> project.ProjectConfig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "ft"\nversion = "1"\nrequires-python = '
                                             f'"{requires_python}"\n\n[tool.cuda-ext-farm]\n{table}')
    (tmp_path / "setup.py").write_text("")
    return reading.load(tmp_path)


def test_pypi_gives_each_release_its_free_threaded_pythons() -> None:
    snapshot = pypi_torch.Recorded(SNAPSHOT)
    seen = {v: pypi_torch.observe(v, snapshot) for v in ("2.8.0", "2.11.0", "2.12.1", "2.15.0")}
    assert {v: r.free_threaded for v, r in seen.items()} == {
        "2.8.0": ("3.13",), "2.11.0": ("3.13", "3.14"), "2.12.1": ("3.14",), "2.15.0": ("3.14", "3.15")}
    assert "3.13" in seen["2.11.0"].pythons and not any(p.endswith("t") for p in seen["2.11.0"].pythons)
    # The table is what adopt-torch read: each free-threaded CPython after its GIL build.
    assert matrix.get_torch("2.11").labels == ("3.10", "3.11", "3.12", "3.13", "3.13t", "3.14", "3.14t")


def test_check_names_a_table_that_lacks_them(tmp_path: Path) -> None:
    stale = [dataclasses.replace(r, free_threaded=()) if r.minor == "2.11" else r for r in matrix.TORCH_RELEASES]
    copy = tmp_path / "matrix.py"
    copy.write_text(adoption.MATRIX_FILE.read_text())
    said: list[str] = []
    assert adoption.adopt(True, source=pypi_torch.Recorded(SNAPSHOT), table=stale, matrix_file=copy,
                          say=said.append) == 1
    assert said == ["torch 2.11.0: free_threaded () in the table, ('3.13', '3.14') on PyPI"]


def test_an_entry_with_a_line_that_ends_in_a_tuple_is_read_whole() -> None:
    """A wrapped entry whose first line ends in ``"3.15"),`` (its free-threaded tuple) is one entry, not half."""
    text = ('\nTORCH_RELEASES: tuple[TorchRelease, ...] = (\n'
            '    TorchRelease("9.1.0", "13.2", ("3.14",), free_threaded=("3.14", "3.15"),\n'
            '                 aarch64=True, cxx=20),\n'
            '    TorchRelease("9.2.0", "13.2", ("3.14",)),\n)\n')
    found = adoption.entries(text)
    assert list(found) == ["9.1.0", "9.2.0"] and found["9.1.0"].endswith("cxx=20),\n")
    # The table's own newest entry is written so (test_adoption renders every entry byte for byte).
    assert '"3.15"),\n' in adoption.entries(adoption.MATRIX_FILE.read_text())[matrix.TORCH_RELEASES[-1].version]


def test_free_threaded_wheels_still_uploading_are_an_upload_in_progress() -> None:
    newest, before = matrix.TORCH_RELEASES[-1], matrix.TORCH_RELEASES[-2]
    snapshot = pypi_torch.Recorded(SNAPSHOT)

    class Partial:
        def files(self, project: str) -> list[pypi_torch.pages.IndexFile]:
            return [f for f in snapshot.files(project)
                    if not (f.filename.startswith(f"torch-{newest.version}-") and "t-win_amd64" in f.filename)]

    incomplete = pypi_torch.upload_incomplete(Partial(), newest.version, before.version)  # type: ignore[arg-type]
    assert incomplete is not None
    assert incomplete.what.endswith("with its platforms' free-threaded CPythons differ (manylinux_2_28_x86_64 3.14 "
                                    "3.15; manylinux_2_28_aarch64 3.14 3.15; win_amd64 none)")
    assert pypi_torch.upload_incomplete(snapshot, newest.version, before.version) is None


def test_python_313t_selects_a_free_threaded_target(tmp_path: Path) -> None:
    config = load(tmp_path, 'torch = ["2.11"]\npython = ["3.12", "3.13t"]\n')
    assert config.python == ("3.12", "3.13t")
    gil, threaded = targets.targets_for(config)
    assert (gil.id, threaded.id) == ("ft-torch2.11-cu130-cp312-linux_x86_64", "ft-torch2.11-cu130-cp313t-linux_x86_64")
    assert (threaded.python, threaded.python_tag, threaded.wheel_tag_prefix) == ("3.13t", "cp313t", "cp313-cp313t")
    assert threaded.free_threaded and not gil.free_threaded and threaded.abi3_floor is None
    data = threaded.as_dict()
    assert (data["wheel_tag"], data["free_threaded"], data["python"]) == ("cp313-cp313t-linux_x86_64", True, "3.13t")
    (windows,) = [t for t in targets.targets_for(config, "windows") if t.free_threaded]
    assert windows.as_dict()["wheel_tag"] == "cp313-cp313t-win_amd64"
    late = dataclasses.replace(config, torch=("2.13",), python=("3.13t",))
    with pytest.raises(TargetError, match=r"python names no Python the selected torch releases have wheels for "
                                          r"\(3.13t\): torch 2.13 has wheels for Python 3.10 to 3.14; free-threaded "
                                          r"3.14t"):
        targets.targets_for(late)


def test_the_key_adds_every_free_threaded_python_the_project_allows(tmp_path: Path) -> None:
    """``free-threaded`` (default true) adds the free-threaded CPythons where no ``python`` list is given; false
    opts out; a list is exact whatever the default."""
    config = load(tmp_path / "a", 'torch = ["2.11"]\n')
    assert config.free_threaded
    assert [t.python for t in targets.targets_for(config)] == ["3.10", "3.11", "3.12", "3.13", "3.13t", "3.14", "3.14t"]
    off = load(tmp_path / "off", 'torch = ["2.11"]\nfree-threaded = false\n')
    assert [t.python for t in targets.targets_for(off)] == ["3.10", "3.11", "3.12", "3.13", "3.14"]
    narrow = load(tmp_path / "b", 'torch = ["2.11"]\n', requires_python=">=3.14")
    assert [t.python for t in targets.targets_for(narrow)] == ["3.14", "3.14t"]
    spec = load(tmp_path / "c", 'torch = ["2.11"]\npython = "<3.14"\n')
    assert [t.python for t in targets.targets_for(spec)] == ["3.10", "3.11", "3.12", "3.13", "3.13t"]
    listed = load(tmp_path / "d", 'torch = ["2.11"]\npython = ["3.12", "3.13"]\n')
    assert [t.python for t in targets.targets_for(listed)] == ["3.12", "3.13"]


@pytest.mark.parametrize(("table", "message"), [
    ('free-threaded = "yes"', r'free-threaded must be true or false \('),
    ('free-threaded = false\npython = ["3.12", "3.13t"]',
     r"python names a free-threaded CPython but free-threaded = false \(3.13t\): drop"),
    ('free-threaded = true\npython = ["3.12"]', r"names no free-threaded CPython \(a python list is exact\) \(3.12\)"),
    ('python = ["3.13T"]', r'python has a bad version \(3.13T\): write versions like \["3.11", "3.12", "3.13t"\]'),
])
def test_the_key_is_refused_in_one_line(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, table + "\n")


def test_abi3_does_not_cover_a_free_threaded_python(tmp_path: Path) -> None:
    """A stable-ABI project: each cell's abi3 wheel, and a per-Python wheel for each free-threaded CPython of the
    cell's torch; the release target stays the abi3 one."""
    config = load(tmp_path, 'abi = "stable"\ncuda = ["13.0"]\n')
    built = targets.targets_for(config)
    assert [t.id for t in built] == ["ft-stable-cu130-cp310abi3-linux_x86_64", "ft-stable-cu130-cp313t-linux_x86_64",
                                     "ft-stable-cu130-cp314t-linux_x86_64"]
    assert [(t.abi3, t.wheel_tag_prefix) for t in built] == [(True, "cp310-abi3"), (False, "cp313-cp313t"),
                                                             (False, "cp314-cp314t")]
    assert built[1].torch == matrix.get_cell("13.0").torch and built[1].local_version == ""
    assert targets.default_target(config).id == "ft-stable-cu130-cp310abi3-linux_x86_64"
    assert targets.default_target(config, prefer_python="3.14t").id == "ft-stable-cu130-cp314t-linux_x86_64"
    only = dataclasses.replace(config, python=("3.13t",))
    assert [t.id for t in targets.targets_for(only)] == ["ft-stable-cu130-cp313t-linux_x86_64"]


def test_python_asks_for_the_free_threaded_wheel_or_the_abi3_one(tmp_path: Path) -> None:
    config = load(tmp_path, 'python-abi = "abi3"\ntorch = ["2.11"]\n')
    (threaded,) = select(config, Selection(python="3.13t"))
    assert threaded.id == "ft-torch2.11-cu130-cp313t-linux_x86_64"
    (abi3,) = select(config, Selection(python="3.12"))
    assert abi3.id == "ft-torch2.11-cu130-cp310abi3-linux_x86_64" and abi3.python == "3.12"
    with pytest.raises(TargetError, match=r"has no target for Python \(3.15t\)"):
        select(config, Selection(python="3.15t"))


def test_a_free_threaded_label_sorts_after_its_gil_build() -> None:
    assert shapes.version_key("3.13t") == (3, 13) and shapes.version_key("2.11.0+cu130") == (2, 11, 0)
    assert sorted(["3.14t", "3.13", "3.14", "3.10", "3.13t"], key=shapes.python_order) == [
        "3.10", "3.13", "3.13t", "3.14", "3.14t"]
    assert axes.sorted_versions(["3.14t", "3.14", "3.13t"]) == ["3.13t", "3.14", "3.14t"]


CLASSIC = Path(__file__).resolve().parents[2] / "fixtures" / "classic_ext"


def test_matrix_of_the_classic_fixture_lists_cp313t_for_torch_2_11(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``matrix`` on the classic fixture without its python list (the default: every CPython torch has wheels for,
    the free-threaded ones too): torch 2.11's cp313t and cp314t targets, and torch 2.13's cp314t; with the
    fixture's own list (3.11, 3.12), exact, none."""
    import json
    import shutil

    from ci import __main__ as entry

    project_dir = tmp_path / "classic"
    shutil.copytree(CLASSIC, project_dir)
    pyproject = project_dir / "pyproject.toml"
    pyproject.write_text("\n".join(line for line in pyproject.read_text().splitlines()
                                   if not line.startswith("python = ")) + "\n")
    assert entry.main(["matrix", "--project", str(project_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = {row["id"] for row in rows["targets"]}
    assert {"classic_ext-torch2.11-cu130-cp313t-linux_x86_64", "classic_ext-torch2.11-cu130-cp314t-linux_x86_64",
            "classic_ext-torch2.13-cu130-cp314t-linux_x86_64"} <= ids
    assert "classic_ext-torch2.13-cu130-cp313t-linux_x86_64" not in ids  # torch 2.13 has no cp313t wheel
    assert entry.main(["matrix", "--project", str(CLASSIC), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["targets"]
    assert listed and not any(row["free_threaded"] for row in listed)
