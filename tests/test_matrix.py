from __future__ import annotations

import dataclasses
import json

import pytest

from ci import matrix


def test_release_cell_is_found_by_version_name_and_major() -> None:
    cell = matrix.get_cell("13.0")
    assert matrix.get_cell("cu130") is cell
    assert matrix.get_cell("13") is cell
    assert cell.release


def test_unknown_cuda_version_names_the_known_ones() -> None:
    with pytest.raises(matrix.MatrixError, match=r"unknown CUDA version \(11.8\): pick one of 13\.0"):
        matrix.get_cell("11.8")


def test_cuda_torch_major_mismatch_is_refused() -> None:
    bad = dataclasses.replace(matrix.get_cell("13.0"), torch="2.10.0")
    with pytest.raises(matrix.MatrixError, match=r"CUDA 13.0 cannot be paired with torch 2.10.0.*CUDA 12.8"):
        matrix.validate(bad)
    assert "\n" not in matrix.MatrixError("a", "b", "c").line()


def test_every_cell_is_valid_and_pinned() -> None:
    for cell in matrix.CELLS:
        matrix.validate(cell)
        pin = "==" if cell.toolkit.kind == "pypi" else "="
        assert cell.toolkit.packages and all(pin in p for p in cell.toolkit.packages)
        assert all("==" in p for p in cell.toolkit.library_headers)
        assert cell.windows is not None and cell.windows.msc_ver[0] < cell.windows.msc_ver[1]


def test_arch_list_marks_only_the_newest_as_ptx() -> None:
    cell = matrix.get_cell("13.0")
    assert cell.arch_list == "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"


def test_arch_list_override_from_argument_and_environment() -> None:
    cell = matrix.resolve("13.0", "8.0;9.0+PTX")
    assert cell.sass_archs == ("8.0", "9.0") and cell.ptx_arch == "9.0"
    cell = matrix.resolve("13.0", env={"TORCH_CUDA_ARCH_LIST": "8.6 9.0"})
    assert cell.sass_archs == ("8.6", "9.0") and cell.ptx_arch == "9.0"


@pytest.mark.parametrize("value", ["", "sm_90", "9"])
def test_bad_arch_list_is_refused(value: str) -> None:
    with pytest.raises(matrix.MatrixError):
        matrix.parse_arch_list(value)


def test_torch_requirement_excludes_the_cpu_build() -> None:
    assert matrix.get_cell("13.0").torch_requirement == "torch==2.11.0,!=2.11.0+cpu"


def test_cells_serialise_for_the_json_matrix() -> None:
    data = json.loads(json.dumps([c.as_dict() for c in matrix.CELLS]))
    assert [d["cuda"] for d in data] == [c.cuda for c in matrix.CELLS]
    assert data[0]["arch_list"] == matrix.CELLS[0].arch_list


def test_torch_cuda_table_knows_every_cell_torch() -> None:
    for cell in matrix.CELLS:
        assert matrix.torch_cuda_version(cell.torch).split(".")[0] == str(cell.cuda_major)
    with pytest.raises(matrix.MatrixError, match=r"unknown torch release \(1.0.0\)"):
        matrix.torch_cuda_version("1.0.0")


def test_torch_releases_are_looked_up_by_minor_or_patch() -> None:
    assert matrix.get_torch("2.12").version == "2.12.1"
    assert matrix.get_torch("2.12.0").version == "2.12.0"
    assert matrix.get_torch("2.11.0+cu130").version == "2.11.0"
    versions = [r.version for r in matrix.TORCH_RELEASES]
    assert versions == sorted(versions, key=matrix.version_key)
