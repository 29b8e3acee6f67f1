"""The farm as a tool a project installs and runs from its own folder (issue 19): the `cuda-ext-farm` command
(pip, pipx, uvx), and the nox sessions run from another project's folder with `nox -f <farm>/noxfile.py`.

The builds of real-shaped projects through the command are in tests/integration/test_fixture_projects.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def _user_project(tmp_path: Path) -> Path:
    """A copy of the classic fixture in a folder outside the farm's checkout."""
    project = tmp_path / "their project"
    shutil.copytree(CLASSIC, project)
    return project


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
                          env={**os.environ, "COLUMNS": "200", **env})


def _matrix_project(output: str) -> str:
    name: str = json.JSONDecoder().raw_decode(output[output.index("{"):])[0]["project"]
    return name


def test_the_command_acts_on_the_project_of_the_folder_it_runs_in(farm_command: list[str], tmp_path: Path) -> None:
    project = _user_project(tmp_path)
    result = _run([*farm_command, "matrix", "--json", "--os", "linux"], project)
    assert result.returncode == 0, result.stdout[-3000:]
    assert _matrix_project(result.stdout) == "classic-ext"
    # A relative --project is the caller's, too.
    result = _run([*farm_command, "matrix", "--json", "--project", project.name], project.parent)
    assert result.returncode == 0 and _matrix_project(result.stdout) == "classic-ext", result.stdout[-3000:]


