"""torch.cuda.is_available() True in CUDA builds (ci/builds/cuda_available.py, ci/buildsite/sitecustomize.py):
which builds get ci/buildsite first on PYTHONPATH, and what a real Python with it on its path sees.

The container and Windows environments are tested beside their own (tests/unit/linux/test_container.py,
tests/unit/windows/test_win_build_commands.py); the fixture cuda_if_available builds a wheel with it
(tests/integration/test_fixture_projects.py).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.builds import cuda_available
from ci.linux import host
from ci.toolchain import toolkit
from ci.universe import project, targets

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def classic(**changes: object) -> targets.Target:
    target = targets.targets_for(project.load(CLASSIC))[0]
    return dataclasses.replace(target, project=dataclasses.replace(target.project, **changes)) if changes else target


def test_the_key_is_on_unless_the_project_turns_it_off(tmp_path: Path) -> None:
    assert project.load(CLASSIC).cuda_available_in_build is True
    (tmp_path / "pyproject.toml").write_text('[tool.cuda-ext-farm]\nname = "x"\ncuda-available-in-build = false\n')
    assert project.load(tmp_path).cuda_available_in_build is False
    (tmp_path / "pyproject.toml").write_text('[tool.cuda-ext-farm]\nname = "x"\ncuda-available-in-build = "no"\n')
    with pytest.raises(project.ConfigError, match="cuda-available-in-build"):
        project.load(tmp_path)


def test_the_folder_holds_sitecustomize_alone() -> None:
    """Everything in it is importable by the project's build: nothing but the one module."""
    assert cuda_available.SITE == ROOT / "ci" / "buildsite"
    assert sorted(p.name for p in cuda_available.SITE.iterdir() if p.name != "__pycache__") == ["sitecustomize.py"]


def test_pythonpath_puts_the_folder_first_in_cuda_builds_alone(capsys: pytest.CaptureFixture[str]) -> None:
    target = classic()
    assert cuda_available.pythonpath(target, "/site", {}) == {"PYTHONPATH": "/site"}
    assert "torch.cuda.is_available() is True in this build" in capsys.readouterr().err
    assert cuda_available.pythonpath(target, "/site", {}, "/a:/b") == {"PYTHONPATH": "/site:/a:/b"}
    # The project's own PYTHONPATH (build-env) replaces the inherited one, after the farm's folder.
    assert cuda_available.pythonpath(target, "/site", {"PYTHONPATH": "/own"}, "/a") == {"PYTHONPATH": "/site:/own"}
    assert cuda_available.pythonpath(target, r"C:\site", {}, r"C:\a", ";") == {"PYTHONPATH": r"C:\site;C:\a"}
    capsys.readouterr()
    assert cuda_available.pythonpath(dataclasses.replace(target, cpu=True), "/site", {}, "/a") == {}
    assert cuda_available.pythonpath(classic(cuda_available_in_build=False), "/site", {}, "/a") == {}
    assert "is_available" not in capsys.readouterr().err  # said only by a build that applies it


def test_host_builds_get_it_before_the_callers_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ci/linux/host.py compiler_env: the host build, the aarch64 cross build and develop."""
    monkeypatch.setenv("PYTHONPATH", "/caller")
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    env = host.compiler_env(classic(), tk, max_jobs=1)
    assert env["PYTHONPATH"] == f"{cuda_available.SITE}{os.pathsep}/caller" and env["FORCE_CUDA"] == "1"
    assert "PYTHONPATH" not in host.compiler_env(classic(), None, cpu=True, max_jobs=1)
    assert "PYTHONPATH" not in host.compiler_env(classic(cuda_available_in_build=False), tk, max_jobs=1)


# --- the sitecustomize itself, in a real Python with the test environment's torch -------------------------------

PROBE = """
import json, sys, torch
print(json.dumps({"available": torch.cuda.is_available(),
                  "real": getattr(torch.cuda.is_available, "__wrapped__", torch.cuda.is_available)(),
                  "devices": torch.cuda.device_count(),
                  "other": getattr(sys, "_other_sitecustomize_ran", False),
                  "hook": [type(f).__name__ for f in sys.meta_path][:1]}))
"""


def probe(pythonpath: str | None, cwd: Path) -> dict[str, object]:
    import json

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=cwd, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def test_a_python_with_the_folder_on_its_path_sees_cuda_available(tmp_path: Path) -> None:
    """The hook replaces torch.cuda.is_available once `import torch` imported torch.cuda; the sitecustomize it
    hides (another folder's, later on the path: Debian's Python has one) still runs."""
    pytest.importorskip("torch")
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys\nsys._other_sitecustomize_ran = True\n")
    plain = probe(str(other), tmp_path)
    assert plain["other"] is True and plain["hook"] != ["CudaAvailableFinder"]
    patched = probe(os.pathsep.join([str(cuda_available.SITE), str(other)]), tmp_path)
    assert patched["available"] is True and patched["hook"] == ["CudaAvailableFinder"]
    assert patched["real"] == plain["available"]  # torch's own answer, kept at __wrapped__ (False on a builder)
    assert patched["devices"] == plain["devices"]  # nothing else of torch changes
    assert patched["other"] is True
