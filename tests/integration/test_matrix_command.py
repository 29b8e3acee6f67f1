"""``matrix`` for people (issue 47): one line per target, readable at 100 columns, with the GPU architectures a
build of each compiles for (``--arch-list``, ``TORCH_CUDA_ARCH_LIST`` and ``cuda-archs`` applied as ``build``
applies them) and where that list comes from; ``--wide`` adds toolkit, route and glibc; ``--json`` stays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci import cli, options
from ci.builds import arch_flags

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh project: a name and an empty table."""
    folder = tmp_path / "myext"
    folder.mkdir()
    (folder / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (folder / "pyproject.toml").write_text('[project]\nname = "myext"\nversion = "0.1"\n[tool.cuda-ext-farm]\n')
    return folder


def _matrix(project: Path, *args: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "TORCH_CUDA_ARCH_LIST"))}
    done = subprocess.run([sys.executable, "-m", "ci", "matrix", *args], cwd=project, text=True, capture_output=True,
                          timeout=120, env={**clean, "PYTHONPATH": str(ROOT), "COLUMNS": "100", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_an_empty_tables_matrix_is_one_line_per_target_within_100_columns(project: Path) -> None:
    ids = [t["id"] for t in json.loads(_matrix(project, "--json"))["targets"]]
    lines = _matrix(project).splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    rows = [line for line in lines if line.split(" ", 1)[0] in ids]
    assert [row.split()[0] for row in rows] == ids  # each target once, on one line, in the matrix's order
    header = lines.index(next(line for line in lines if line.startswith("target ")))
    assert lines[header + 1:header + 1 + len(ids)] == rows  # nothing wraps onto a line of its own
    assert lines[header].split() == ["target", "torch", "Python", "CUDA", "CPU", "GPU", "architectures"]
    assert "come from:" in "\n".join(lines[header + len(ids):])


@pytest.mark.parametrize(("args", "env", "table", "shown", "source"), [
    (["--arch-list", "8.6"], {}, "", "8.6", "--arch-list 8.6"),
    ([], {"TORCH_CUDA_ARCH_LIST": "8.6;9.0+PTX"}, "", "8.6 9.0+PTX",
     "TORCH_CUDA_ARCH_LIST=8.6;9.0+PTX, from the environment"),
    ([], {}, 'cuda-archs = "8.0;9.0+PTX"\n', "8.0 9.0+PTX", "the project's cuda-archs"),
])
def test_the_architectures_shown_are_those_a_build_gets(project: Path, args: list[str], env: dict[str, str],
                                                        table: str, shown: str, source: str) -> None:
    if table:
        (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + table)
    found = json.loads(_matrix(project, "--json", "--os", "linux", *args, **env))["targets"]
    assert {t["arch_list"] for t in found} == {shown.replace(" ", ";")}
    text = _matrix(project, "--os", "linux", *args, **env)
    rows = [line for line in text.splitlines() if line.split(" ", 1)[0] in {t["id"] for t in found}]
    assert rows and all(row.endswith(" " + shown) for row in rows), rows
    assert f"  {source} ({len(found)} targets)" in text.splitlines(), text
    # The build's own path: the selection build resolves for each target, and the list torch is then given.
    environ = {**{k: v for k, v in os.environ.items() if k != "TORCH_CUDA_ARCH_LIST"}, **env}
    for entry in found[::4]:
        opts = cli.parse(["build", "--target", entry["id"], *args, "--project", str(project)], environ=environ)
        (target,) = options.resolve(opts)
        assert arch_flags.arch_list_of(target) == entry["arch_list"], entry["id"]


def test_wide_adds_toolkit_route_and_glibc(project: Path) -> None:
    narrow = _matrix(project, "--os", "linux").splitlines()
    wide = _matrix(project, "--os", "linux", "--wide").splitlines()
    header = next(line for line in wide if line.startswith("target "))
    assert "toolkit: here / GitHub" in header and "route: here / GitHub" in header and "glibc" in header
    assert len(wide) == len(narrow)  # still one line per target
    assert any("manylinux_2_28" in line for line in wide) and not any("manylinux_2_28" in line for line in narrow)
