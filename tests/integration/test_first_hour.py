"""A new user's first hour (issue 47): a fresh extension project (a ``setup.py`` with one ``.cu`` file, a
``pyproject.toml`` with a name and an empty ``[tool.cuda-ext-farm]`` table) and the mistakes people make with it,
through the real entry (``python -m ci`` in a process of its own).

Each mistake ends in one line on stderr, ``error: <what> (<value>): <fix>``, exit 2, no traceback, nothing on stdout
(results only go there) and nothing made: no wheelhouse, no build folder, nothing in the cache. What is not a
mistake (``cuda = ["13"]``, ``--version``, ``--show-settings``) answers on stdout and exits 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.universe import matrix

ROOT = Path(__file__).resolve().parents[2]
SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(name="myext", ext_modules=[CUDAExtension("myext._C", ["myext/k.cu"])], cmdclass={"build_ext": BuildExtension})
"""
NAMED = '[project]\nname = "myext"\nversion = "0.1"\n'


def _project(folder: Path, pyproject: str | None, *, sources: bool = True) -> Path:
    folder.mkdir()
    if sources:
        (folder / "setup.py").write_text(SETUP)
        (folder / "myext").mkdir()
        (folder / "myext" / "k.cu").write_text("__global__ void k() {}\n")
    if pyproject is not None:
        (folder / "pyproject.toml").write_text(pyproject)
    return folder


def _farm(args: list[str], cwd: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    made = {"FARM_WHEELHOUSE": str(tmp_path / "made" / "wheelhouse"),
            "FARM_BUILD_DIR": str(tmp_path / "made" / "build"), "FARM_CACHE_DIR": str(tmp_path / "made" / "cache")}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "TORCH_CUDA_ARCH_LIST"))}
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=cwd, text=True, capture_output=True, timeout=120,
                          env={**clean, "PYTHONPATH": str(ROOT), "COLUMNS": "100", **made, **env})


# (id, pyproject.toml (None: none), the project has its sources, arguments, environment, the last line's pattern)
MISTAKES: list[tuple[str, str | None, bool, list[str], dict[str, str], str]] = [
    ("tourch", NAMED + '[tool.cuda-ext-farm]\ntourch = ["2.11"]\n', True, ["build"], {},
     r"unknown key in \[tool\.cuda-ext-farm\] of pyproject\.toml \(tourch\): did you mean torch\?"),
    ("torch 2.99", NAMED + '[tool.cuda-ext-farm]\ntorch = ["2.99"]\n', True, ["build"], {},
     r"unknown torch release \(2\.99\): this farm knows torch 2\.\d+"),
    ("python 2.7", NAMED + '[tool.cuda-ext-farm]\npython = ["2.7"]\n', True, ["build"], {},
     r"\[tool\.cuda-ext-farm\] python names no Python the selected torch releases have wheels for \(2\.7\): "
     r"torch [\d., ]+ have wheels for Python 3\.\d+ to 3\.\d+(; free-threaded [\d.t, ]+)?: pick some of those"),
    ("cuda 11.8", NAMED + '[tool.cuda-ext-farm]\ncuda = ["11.8"]\n', True, ["build"], {},
     r"unknown CUDA version \(11\.8\): pick one of 13\.0"),
    ("cuda-archs empty", NAMED + '[tool.cuda-ext-farm]\ncuda-archs = ""\n', True, ["build"], {},
     r"\[tool\.cuda-ext-farm\] cuda-archs is empty \(''\): list architectures"),
    ("--arch-list 9.5 build", NAMED + "[tool.cuda-ext-farm]\n", True, ["build", "--arch-list", "9.5"], {},
     r"--arch-list: architecture not supported by CUDA 1[23]\.\d \(9\.5\): torch extensions with CUDA"),
    ("--arch-list 9.5 matrix", NAMED + "[tool.cuda-ext-farm]\n", True, ["matrix", "--arch-list", "9.5"], {},
     r"--arch-list: architecture not supported by CUDA 1[23]\.\d \(9\.5\)"),
    ("TORCH_CUDA_ARCH_LIST=9.5", NAMED + "[tool.cuda-ext-farm]\n", True, ["matrix"], {"TORCH_CUDA_ARCH_LIST": "9.5"},
     r"TORCH_CUDA_ARCH_LIST: architecture not supported by CUDA 1[23]\.\d \(9\.5\): .*or unset TORCH_CUDA_ARCH_LIST"),
    ("TORCH_CUDA_ARCH_LIST=9.5 build", NAMED + "[tool.cuda-ext-farm]\n", True, ["build"],
     {"TORCH_CUDA_ARCH_LIST": "9.5"}, r"TORCH_CUDA_ARCH_LIST: architecture not supported by CUDA 1[23]\.\d \(9\.5\)"),
    ("os macos", NAMED + '[tool.cuda-ext-farm]\nos = ["macos"]\n', True, ["build"], {},
     r"\[tool\.cuda-ext-farm\] os names an unknown value \(macos\): use some of linux, windows"),
    ("archs riscv64", NAMED + '[tool.cuda-ext-farm]\narchs = ["riscv64"]\n', True, ["build"], {},
     r"archs names an architecture the farm does not build \(riscv64\): use some of x86_64, aarch64"),
    ("no name", "[tool.cuda-ext-farm]\n", True, ["build"], {},
     r"the project has no name \(\[tool\.cuda-ext-farm\] name or \[project\] name\) \(.*pyproject\.toml\): add name"),
    ("empty folder", None, False, ["build"], {}, r"no pyproject\.toml or setup\.py in the project folder \(.*\): pass"),
    ("malformed TOML", NAMED + '[tool.cuda-ext-farm]\ntorch = ["2.11"\ncuda = ["13"]\n', True, ["build"], {},
     r"malformed TOML \(.*pyproject\.toml: .*line 6.*\): fix the syntax at that line"),
    ("cuda_ext_farm", NAMED + "[tool.cuda_ext_farm]\n", True, ["build"], {},
     r"pyproject\.toml has \[tool\.cuda_ext_farm\], not \[tool\.cuda-ext-farm\] \(cuda_ext_farm\): rename the table"),
    ("biuld", NAMED + "[tool.cuda-ext-farm]\n", True, ["biuld"], {},
     r"unknown command \(biuld\): did you mean `python -m ci build`\? `python -m ci --help` lists the commands"),
    ("build --torh", NAMED + "[tool.cuda-ext-farm]\n", True, ["build", "--torh", "2.11"], {},
     r"build has no option --torh \(--torh 2\.11\): did you mean --torch\?"),
]


