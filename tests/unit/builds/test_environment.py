"""One composition of a build's environment for every route (ci/builds/environment.py): the caller's flags, then
the project's build-env, then the farm's, on the host, in the container and on Windows. (The compile lines of a
real host build with a project's NVCC_APPEND_FLAGS: tests/integration/test_arch_flags_builds.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path, PureWindowsPath

import pytest

from ci.builds import environment, tail
from ci.errors import UsageError
from ci.linux import container, host, images
from ci.toolchain import toolkit
from ci.universe import targets
from ci.universe.project import reading
from windows import cibw

ROOT = Path(__file__).resolve().parents[3]
PROJECT_FLAGS = {"NVCC_APPEND_FLAGS": "-DPROJECT_OWN", "CPPFLAGS": "-DPROJECT_CPP"}


def test_flags_join_caller_project_farm_and_paths_farm_project_caller() -> None:
    caller = {"NVCC_APPEND_FLAGS": "-lineinfo", "PYTHONPATH": "/caller", "PATH": "/usr/bin", "HOME": "/root"}
    farm = {"NVCC_APPEND_FLAGS": "-objtemp", "PYTHONPATH": "/buildsite", "TORCH_CUDA_ARCH_LIST": "9.0",
            "MAX_JOBS": "2"}
    own = {"NVCC_APPEND_FLAGS": "-DOWN", "PYTHONPATH": "/own", "TORCH_CUDA_ARCH_LIST": "8.0"}
    env = environment.compose(caller, farm, own)
    assert env == {"NVCC_APPEND_FLAGS": "-lineinfo -DOWN -objtemp", "PYTHONPATH": "/buildsite:/own:/caller",
                   "TORCH_CUDA_ARCH_LIST": "8.0", "MAX_JOBS": "2"}  # the project names its list: it wins
    # A container or a Windows build does not start from the caller's environment: only its flags carry over.
    assert environment.compose(caller, farm, own, inherit=False)["PYTHONPATH"] == "/buildsite:/own"
    assert environment.compose(caller, farm, own, inherit=False)["NVCC_APPEND_FLAGS"] == "-lineinfo -DOWN -objtemp"
    assert "PATH" not in environment.compose(caller, farm, own)  # nobody asked to change it: inherited as it is


def with_build_env(target: targets.Target, extra: dict[str, str]) -> targets.Target:
    return dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, **extra}))


@pytest.fixture
def target() -> targets.Target:
    return with_build_env(targets.default_target(reading.load(ROOT)), PROJECT_FLAGS)


def farm_part(target: targets.Target) -> str:
    return f"-objtemp --threads 0 -frandom-seed={target.id}"


def test_the_host_build_keeps_the_projects_flags_beside_the_farms(target: targets.Target, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-lineinfo")  # the caller's (read through settings.current())
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    source = tmp_path / "src"
    env = host.compiler_env(target, tk, max_jobs=1, farm=environment.farm_flags(target, "13.0.88", str(source)))
    mapping = f'"-ffile-prefix-map={source}=."'  # quoted: setuptools and nvcc split these like a shell
    assert env["NVCC_APPEND_FLAGS"] == (f"-lineinfo -DPROJECT_OWN {farm_part(target)} -Xcompiler={mapping} "
                                        "--compress-mode=size")
    assert env["CPPFLAGS"] == f"-DPROJECT_CPP {mapping}"


def test_the_container_build_keeps_the_projects_flags_beside_the_farms(target: targets.Target,
                                                                         tmp_path: Path) -> None:
    spec = images.spec_for(target.cell, f"{images.BASE_REPO}:bookworm")
    job = container.ContainerBuild(target=target, spec=spec, image=spec.tag, job="job1",
                                   outputs=tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "b"))
    python = container.build_python(target, spec)
    env = container.cibuildwheel_env(job, python, container.torch_volume(target, python), None)["CIBW_ENVIRONMENT"]
    assert f'NVCC_APPEND_FLAGS="-DPROJECT_OWN {farm_part(target)} --compress-mode=size"' in env
    assert 'CPPFLAGS="-DPROJECT_CPP"' in env


def test_the_windows_build_keeps_the_projects_flags_beside_the_farms(target: targets.Target) -> None:
    home = PureWindowsPath(r"C:\cache\cu13")
    variables = cibw.build_variables(target, home, "13.0.88", None, 4, {"NVCC_APPEND_FLAGS": "-lineinfo"})
    assert variables["NVCC_APPEND_FLAGS"] == f"-lineinfo -DPROJECT_OWN {farm_part(target)} --compress-mode=size"
    assert variables["CPPFLAGS"] == "-DPROJECT_CPP"


@pytest.mark.parametrize(("whose", "value"), [("caller", '-DA="x'), ("project", '-Xcompiler="-O2 -g'),
                                              ("caller", '-DA=a\\"b')])
def test_an_unbalanced_quote_in_nvcc_append_flags_is_one_error_naming_whose(
        target: targets.Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whose: str, value: str) -> None:
    """The farm splits the flag variables as nvcc does (ci/nvcc/wrapper.py) before it builds: a quote that does
    not pair up is the user's one error line, naming the variable, where it came from, and the value."""
    if whose == "caller":
        monkeypatch.setenv("NVCC_APPEND_FLAGS", value)
    else:
        target = with_build_env(target, {"NVCC_APPEND_FLAGS": value})
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    with pytest.raises(UsageError) as raised:
        host.compiler_env(target, tk, max_jobs=1)
    line = raised.value.line()
    assert raised.value.value == value and "NVCC_APPEND_FLAGS" in raised.value.what
    assert ("your environment's" if whose == "caller" else "build-env's") in raised.value.what
    assert "unbalanced double quote" in line and "-Xcompiler=" in raised.value.fix
