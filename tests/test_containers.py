"""Container integration: a real Docker engine, a bootstrapped base, the builder
image of the CUDA 13.0 release cell and a cibuildwheel build inside it.

Skipped (with the reason) when no Docker engine is reachable. `.ci/run`
installs and starts one, so CI runs these.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import images, matrix, wheels

ROOT = Path(__file__).resolve().parent.parent


def _engine_reason() -> str | None:
    try:
        images.require_engine()
    except images.ImageError as exc:
        return str(exc)
    if shutil.which("debootstrap") is None:
        return "debootstrap is not installed"
    return None


REASON = _engine_reason()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(REASON is not None, reason=f"no Docker engine: {REASON}")]

CELL = matrix.get_cell("13.0")


def run_ci(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, text=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def base() -> str:
    result = run_ci("base-image")
    assert result.returncode == 0, result.stdout[-3000:]
    return images.BASE_REPO


@pytest.fixture(scope="module")
def image(base: str) -> str:
    spec = images.spec_for(CELL, base)
    return images.ensure_image(spec)


def test_image_is_labelled_and_runs_as_non_root(image: str) -> None:
    labels = json.loads(subprocess.run([images.docker_cli(), "image", "inspect", "--format",
                                        "{{json .Config.Labels}}", image], capture_output=True, text=True,
                                       check=True).stdout)
    assert labels["farm.cuda"] == "13.0" and labels["farm.torch"] == CELL.torch
    assert labels["farm.compiler"] == CELL.host_compiler
    out = subprocess.run([images.docker_cli(), "run", "--rm", image, "sh", "-c", "id -u; nvcc --version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] != "0"
    assert "release 13.0" in out


def test_unchanged_cell_reuses_its_image(image: str) -> None:
    assert images.spec_for(CELL, images.BASE_REPO).tag == image
    result = run_ci("images", CELL.cuda, env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 0 and "reusing" in result.stdout


def test_ca_bundle_never_lands_in_the_image(tmp_path: Path, base: str) -> None:
    host_ca = images.host_ca_bundle()
    marker = "FARM-TEST-CA-MARKER-7f3a"
    bundle = tmp_path / "ca.crt"
    bundle.write_text((host_ca.read_text() if host_ca else "") + f"\n# {marker}\n")
    spec = images.spec_for(CELL, base)
    tag = spec.tag + "-catest"
    cmd = images.build_command(spec, bundle)
    cmd[cmd.index("--tag") + 1] = tag
    subprocess.run([*cmd[:2], "--no-cache", *cmd[2:]], check=True, env={**os.environ, "DOCKER_BUILDKIT": "1"},
                   capture_output=True)
    try:
        history = subprocess.run([images.docker_cli(), "history", "--no-trunc", tag],
                                 capture_output=True, text=True, check=True).stdout
        # The RUN lines name the secret's mount point; its content must appear nowhere.
        assert marker not in history and "BEGIN CERTIFICATE" not in history
        found = subprocess.run([images.docker_cli(), "run", "--rm", "--user", "0", tag, "sh", "-c",
                                f"grep -rls {marker} /etc /opt /home /root /usr/local /run /tmp; "
                                "test ! -e /run/secrets/cacert"],
                               capture_output=True, text=True)
        assert found.stdout.strip() == "" and found.returncode == 0
    finally:
        subprocess.run([images.docker_cli(), "rmi", "-f", tag], capture_output=True)


def test_shell_runs_one_command_as_the_caller(image: str) -> None:
    result = run_ci("shell", "--cuda", CELL.cuda, "id", env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 0, result.stdout[-2000:]
    assert f"uid={os.getuid()}" in result.stdout


def test_cibuildwheel_builds_an_audited_wheel_in_the_image(image: str, tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    result = run_ci("build-cuda", "--cuda", CELL.cuda, "--arch-list", "9.0+PTX", "--wheelhouse", str(wheelhouse),
                    env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 0, result.stdout[-5000:]
    assert "import test ok" in result.stdout
    built = list((wheelhouse / "cu13").glob("fusedops-*-cp310-abi3-manylinux_*.whl"))
    assert len(built) == 1
    report = json.loads((wheelhouse / "cu13" / "report-cu130-container.json").read_text())
    assert report["sass"] == ["sm_90"] and report["ptx"] == ["sm_90"]
    assert report["image"] == image and all(c["ok"] for c in report["checks"])


def test_failed_compile_in_container_reaches_the_user_and_leaves_no_wheel(image: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    wheels.export_source(ROOT, project)
    kernel = project / "csrc" / "cuda" / "round_ste.cu"
    kernel.write_text(kernel.read_text() + "\nstatic int broken = container_undefined_symbol;\n")
    wheelhouse = tmp_path / "wheelhouse"
    job = wheels.ContainerBuild(cell=matrix.resolve(CELL.cuda, "9.0+PTX"), image=image, wheelhouse=wheelhouse,
                                project=project)
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys; from ci import wheels, images, matrix; from pathlib import Path;"
         f"job = wheels.ContainerBuild(cell=matrix.resolve('{CELL.cuda}', '9.0+PTX'), image='{image}',"
         f" wheelhouse=Path('{wheelhouse}'), project=Path('{project}'));"
         f"wheels.build_in_container(job, images.spec_for(job.cell, '{images.BASE_REPO}'))"],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert job.project == project
    assert proc.returncode != 0
    assert "container_undefined_symbol" in proc.stdout and "round_ste.cu" in proc.stdout
    assert not list(wheelhouse.rglob("*.whl"))
