"""The release dry run's import step for every Linux cell on a machine whose pip sees PyPI alone (issue 20, item 4).

A fresh machine's dry run stopped at the CUDA 12 cell's CPU-only import test: ``pip install torch==2.10.0+cpu`` ->
"No matching distribution" (PyPI has no CPU builds of torch). Here pip has no configuration file, no find-links, no
extra index and no constraint (``PIP_CONFIG_FILE=os.devnull``, no ``PIP_*`` index variables; only the CA bundle pip
is configured with stays, which is not an index) and a cache of its own, and every cell's import steps run through
the dry run's own code: ``rehearsal.import_tests`` runs the generated workflow's commands (``gha.import_commands``) as
``python -m ci release import-test``, which picks the torch (``install_checks.cpu_import_torch``), installs it into a
farm environment and imports a real fusedops wheel.

The wheel is the cell's own from the wheelhouse (``wheelhouse/<target-id>/``) where it is there; otherwise the wheel
``nox -s tests`` built (``FARM_TEST_WHEEL``, the conftest's ``built_wheel``), which proves the torch route of the
cell's CPU-only import all the same: fusedops is one stable-ABI wheel per CUDA major, its ``_C`` loads over any torch
>= 2.10. A stand-in's CUDA import step runs with no GPU visible (its CUDA kernels are another cell's).

Extended (``nox -s tests-extended``): it downloads PyPI's CUDA builds of torch, about 5 GB for each torch release
of the cells (2.11.0 for the CUDA 13 cells, 2.10.0 for cu124), into a farm cache of its own, removed afterwards
(``FARM_PYPI_ONLY_CACHE=DIR`` keeps it there).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from ci.release import manifest as release_manifest
from ci.release import rehearsal
from ci.toolchain import envs
from ci.universe import matrix, targets
from ci.universe.lockcheck import pages
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.extended,
              pytest.mark.skipif(sys.platform != "linux", reason="the Linux cells' import steps run on Linux")]

#: pip settings that are no index: kept.
KEPT = ("PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_CERT")


@pytest.fixture(scope="module")
def pypi_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """pip as a fresh machine has it, PyPI its only index, for this process and the dry run's children; the farm's
    environments in a cache of their own (none made with this machine's indexes is reused)."""
    cert = pages.pip_settings().get("cert")  # read before the configuration is dropped
    patch = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith("PIP_") and name not in KEPT:
            patch.delenv(name)
    patch.setenv("PIP_CONFIG_FILE", os.devnull)  # no /etc/pip.conf, /etc/xdg/pip, ~/.config/pip
    if cert:
        patch.setenv("PIP_CERT", cert)
    keep = os.environ.get("FARM_PYPI_ONLY_CACHE", "").strip()
    cache = Path(keep) if keep else tmp_path_factory.mktemp("pypi-only-cache")
    patch.setenv("FARM_CACHE_DIR", str(cache))
    patch.setenv("PIP_CACHE_DIR", str(cache / "pip"))  # the torch downloads go with it, not into the user's cache
    try:
        yield cache
    finally:
        patch.undo()
        if not keep:
            shutil.rmtree(cache, ignore_errors=True)  # GBs of torch


def _target(cell: str) -> targets.Target:
    """The project's Linux x86_64 target of ``cell``; for a local stand-in (cu124), its release cell's target built
    there (a stand-in is in no default target list: ci/universe/targets/__init__.py stand_in)."""
    config = reading.load(ROOT)
    listed = targets.targets_for(config, "linux")
    stand_ins = [s for s in (targets.stand_in(t) for t in listed) if s is not None]
    return next(t for t in (*listed, *stand_ins) if t.cell.name == cell)


def _wheel(target: targets.Target, request: pytest.FixtureRequest) -> tuple[Path, bool]:
    """The cell's own wheel, or the one ``nox -s tests`` built (True: the cell's own)."""
    own = sorted((ROOT / "wheelhouse" / target.id).glob("*.whl"))
    if own:
        return own[-1], True
    built: Path = request.getfixturevalue("built_wheel")  # skips, saying how to build one, when there is none
    if not built.is_file():
        pytest.skip(f"FARM_TEST_WHEEL is not a file: {built}")
    return built, False


def test_pip_sees_pypi_alone(pypi_only: Path) -> None:
    """The machine's own CPU torch (a find-links folder) and indexes are out of sight: no torch X+cpu at all."""
    for python in sorted({_target(cell.name).python for cell in matrix.CELLS}):
        offered = envs.offered_torch(python, None)
        assert not [v for v in offered if "+" in v], offered
        assert {cell.torch for cell in matrix.CELLS} <= set(offered), offered


@pytest.mark.parametrize("cell", [cell.name for cell in matrix.CELLS])  # every cell of the matrix is a Linux cell
def test_the_dry_runs_import_step_runs_with_pypi_alone(
        cell: str, pypi_only: Path, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    target = _target(cell)
    wheel, own = _wheel(target, request)
    if not own:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a stand-in's CUDA kernels are another cell's
    out = tmp_path / "release"
    (out / "assets").mkdir(parents=True)
    shutil.copy2(wheel, out / "assets" / wheel.name)
    tags = tuple(sorted(str(t) for t in parse_wheel_filename(wheel.name)[3]))
    item = release_manifest.ReleaseFile(
        wheel.name, "0" * 64, wheel.stat().st_size, "wheel", False, "a test", target=target.id, os="linux",
        variant=target.variant, cuda=target.cell.cuda, torch=target.torch, python=target.oldest_python, tags=tags,
        abi=target.project.abi)
    manifest = release_manifest.Manifest(target.project.name, "0.1.0", None, None, target.cell.name, (item,))

    started = time.monotonic()
    checks = rehearsal.import_tests(out, manifest, {target.id: target}, ROOT, cpu_torch=None)[wheel.name]
    seconds = time.monotonic() - started

    release = matrix.get_torch(target.torch)
    assert checks["import-cpu"].startswith("ok: "), checks
    assert checks["import-cpu"].endswith(f"; here: torch {target.torch} (PyPI's CUDA {release.cuda} build, no GPU)")
    assert checks["import-cuda"].startswith("ok: "), checks
    with capsys.disabled():
        print(f"\n{cell} (torch {target.torch}, {wheel.name}{'' if own else ', a stand-in'}, {seconds:.0f} s)")
        for name, result in sorted(checks.items()):
            print(f"  {name}: {result}")
