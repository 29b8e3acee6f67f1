"""A project's own build requirements are a small venv layered on the shared torch environment, not a second
torch of several GB (a setuptools-scm or scikit-build-core project made a new 4.6 GB environment)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci.toolchain import envs


def _tiny_wheel(folder: Path) -> Path:
    wheel = folder / "farm_tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("farm_tiny.py", "VALUE = 42\n")
        zf.writestr("farm_tiny-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: farm-tiny\nVersion: 1.0\n")
        zf.writestr("farm_tiny-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
                    "Tag: py3-none-any\n")
        zf.writestr("farm_tiny-1.0.dist-info/RECORD", "")
    return wheel


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX layout")
def test_the_layered_environment_sees_the_base_and_adds_only_its_own(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = envs.ensure_env("base", python, [])
    site = base.site_packages()
    # A stand-in torch in the base (its metadata is what the farm reads) and a command-line tool.
    (site / "torch-9.9.0.dist-info").mkdir()
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text("cuda: Optional[str] = '13.0'\n")
    (site / "farm_base_marker.py").write_text("BASE = True\n")
    (base.bin_dir / "ninja").write_text("#!/bin/sh\necho 1.13\n")
    (base.bin_dir / "ninja").chmod(0o755)
    layered = envs.layered_env(base, "base", python, [str(_tiny_wheel(tmp_path))])
    assert layered.root != base.root
    out = subprocess.run([str(layered.python), "-c", "import farm_tiny, farm_base_marker; "
                          "print(farm_tiny.VALUE, farm_base_marker.BASE)"], capture_output=True, text=True)
    assert out.stdout.split() == ["42", "True"], out.stderr
    assert not (site / "farm_tiny.py").exists(), "the project's requirement went into the shared base"
    assert subprocess.run([str(layered.bin_dir / "ninja")], capture_output=True, text=True).stdout.strip() == "1.13"
    assert envs.torch_metadata(layered) == {"version": "9.9.0", "cuda": "13.0"}
    # A test venv over the layered one sees all of it.
    test = envs.test_env(layered, tmp_path / "test-venv")
    out = subprocess.run([str(test.python), "-c", "import farm_tiny, farm_base_marker"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    # Made once: a second call reuses it.
    assert envs.layered_env(base, "base", python, [str(_tiny_wheel(tmp_path))]).root == layered.root
