from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ci import cli, errors, options, settings
from ci.universe import archs, matrix, project, selection, shapes
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[3]


def test_release_cell_is_found_by_version_name_and_major() -> None:
    cell = matrix.get_cell("13.0")
    assert matrix.get_cell("cu130") is cell
    assert matrix.get_cell("13") is cell
    assert cell.release


def test_unknown_cuda_version_names_the_known_ones() -> None:
    with pytest.raises(errors.MatrixError, match=r"unknown CUDA version \(11.8\): pick one of 13\.0"):
        matrix.get_cell("11.8")


def test_cuda_torch_major_mismatch_is_refused() -> None:
    bad = dataclasses.replace(matrix.get_cell("13.0"), torch="2.10.0")
    with pytest.raises(errors.MatrixError, match=r"CUDA 13.0 cannot be paired with torch 2.10.0.*CUDA 12.8"):
        matrix.validate(bad)
    assert "\n" not in errors.MatrixError("a", "b", "c").line()


def test_every_cell_is_valid_and_pinned() -> None:
    for cell in matrix.CELLS:
        matrix.validate(cell)
        if cell.toolkit.kind == "nvidia-repo":  # dnf's name-version-release: cuda-nvcc-12-8-12.8.93-1
            series = cell.cuda.replace(".", "-")
            assert cell.toolkit.packages and all(re.fullmatch(rf"[a-z-]+-{series}-[\d.]+-\d+", p)
                                                 for p in cell.toolkit.packages)
        else:
            pin = "==" if cell.toolkit.kind == "pypi" else "="
            assert cell.toolkit.packages and all(pin in p for p in cell.toolkit.packages)
        assert all("==" in p for p in cell.toolkit.library_headers)
        assert cell.windows is not None and cell.windows.msc_ver[0] < cell.windows.msc_ver[1]


def test_arch_list_marks_only_the_newest_as_ptx() -> None:
    cell = matrix.get_cell("13.0")
    assert cell.arch_list == "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"


def test_arch_list_override_from_argument_and_environment() -> None:
    cell = selection.resolve("13.0", "8.0;9.0+PTX")
    assert cell.sass_archs == ("8.0", "9.0") and cell.ptx_arch == "9.0"
    resolved = settings.resolve({"TORCH_CUDA_ARCH_LIST": "8.6 9.0"})  # the entry reads the variable once
    cell = selection.resolve("13.0", resolved.get("TORCH_CUDA_ARCH_LIST"))
    # PTX only where the list asks for it: 9.0 stays 9.0.
    assert cell.sass_archs == ("8.6", "9.0") and cell.ptx_arch == "" and cell.arch_list == "8.6;9.0"


@pytest.mark.parametrize("value", ["", "sm_90", "9"])
def test_bad_arch_list_is_refused(value: str) -> None:
    with pytest.raises(errors.MatrixError):
        archs.parse_arch_list(value)


def test_torch_requirement_excludes_the_cpu_build() -> None:
    assert matrix.get_cell("13.0").torch_requirement == "torch==2.11.0,!=2.11.0+cpu"


def test_cells_serialise_for_the_json_matrix() -> None:
    data = json.loads(json.dumps([c.as_dict() for c in matrix.CELLS]))
    assert [d["cuda"] for d in data] == [c.cuda for c in matrix.CELLS]
    assert data[0]["arch_list"] == matrix.CELLS[0].arch_list


def test_torch_cuda_table_knows_every_cell_torch() -> None:
    for cell in matrix.CELLS:
        assert matrix.torch_cuda_version(cell.torch).split(".")[0] == str(cell.cuda_major)
    with pytest.raises(errors.MatrixError, match=r"unknown torch release \(1.0.0\)"):
        matrix.torch_cuda_version("1.0.0")


def test_torch_releases_are_looked_up_by_minor_or_patch() -> None:
    assert matrix.get_torch("2.12").version == "2.12.1"
    assert matrix.get_torch("2.12.0").version == "2.12.0"
    assert matrix.get_torch("2.11.0+cu130").version == "2.11.0"
    versions = [r.version for r in matrix.TORCH_RELEASES]
    assert versions == sorted(versions, key=shapes.version_key)


# --- a torch release selects the cells of its own CUDA major (issue 19) ---------------------------------


def _stable_project(tmp_path: Path, cuda: str) -> project.ProjectConfig:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "st"\nversion = "1"\nrequires-python = ">=3.10"\n\n'
        f'[tool.cuda-ext-farm]\nabi = "stable"\ncuda = {cuda}\n')
    (tmp_path / "setup.py").write_text("")
    return reading.load(tmp_path)


@pytest.mark.parametrize(("torch", "major"), [("2.13", 13), ("2.10", 12)])
def test_torch_alone_selects_the_cells_of_its_cuda_major(torch: str, major: int) -> None:
    # fusedops is a stable-ABI project: every cell of the torch's CUDA major, in the matrix's order.
    cells = [c.name for c in matrix.CELLS if c.cuda_major == major and not c.stand_in_for]
    assert cells
    chosen = select(reading.load(ROOT), Selection(torch=torch))
    # A local stand-in (cu124 for cu128) is no release cell of its own.
    assert [t.cell.name for t in chosen if not t.cell.stand_in_for and not t.free_threaded] == cells
    # Beside each cell's abi3 wheel, a wheel per free-threaded CPython of the cell's torch (abi3 does not cover them).
    assert [(t.cell.name, t.python) for t in chosen if not t.cell.stand_in_for and t.free_threaded] == [
        (c, f"{p}t") for c in cells for p in matrix.get_torch(matrix.get_cell(c).torch).free_threaded]
    assert {t.torch for t in chosen} == {matrix.get_torch(torch).version}


def test_build_with_torch_and_python_picks_a_cell_it_can_build() -> None:
    args = cli.session_args("build", ["--project", str(ROOT), "--torch", "2.13", "--python", "3.11"])
    (target,) = options.resolve(args)
    assert (target.cell.name, target.torch) == ("cu130", "2.13.0")


def test_torch_without_a_cell_of_its_cuda_major_names_the_torch_and_the_cells(tmp_path: Path) -> None:
    config = _stable_project(tmp_path, '["13.0", "13.2"]')
    with pytest.raises(errors.TargetError) as info:
        select(config, Selection(torch="2.10"))
    line = info.value.line()
    assert "\n" not in line
    assert line.startswith("error: torch 2.10 is built with CUDA 12.8, but none of the cells selected for st has "
                           "CUDA 12 (2.10): its cells are cu130, cu132: ")


def test_an_explicit_cuda_of_another_major_is_still_refused() -> None:
    with pytest.raises(errors.MatrixError, match=r"CUDA 12.4 cannot be paired with torch 2.11.0"):
        select(reading.load(ROOT), Selection(torch="2.11", cuda="12.4"))
