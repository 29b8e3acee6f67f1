"""The sdist proven by a wheel built from it, imported in a clean environment (a real build)."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from ci.release import sdist
from ci.testing import wheel_tests
from ci.universe import targets
from ci.universe.project import reading
from tests.unit.release.test_sdist import CPU_TORCH, FIX, copy_fixture


@pytest.mark.extended
def test_wheel_from_sdist_imports(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, FIX)
    config = reading.load(folder)
    built = sdist.build_sdist(config, tmp_path / "dist", cpu_torch=CPU_TORCH)
    with tarfile.open(built) as tar:
        assert any(m.name.endswith("/scaled_add.h") for m in tar.getmembers())
    wheel = sdist.build_wheel_from_sdist(config, built, tmp_path / "wheelhouse", max_jobs=2)
    assert wheel.is_file() and wheel.name.startswith("sdist_header-0.1.0+pt2.11.cu130-cp311-"), wheel.name
    assert (wheel.parent / "report.json").is_file()
    target = targets.with_arch_list(targets.default_target(config), sdist.proof_arch_list(config))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with wheel_tests.clean_env(target, wheel) as env:
        code = ("import torch, sdist_header; "
                "assert sdist_header.__file__.find('site-packages') > 0, sdist_header.__file__; "
                "print(sdist_header.scaled_add(torch.ones(3), torch.ones(3), 2.0).tolist())")
        out = subprocess.run([str(env.python), "-c", code], cwd=scratch, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[3.0, 3.0, 3.0]"