@pytest.mark.parametrize(("pyproject", "sources", "args", "env", "line"), [m[1:] for m in MISTAKES],
                         ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_one_line_on_stderr_before_anything_is_made(pyproject: str | None, sources: bool,
                                                                 args: list[str], env: dict[str, str], line: str,
                                                                 tmp_path: Path) -> None:
    project = _project(tmp_path / "myext", pyproject, sources=sources)
    done = _farm(args, project, tmp_path, **env)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (done.returncode, done.stdout) == (2, ""), (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and done.stderr.strip().splitlines()[-1] == errors[0], done.stderr[-2000:]
    assert re.fullmatch(r"error: .+ \(.+\): .+", errors[0]) and re.search(line, errors[0]), errors[0]
    assert not (tmp_path / "made").exists(), sorted(str(p) for p in (tmp_path / "made").rglob("*"))


def test_cuda_13_alone_selects_the_torch_releases_built_with_cuda_13(tmp_path: Path) -> None:
    project = _project(tmp_path / "myext", NAMED + '[tool.cuda-ext-farm]\ncuda = ["13"]\n')
    done = _farm(["matrix", "--json", "--os", "linux"], project, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)["targets"]
    assert found and {t["cell"] for t in found} == {matrix.get_cell("13").name}
    newest = max((r for r in matrix.TORCH_RELEASES if r.cuda_major == 13), key=lambda r: r.version.split("."))
    assert {t["torch"] for t in found} == {matrix.get_torch(newest.minor).version}


def test_version_names_the_version_and_the_commit(tmp_path: Path) -> None:
    done = _farm(["--version"], tmp_path, tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    git = shutil.which("git")
    head = subprocess.run([git, "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() \
        if git and (ROOT / ".git").exists() else None
    version = re.search(r'^version = "(.+)"', (ROOT / "farm" / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    expected = f"cuda-ext-farm {version.group(1)} (commit {head}" if head else f"cuda-ext-farm {version.group(1)} ("
    assert done.stdout.startswith(expected), done.stdout


@pytest.mark.parametrize("args", [["build", "--show-settings"], ["--show-settings", "build"],
                                  ["build", "--cuda", "13", "--show-settings", "--max-jobs", "3"], ["--show-settings"]])
def test_show_settings_prints_them_and_runs_nothing(args: list[str], tmp_path: Path) -> None:
    project = _project(tmp_path / "myext", NAMED + "[tool.cuda-ext-farm]\n")
    done = _farm(args, project, tmp_path, TORCH_CUDA_ARCH_LIST="9.0")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(re.fullmatch(r"TORCH_CUDA_ARCH_LIST += 9\.0 \(env\)", x) for x in lines), lines
    assert any(re.fullmatch(r"MAX_JOBS += 3 \(flag\)", x) for x in lines) == ("--max-jobs" in args), lines
    assert not (tmp_path / "made").exists() and not (project / "wheelhouse").exists()
    assert "error" not in done.stderr, done.stderr
