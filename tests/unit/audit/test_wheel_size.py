"""The size budget: project.max-wheel-size parsing, the audit's wheel-size check on real zip files."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from ci.audit import wheel_size
from ci.universe import project
from ci.universe.project import validation
from ci.universe.tomlvalues import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def _config(tmp_path: Path, value: object) -> project.ProjectConfig:
    return validation.parse({"max-wheel-size": value}, root=tmp_path, source=tmp_path / "pyproject.toml",
                         pyproject={"project": {"name": "demo"}})


@pytest.mark.parametrize(("value", "size"), [
    (1000, 1000), ("95 MiB", 95 * 2**20), ("90MB", 90_000_000), ("1.5 GiB", int(1.5 * 2**30)), ("512 kib", 524288),
])
def test_max_wheel_size_takes_bytes_or_a_size_with_a_unit(tmp_path: Path, value: object, size: int) -> None:
    assert _config(tmp_path, value).max_wheel_size == size


def test_max_wheel_size_defaults_to_pypis_file_limit(tmp_path: Path) -> None:
    config = validation.parse({}, root=tmp_path, source=tmp_path / "pyproject.toml",
                              pyproject={"project": {"name": "d"}})
    assert config.max_wheel_size == 100 * 2**20


@pytest.mark.parametrize("value", ["big", "-5 MiB", "0 MiB", 0, -1, True, "95 MiBs", 1.5])
def test_a_bad_max_wheel_size_is_one_line_naming_the_key(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, value)
    message = str(err.value)
    assert "max-wheel-size" in message and repr(value) in message and "\n" not in message.strip()


def _wheel(tmp_path: Path, sizes: dict[str, int]) -> Path:
    path = tmp_path / "demo-1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, size in sizes.items():
            zf.writestr(name, os.urandom(size))  # incompressible: compressed size ~ size
    return path


def test_an_over_budget_wheel_fails_naming_its_ten_largest_members(tmp_path: Path) -> None:
    sizes = {f"demo/part{i:02d}.bin": 1000 * (i + 1) for i in range(12)}
    wheel = _wheel(tmp_path, sizes)
    check = wheel_size.check_size(wheel, 20_000)
    assert not check.ok and check.name == "wheel-size"
    listed = [entry.split(" ")[0] for entry in check.detail.split("compressed: ")[1].split("; ")]
    assert listed == [f"demo/part{i:02d}.bin" for i in range(11, 1, -1)]
    assert "demo/part01.bin" not in check.detail and "over the" in check.detail


def test_a_wheel_within_its_budget_passes(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"demo/a.bin": 5000})
    check = wheel_size.check_size(wheel, wheel.stat().st_size)
    assert check.ok and "budget" in check.detail
    assert not wheel_size.check_size(wheel, wheel.stat().st_size - 1).ok
