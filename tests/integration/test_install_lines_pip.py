"""The install lines a release documents, checked with real pip against PyPI's metadata (three torch resolutions,
five venvs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ci.release import install_lines, pypi_view
from ci.release.install_lines import pip_check
from ci.toolchain import envs
from tests.unit.release.test_install_lines import (
    DIST,
    TAG,
    TORCH_ENV,
    VERSION,
    release,
)


@pytest.fixture(scope="module")
def pypi() -> object:
    with pypi_view.PyPIView() as view:
        yield view
    assert not view.downloads, f"pip asked for whole files: {view.downloads}"


@pytest.mark.extended  # about 60 s: three torch resolutions from PyPI's metadata, five venvs
def test_new_scheme_lines_give_each_torch_its_build_and_keep_the_installed_torch(
        tmp_path: Path, pypi: pypi_view.PyPIView, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "release"
    manifest = release(out, [("2.9.1", "cu124", "12.4"), ("2.10.0", "cu124", "12.4"), ("2.13.0", "cu130", "13.0")],
                       per_torch=True)
    torch_envs = [envs.PythonEnv(TORCH_ENV)] if (TORCH_ENV / "bin" / "python").is_file() else []
    results = pip_check.check_install_lines(out, manifest, torch_envs=torch_envs, pypi_url=pypi.upstream)
    fresh = {k: v for k, v in results.items() if " fresh " in k}
    assert fresh == {
        f"torch2.10-cu124 fresh {DIST}-{VERSION}+pt2.10.cu124-{TAG}.whl": "ok: pip install farm-probe-classic "
        f"--extra-index-url {install_lines.SITE}/torch2.10-cu124 -> {DIST}-{VERSION}+pt2.10.cu124-{TAG}.whl, "
        "torch 2.10.0 (CUDA 12.8)",
        f"torch2.13-cu130 fresh {DIST}-{VERSION}+pt2.13.cu130-{TAG}.whl": "ok: pip install farm-probe-classic "
        f"--extra-index-url {install_lines.SITE}/torch2.13-cu130 -> {DIST}-{VERSION}+pt2.13.cu130-{TAG}.whl, "
        "torch 2.13.0 (CUDA 13.0)",
        f"torch2.9-cu124 fresh {DIST}-{VERSION}+pt2.9.cu124-{TAG}.whl": "ok: pip install farm-probe-classic "
        f"--extra-index-url {install_lines.SITE}/torch2.9-cu124 -> {DIST}-{VERSION}+pt2.9.cu124-{TAG}.whl, "
        "torch 2.9.1 (CUDA 12.8)",
    }
    keep = {k: v for k, v in results.items() if " keep-torch " in k}
    assert keep[f"torch2.10-cu124 keep-torch {DIST}-{VERSION}+pt2.10.cu124-{TAG}.whl"].endswith(
        "keeps torch 2.10.0+cu128 (a stand-in torch (metadata only))")
    if torch_envs:  # a real torch 2.13.0+cpu, seen through a layered venv
        assert keep[f"torch2.13-cu130 keep-torch {DIST}-{VERSION}+pt2.13.cu130-{TAG}.whl"].endswith(
            f"keeps torch 2.13.0+cpu (a CPU-only torch over {TORCH_ENV.name})")
