"""Architectures checked against the cell's toolkit before anything runs (ci/universe/archs.py): one line for an
architecture its nvcc does not compile, from --arch-list, TORCH_CUDA_ARCH_LIST or the project's cuda-archs; PTX
only where the list asks for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci import settings
from ci.errors import MatrixError, UsageError
from ci.universe import archs, project, selection, targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

CUDA13 = "7.5, 8.0, 8.6, 8.7, 8.9, 9.0, 10.0, 10.3, 11.0, 12.0, 12.1"


def test_9_9_is_refused_naming_what_the_toolkit_compiles() -> None:
    with pytest.raises(MatrixError) as err:
        selection.resolve("13.0", "9.9")
    assert err.value.line() == (f"error: architecture not supported by CUDA 13.0 (9.9): torch extensions with CUDA "
                                f"13.0 build for {CUDA13} (and +PTX of any of them): pick from those, or another "
                                "CUDA cell with --cuda")


def test_the_environment_variable_is_checked_too() -> None:
    resolved = settings.resolve({"TORCH_CUDA_ARCH_LIST": "8.0;9.9+PTX"})  # the entry reads the variable once
    with pytest.raises(MatrixError, match=r"\(9\.9\+PTX\)|\(9\.9\)"):
        selection.resolve("13.0", resolved.get("TORCH_CUDA_ARCH_LIST"))


@pytest.mark.parametrize(("cuda", "arch", "ok"), [
    ("13.0", "9.0", True), ("13.0", "9.0a", True), ("13.0", "12.0f", True), ("13.0", "11.0", True),
    ("13.0", "10.1", False),  # CUDA 13 calls Thor 11.0
    ("13.0", "7.0", False), ("13.0", "8.5", False), ("13.0", "8.6a", False),
    ("12.8", "10.1", True), ("12.8", "12.1", False), ("12.8", "12.0f", False), ("12.9", "12.0f", True),
    ("12.4", "9.0a", True), ("12.4", "10.0", False), ("12.4", "5.2", True),
    ("14.0", "9.9", True),  # a toolkit the farm does not know: nvcc judges
])
def test_compiles(cuda: str, arch: str, ok: bool) -> None:
    assert archs.compiles(cuda, arch) is ok


@pytest.mark.parametrize("arch", ["8.8", "12.0f"])
def test_what_nvcc_compiles_but_torchs_extension_builder_refuses_is_refused_too(arch: str) -> None:
    assert archs.compiles("13.0", arch) and not archs.buildable("13.0", arch)
    with pytest.raises(MatrixError, match=rf"\({arch}\)"):
        selection.resolve("13.0", arch)


def test_ptx_only_where_asked() -> None:
    cell = selection.resolve("13.0", "9.0")
    assert (cell.sass_archs, cell.ptx_arch, cell.arch_list) == (("9.0",), "", "9.0")
    cell = selection.resolve("13.0", "8.0;9.0+PTX")
    assert (cell.ptx_arch, cell.arch_list) == ("9.0", "8.0;9.0+PTX")


def _config(tmp_path: Path, table: str = "") -> project.ProjectConfig:
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "p"\nversion = "1"\n[tool.cuda-ext-farm]\n{table}\n')
    (tmp_path / "setup.py").write_text("")
    return reading.load(tmp_path)


def test_the_selection_refuses_it_before_any_build(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with pytest.raises(UsageError, match=r"architecture not supported by CUDA 13\.\d \(9\.9\)"):
        select(config, Selection(python="3.11", cuda="13.0", arch_list="9.9"))
    (target,) = select(config, Selection(python="3.11", cuda="13.0", arch_list="9.0"))
    assert target.cell.arch_list == "9.0"


def test_the_projects_cuda_archs_are_checked_when_it_is_read(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match=r"\(9\.9\)"):
        targets.default_target(_config(tmp_path, 'cuda-archs = "9.0;9.9"'))
