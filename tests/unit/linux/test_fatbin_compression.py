"""Fatbin compression by default (issue 33, item 1): CUDA 13 cells' builds append nvcc's --compress-mode=size,
CUDA 12 cells (drivers back to r525 that read no Zstandard fatbin) and CPU builds do not; compress-fatbin = false
leaves nvcc's default (or the project's own mode)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ci.builds import environment
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]


def test_cuda_13_cells_compress_their_fatbins_and_cuda_12_cells_do_not(tmp_path: Path) -> None:
    by_cell = {t.cell.name: t for t in targets.platform_targets(reading.load(ROOT)) if t.arch == "x86_64"}
    assert {name for name, t in by_cell.items() if environment.fatbin_compression_flags(t)} == {
        name for name, t in by_cell.items() if t.cell.cuda_major >= 13}
    assert environment.fatbin_compression_flags(by_cell["cu130"]) == "--compress-mode=size"
    assert environment.fatbin_compression_flags(by_cell["cu128"]) == ""
    assert environment.fatbin_compression_flags(dataclasses.replace(by_cell["cu130"], cpu=True)) == ""
    env = environment.farm_flags(by_cell["cu130"], "13.0", str(tmp_path))
    assert env["NVCC_APPEND_FLAGS"].endswith("--compress-mode=size")
    assert "--compress-mode" not in environment.farm_flags(by_cell["cu128"], "12.8", str(tmp_path))["NVCC_APPEND_FLAGS"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "1.0"\n'
                                             "[tool.cuda-ext-farm]\ncompress-fatbin = false\n")
    off = reading.load(tmp_path)
    assert not off.compress_fatbin
    assert not any(environment.fatbin_compression_flags(t) for t in targets.platform_targets(off))