def test_a_folder_without_a_project_is_one_line_and_creates_nothing(farm_command: list[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cache = tmp_path / "cache"
    result = _run([*farm_command, "build"], empty, FARM_CACHE_DIR=str(cache))
    assert result.returncode == 2
    assert result.stdout.strip().splitlines()[-1] == (
        f"error: no pyproject.toml or setup.py in the project folder ({empty}): pass the root of a Python "
        "extension project (--project DIR)")
    result = _run([*farm_command, "build", "--arch-list", ""], _user_project(tmp_path), FARM_CACHE_DIR=str(cache))
    assert result.returncode == 2 and "error: --arch-list is empty ('')" in result.stdout
    result = _run([*farm_command, "audit", "wheelhouse/nothing.whl"], empty, FARM_CACHE_DIR=str(cache))
    assert result.returncode == 2
    assert result.stdout.strip().splitlines()[-1] == (
        "error: the wheel does not exist (wheelhouse/nothing.whl): pass an existing path (a relative path is read "
        f"from the folder you ran in, {empty})")
    assert not cache.exists(), "validation must come before the farm's tool environment is made"


def test_nox_sessions_read_paths_from_the_folder_nox_was_run_from(tmp_path: Path) -> None:
    """`nox -f <farm>/noxfile.py -s ...` from another project's folder: nox runs sessions in the noxfile's
    folder, which made `--project .` the farm itself (defect 1)."""
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    project = _user_project(tmp_path)
    envdir = {"FARM_NOX_ENVDIR": str(tmp_path / "nox-envs")}
    result = _run([nox, "-f", str(ROOT / "noxfile.py"), "-s", "matrix", "--", "--project", ".", "--json"], project,
                  **envdir)
    assert result.returncode == 0, result.stdout[-3000:]
    assert _matrix_project(result.stdout) == "classic-ext"
    # A relative output folder lands in the caller's folder, not the farm's.
    result = _run([nox, "-f", str(ROOT / "noxfile.py"), "-s", "workflows", "--", "--out", "generated",
                   "--farm-repository", "example/farm", "--farm-ref", "0" * 40], project, **envdir)
    assert result.returncode == 0, result.stdout[-3000:]
    assert (project / "generated" / "wheels.yml").is_file()
    assert not (ROOT / "generated").exists()


@pytest.mark.parametrize("runner", ["pipx", "uvx"])
def test_pipx_and_uvx_run_the_command_from_the_checkout_and_from_the_sdist(runner: str, tmp_path: Path) -> None:
    tool = shutil.which(runner) or (str(Path(sys.executable).parent / runner)
                                    if (Path(sys.executable).parent / runner).exists() else None)
    if tool is None:
        pytest.skip(f"{runner} is not installed (.ci/run installs it)")
    uv = shutil.which("uv") or str(Path(tool).parent / "uv")
    project = _user_project(tmp_path)
    spec = ["run", "--spec"] if runner == "pipx" else ["--from"]
    env = {"PIPX_HOME": str(tmp_path / "pipx"), "UV_CACHE_DIR": str(tmp_path / "uv"), "PIP_CONSTRAINT": os.devnull}
    result = _run([tool, *spec, str(ROOT / "farm"), "cuda-ext-farm", "matrix", "--json"], project, **env)
    assert result.returncode == 0, result.stdout[-3000:]
    assert _matrix_project(result.stdout) == "classic-ext"
    if not Path(uv).exists():
        return
    dist = tmp_path / "dist"
    built = _run([uv, "build", "--sdist", "--out-dir", str(dist), str(ROOT / "farm")], tmp_path, **env)
    assert built.returncode == 0, built.stdout[-3000:]
    (sdist,) = dist.glob("cuda_ext_farm-*.tar.gz")
    result = _run([tool, *spec, str(sdist), "cuda-ext-farm", "matrix", "--json"], project, **env)
    assert result.returncode == 0, result.stdout[-3000:]
    assert _matrix_project(result.stdout) == "classic-ext"


def _git(*args: str, cwd: Path) -> str:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the farm's git checkout")
    return subprocess.run([git, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_the_command_answers_version_settings_and_typos_without_a_tool_environment(farm_command: list[str],
                                                                                    tmp_path: Path) -> None:
    head = _git("rev-parse", "HEAD", cwd=ROOT)
    cache = tmp_path / "cache"
    project = _user_project(tmp_path)
    version = _run([*farm_command, "--version"], project, FARM_CACHE_DIR=str(cache))
    assert version.returncode == 0 and f"(commit {head}" in version.stdout, version.stdout
    shown = _run([*farm_command, "build", "--show-settings"], project, FARM_CACHE_DIR=str(cache))
    assert shown.returncode == 0 and "FARM_WHEELHOUSE" in shown.stdout, shown.stdout[-3000:]
    typo = subprocess.run([*farm_command, "biuld"], cwd=project, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FARM_CACHE_DIR": str(cache)})
    assert (typo.returncode, typo.stdout) == (2, "")
    assert typo.stderr.strip() == ("error: unknown command (biuld): did you mean `cuda-ext-farm build`? "
                                   "`cuda-ext-farm --help` lists the commands")
    assert not cache.exists() and not (project / "wheelhouse").exists()


def test_the_distribution_records_where_it_came_from_and_render_pins_it(tmp_path: Path) -> None:
    """Built from a clone whose origin is on GitHub: `--version` names the commit and the repository, and `workflows
    render` pins a project's workflows to them without --farm-repository/--farm-ref."""
    clone = tmp_path / "farm-clone"
    _git("clone", "--quiet", str(ROOT), str(clone), cwd=tmp_path)
    _git("remote", "set-url", "origin", "https://github.com/example-owner/example-farm.git", cwd=clone)
    head = _git("rev-parse", "HEAD", cwd=clone)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(clone / "farm")], check=True,
                   env={**os.environ, "PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    command = str(venv / "bin" / "cuda-ext-farm")
    version = _run([command, "--version"], tmp_path)
    assert version.stdout.strip().endswith(f"(commit {head} of https://github.com/example-owner/example-farm)"), \
        version.stdout
    project = _user_project(tmp_path)
    rendered = _run([command, "workflows", "render", "--out", "wf"], project)
    assert rendered.returncode == 0, rendered.stdout[-3000:]
    assert f"farm pin: example-owner/example-farm@{head}" in rendered.stdout
    ci = (project / "wf" / "ci.yml").read_text()
    assert "repository: example-owner/example-farm" in ci and head in ci
