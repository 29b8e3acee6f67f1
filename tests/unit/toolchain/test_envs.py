"""One environment per (torch release, flavour, index, Python) (ci/toolchain/envs.py): every call site that wants the
same torch gets the same folder, however the requirement is spelt. The folders are named here without installing
anything (``_made_once`` records what it would make); tests/integration/test_layered_env.py makes real ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from ci.release import install_checks, sdist
from ci.toolchain import envs
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """The environment folders asked for, in order (none is created)."""
    asked: list[Path] = []

    def record(root: Path, create: Callable[[envs.PythonEnv], None], record: Mapping[str, object],
               reusing: str = "") -> envs.PythonEnv:
        asked.append(root)
        return envs.PythonEnv(root)

    monkeypatch.setattr(envs, "_made_once", record)
    monkeypatch.setattr(envs, "find_interpreter", lambda version, env=None: Path("/usr/bin/python3"))
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path))
    return asked


def test_every_spelling_of_one_torch_names_one_build() -> None:
    cuda = envs.TorchBuild("2.11.0")
    assert envs.TorchBuild.of("torch==2.11.0,!=2.11.0+cpu") == cuda
    assert envs.TorchBuild.of("torch == 2.11.0, != 2.11.0+cpu") == cuda
    assert envs.TorchBuild.of("torch==2.13.0+cpu") == envs.TorchBuild("2.13.0", "cpu")
    assert cuda.requirement == "torch==2.11.0,!=2.11.0+cpu" and cuda.name == "torch2.11.0-cuda"
    indexed = envs.TorchBuild("2.11.0", index_url="https://download.pytorch.org/whl/cu126")
    assert indexed.name.startswith("torch2.11.0-cuda-") and indexed.pip_args()[:1] == ["--index-url"]
    with pytest.raises(envs.UsageError):
        envs.TorchBuild.of("torch>=2.10")


def test_the_call_sites_that_want_the_same_torch_get_the_same_folder(made: list[Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA build of a target, its CUDA import test and its CPU-only import test on PyPI's (CUDA) build (one
    torch 2.11 CUDA build on CPython 3.11) share one environment: before, the call sites spelt the requirement each
    its own way, and a machine kept two 4.6 GB copies of the same torch."""
    config = reading.load(CLASSIC)
    target = next(t for t in targets.targets_for(config) if t.torch == "2.11.0" and t.python == "3.11")
    envs.target_env(target)
    install_checks.torch_env(target, "cuda", "3.11", index_url=None, cpu_torch=None)
    no_gpu = install_checks.CpuImportTorch("2.11.0", "torch==2.11.0,!=2.11.0+cpu", "cuda-no-gpu", "PyPI's, no GPU")
    install_checks.torch_env(target, "cpu", "3.11", index_url=None, cpu_torch=None, choice=no_gpu)
    assert len(made) == 3 and set(made) == {made[0]} and made[0].name.startswith("torch2.11.0-cuda-py3.11-"), made


def test_a_cpu_build_takes_the_cpu_torch_where_pip_has_one(made: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A --cpu build of torch 2.13 (a +cpu wheel pip can reach) takes the small CPU environment, the one the sdist
    of a setup.py that imports torch uses; of 2.11 (none) it shares the CUDA builds' environment."""
    monkeypatch.setattr(envs, "_offered", lambda python: ("2.13.0+cpu", "2.13.0", "2.11.0"))
    config = reading.load(CLASSIC)
    cpu_213 = next(dataclasses.replace(t, cpu=True) for t in targets.targets_for(config)
                   if t.torch == "2.13.0" and t.python == "3.11")
    envs.target_env(cpu_213)
    sdist.cpu_torch_env(config, "3.11", "2.13.0", None)
    assert {p.name.rsplit("-", 1)[0] for p in made if p.name.startswith("torch")} == {"torch2.13.0-cpu-py3.11"}
    made.clear()
    cpu_211 = next(dataclasses.replace(t, cpu=True) for t in targets.targets_for(config)
                   if t.torch == "2.11.0" and t.python == "3.11")
    envs.target_env(cpu_211)
    assert [p.name.rsplit("-", 1)[0] for p in made if p.name.startswith("torch")] == ["torch2.11.0-cuda-py3.11"]
