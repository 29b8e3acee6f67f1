from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ci.universe.project import ProjectConfig

ROOT = Path(__file__).resolve().parents[1]
# The farm's code (ci/) is imported from the checkout. fusedops' own tests are in package/tests/.
sys.path.insert(0, str(ROOT))


@pytest.fixture
def built_wheel() -> Path:
    """The wheel `nox -s tests` built and installed (FARM_TEST_WHEEL)."""
    value = os.environ.get("FARM_TEST_WHEEL")
    if value:
        return Path(value)
    wheels = sorted((ROOT / "wheelhouse").glob("fusedops-stable-cu130-*-linux_x86_64/fusedops-*.whl"))
    if not wheels:
        pytest.skip("no built wheel: run `nox -s build` (nox -s tests does it for you)")
    return wheels[-1]


@pytest.fixture(scope="session")
def farm_command(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The installable command, as a user gets it: `pip install <farm>/farm` into a venv of its own (the farm's
    distribution, built from this checkout by its build backend), then its `cuda-ext-farm` console script."""
    import subprocess

    venv = tmp_path_factory.mktemp("farm-command") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    # A machine-wide pip constraint (a torch cap) is not the farm distribution's concern.
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(ROOT / "farm")], check=True,
                   env={**os.environ, "PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return [str(bin_dir / "cuda-ext-farm")]


@pytest.fixture(scope="session")
def config() -> ProjectConfig:
    """fusedops' own configuration: this repository's ``[tool.cuda-ext-farm]``."""
    from ci.universe.project import reading

    return reading.load(ROOT)


@pytest.fixture(scope="session")
def documents(config: ProjectConfig) -> dict[str, dict[str, Any]]:
    """The workflows rendered from :func:`config`: what ``.github/workflows/`` must hold."""
    from ci.gha import jobs, steps

    return jobs.render(steps.context(config, steps.FarmSource()))


@pytest.fixture(scope="session")
def committed() -> dict[str, str]:
    """The workflow files as committed, by name."""
    from ci.gha import jobs

    return {name: (ROOT / ".github" / "workflows" / name).read_text() for name in jobs.FILES}
