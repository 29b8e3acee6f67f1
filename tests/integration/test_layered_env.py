"""A project's own build requirements are a small venv layered on the shared torch environment, not a second
torch of several GB (a setuptools-scm or scikit-build-core project made a new 4.6 GB environment). What such an
environment holds is what its interpreter imports, and the index it was installed from is part of its key."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ci.toolchain import envs

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX layout")
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _tiny_wheel(folder: Path, name: str = "farm_tiny") -> Path:
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    dist = name.replace("_", "-")
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}.py", "VALUE = 42\n")
        zf.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        zf.writestr(f"{name}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
                    "Tag: py3-none-any\n")
        zf.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return wheel


def stand_in_torch(site: Path, version: str, cuda: str | None, *, abi: bool) -> None:
    """A package named torch that answers what the farm asks (its version, CUDA, C++ ABI), with its metadata."""
    (site / f"torch-{version}.dist-info").mkdir()
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
    (site / f"torch-{version}.dist-info" / "METADATA").write_text(metadata)
    (site / "torch" / "_C").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(f"__version__ = {version!r}\ncuda = {cuda!r}\n")
    (site / "torch" / "__init__.py").write_text("from torch import _C, version\n__version__ = version.__version__\n")
    (site / "torch" / "_C" / "__init__.py").write_text(f"_GLIBCXX_USE_CXX11_ABI = {abi}\n")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[envs.PythonEnv]:
    """One environment with pip, a stand-in torch 9.9.0 (CUDA 13.0, the C++11 ABI) and a command-line tool, in a
    cache folder of this module's own; no index variables (the machine's pip configuration files still count)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FARM_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
            patch.delenv(name, raising=False)
        patch.delenv("PIP_CONFIG_FILE", raising=False)
        made = envs.ensure_env("base", PYTHON, [])
        site = made.site_packages()
        stand_in_torch(site, "9.9.0", "13.0", abi=True)
        (site / "farm_base_marker.py").write_text("BASE = True\n")
        (made.bin_dir / "ninja").write_text("#!/bin/sh\necho 1.13\n")
        (made.bin_dir / "ninja").chmod(0o755)
        yield made


def test_the_layered_environment_sees_the_base_and_adds_only_its_own(base: envs.PythonEnv, tmp_path: Path) -> None:
    site = base.site_packages()
    layered = envs.layered_env(base, "base", PYTHON, [str(_tiny_wheel(tmp_path))])
    assert layered.root != base.root
    out = subprocess.run([str(layered.python), "-c", "import farm_tiny, farm_base_marker; "
                          "print(farm_tiny.VALUE, farm_base_marker.BASE)"], capture_output=True, text=True)
    assert out.stdout.split() == ["42", "True"], out.stderr
    assert not (site / "farm_tiny.py").exists(), "the project's requirement went into the shared base"
    assert subprocess.run([str(layered.bin_dir / "ninja")], capture_output=True, text=True).stdout.strip() == "1.13"
    assert envs.torch_metadata(layered) == {"version": "9.9.0", "cuda": "13.0", "cxx11_abi": "1"}
    # A test venv over the layered one sees all of it.
    test = envs.test_env(layered, tmp_path / "test-venv")
    out = subprocess.run([str(test.python), "-c", "import farm_tiny, farm_base_marker"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    # Made once: a second call reuses it.
    assert envs.layered_env(base, "base", PYTHON, [str(_tiny_wheel(tmp_path))]).root == layered.root


def test_a_layer_reports_the_torch_its_interpreter_imports(base: envs.PythonEnv, tmp_path: Path) -> None:
    """A project's build requirement that brings its own torch into the layer shadows the base's: the build imports
    the layer's (its site comes first), and the farm says so, with its CUDA and C++ ABI; reading the layers'
    metadata said the base's."""
    layered = envs.layered_env(base, "shadow", PYTHON, [str(_tiny_wheel(tmp_path, "farm_shadow"))])
    stand_in_torch(layered.site_packages(), "9.9.1", None, abi=False)
    imported = subprocess.run([str(layered.python), "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True).stdout.strip()
    assert imported == "9.9.1"
    assert envs.torch_metadata(layered) == {"version": "9.9.1", "cuda": None, "cxx11_abi": "0"}
    assert envs.torch_metadata(base) == {"version": "9.9.0", "cuda": "13.0", "cxx11_abi": "1"}
    # The answers are kept: another torch installed there (its folder and metadata replaced) is asked again.
    site = layered.site_packages()
    shutil.rmtree(site / "torch")
    shutil.rmtree(site / "torch-9.9.1.dist-info")
    stand_in_torch(site, "9.9.2", "12.8", abi=False)
    assert envs.torch_metadata(layered) == {"version": "9.9.2", "cuda": "12.8", "cxx11_abi": "0"}
    # ... and removed from the layer, the base's is imported again.
    shutil.rmtree(site / "torch")
    shutil.rmtree(site / "torch-9.9.2.dist-info")
    assert envs.torch_metadata(layered) == {"version": "9.9.0", "cuda": "13.0", "cxx11_abi": "1"}


def test_the_index_an_environment_came_from_is_in_its_key_and_its_credentials_nowhere(
        base: envs.PythonEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    """Two index configurations, two environments; a password in an index URL reaches neither a folder name, nor
    an environment's marker, nor the log. pip never asks the index (PIP_NO_INDEX): the requirement is a file."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    wheel = str(_tiny_wheel(tmp_path, "farm_indexed"))
    password = "Idx" + uuid.uuid4().hex[:12]
    made = []
    for mirror in ("mirror-a", "mirror-b"):
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"https://farm:{password}@{mirror}.invalid/simple")
        made.append(envs.layered_env(base, "indexed", PYTHON, [wheel]))
    assert made[0].root != made[1].root and made[0].root.name.startswith("indexed-py")
    markers = [(env.root / ".farm-complete").read_text() for env in made]
    assert "farm:***@mirror-a.invalid" in markers[0] and "farm:***@mirror-b.invalid" in markers[1]
    said = capfd.readouterr()
    assert password not in said.out + said.err + "".join(markers) + " ".join(str(env.root) for env in made)
    # The same option from a pip configuration file is the same kind of input.
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL")
    without = envs.index_config()
    conf = tmp_path / "pip.conf"
    conf.write_text("[install]\nfind-links = /srv/wheels\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert envs.index_config() == {**without, f"{conf}:install.find-links": "/srv/wheels"}
