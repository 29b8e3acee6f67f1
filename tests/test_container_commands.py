"""Unit tests of image specs, tags and the docker/cibuildwheel command lines (no engine needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ci import images, matrix, shell, wheels

CELL = matrix.get_cell("13.0")
BASE = f"{images.BASE_REPO}:bookworm"


def test_tag_is_stable_and_changes_with_the_cell() -> None:
    a = images.spec_for(CELL, BASE)
    assert a.tag == images.spec_for(CELL, BASE).tag
    other = dataclasses.replace(CELL, torch="2.12.0")
    assert images.spec_for(other, BASE).tag != a.tag
    assert a.tag.startswith(f"{images.IMAGE_REPO}:cu130-")


def test_each_cell_gets_its_own_debian_suite() -> None:
    assert images.spec_for(matrix.get_cell("12.4"), BASE).base_image == f"{images.BASE_REPO}:trixie"
    assert images.base_image_for(CELL, {"FARM_BASE_IMAGE": images.BASE_REPO}) == BASE
    assert images.base_image_for(CELL, {}) == CELL.base_image


def test_debian_toolkit_cell_refuses_a_manylinux_base() -> None:
    with pytest.raises(images.ImageError, match="Debian packages"):
        images.spec_for(matrix.get_cell("12.4"), matrix.MANYLINUX_2_28)


def test_build_command_passes_the_ca_as_a_secret(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("SECRET-CA")
    cmd = images.build_command(images.spec_for(CELL, BASE), ca)
    assert f"id=cacert,src={ca}" in cmd
    assert not any("SECRET-CA" in part for part in cmd)
    assert f"BASE_IMAGE={BASE}" in cmd


def test_build_args_pin_the_toolkit_and_compiler() -> None:
    args = dict(images.spec_for(CELL, BASE).build_args)
    assert "nvidia-cuda-nvcc==13.0.88" in args["TOOLKIT_PACKAGES"]
    assert "g++-12=12.2.0-14+deb12u1" in args["OS_PACKAGES"]
    assert args["PYTHON_TAG"] == "cp311-cp311" and args["OS_FAMILY"] == "debian"


def test_cibuildwheel_environment(tmp_path: Path) -> None:
    spec = images.spec_for(CELL, BASE)
    job = wheels.ContainerBuild(cell=CELL, image=spec.tag, wheelhouse=tmp_path)
    env = wheels.cibuildwheel_env(job, spec, tmp_path / "ca.crt")
    assert env["CIBW_BUILD"] == "cp311-manylinux_x86_64"
    assert env["CIBW_MANYLINUX_X86_64_IMAGE"] == spec.tag
    assert "--exclude libcudart.so.13" in env["CIBW_REPAIR_WHEEL_COMMAND"]
    assert f"{tmp_path / 'ca.crt'}:{wheels.CONTAINER_CA}:ro" in env["CIBW_CONTAINER_ENGINE"]
    assert 'TORCH_CUDA_ARCH_LIST="7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"' in env["CIBW_ENVIRONMENT"]
    assert env["CIBW_BEFORE_BUILD"].startswith("pip install 'torch==2.11.0,!=2.11.0+cpu'")
    no_ca = wheels.cibuildwheel_env(job, spec, None)
    assert "PIP_CERT" not in no_ca["CIBW_ENVIRONMENT"] and ":ro" not in no_ca["CIBW_CONTAINER_ENGINE"]


def test_shell_runs_as_the_caller_and_adds_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "docker_cli", lambda: "docker")
    cmd = shell.shell_command("img", tmp_path, ["id"], interactive=False, gpus=True, ca_bundle=None, uid=1000, gid=1000)
    assert cmd[cmd.index("--user") + 1] == "1000:1000" and "HOME=/home/build" in cmd
    assert "--gpus" in cmd and cmd[-2:] == ["img", "id"] and "-t" not in cmd
    cmd = shell.shell_command("img", tmp_path, [], interactive=True, gpus=False, ca_bundle=None, uid=1234, gid=99)
    assert cmd[cmd.index("--user") + 1] == "1234:99" and cmd[-1] == "bash" and "--gpus" not in cmd
    assert "HOME=/tmp/farm-home" in cmd and f"{tmp_path}:/project" in cmd
    assert f"{wheels.CCACHE_VOLUME}-uid1234:/home/build/.cache/ccache" in cmd


def test_host_debian_mirror_is_read_from_apt_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n")
    assert images.host_debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert images.host_debian_mirror(tmp_path) == "http://other.example/debian"


def test_host_compiler_outside_the_cuda_range_is_refused() -> None:
    with pytest.raises(matrix.MatrixError, match=r"gcc-14 is outside CUDA 12.4's supported range"):
        matrix.validate(dataclasses.replace(matrix.get_cell("12.4"), host_compiler="gcc-14"))


def test_bootstrap_command() -> None:
    cmd = images.bootstrap_command("trixie", Path("/tmp/r"), "http://m/debian")
    assert cmd == ["debootstrap", "--variant=minbase", "--include=ca-certificates", "trixie", "/tmp/r", "http://m/debian"]
