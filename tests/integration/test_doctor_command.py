"""``doctor`` end to end: ``python -m ci doctor`` (and ``python -m ci.doctor``, the doctor alone) run as a user runs
them, over the recorded environments and this interpreter, and their bad input (the in-process tests:
tests/unit/doctor/test_doctor.py)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.unit.doctor.test_doctor import ARM, CPU, ENVS, PT211, ROOT, write_release


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_release(tmp_path_factory.mktemp("release"))


def _farm(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *argv], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The farm's last line: its error goes to stderr (after the probe's command line); the report stays on
    stdout."""
    return done.stderr.strip().splitlines()[-1]


def test_command_with_recorded_environments(release: Path) -> None:
    done = _farm("doctor", str(release), "--env", str(ENVS / "cpu_torch.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"demo-ext: fits: {CPU} [torch2.13-cpu]: CPU build" in done.stdout
    data = json.loads(_farm("doctor", str(release), "--env", str(ENVS / "b200_cu130.json"), "--json").stdout)
    assert data["fits"] and data["projects"]["demo-ext"]["chosen"] == PT211
    none = _farm("doctor", str(release), "--env", str(ENVS / "v100_older_than_sass.json"))
    assert none.returncode == 1
    assert _last_line(none).startswith("error: no wheel of demo-ext fits this machine (")
    assert "no code for GPU 0 (Tesla V100-SXM2-32GB, compute capability 7.0)" in none.stdout


def test_the_command_runs_without_the_farms_tools(release: Path) -> None:
    """`python -m ci.doctor`: the doctor alone (standard library and packaging), for a GPU box with only torch."""
    done = subprocess.run([sys.executable, "-m", "ci.doctor", str(release), "--env", str(ENVS / "gh200_aarch64.json")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"demo-ext: fits: {ARM} [cu130]: SASS for compute capability 9.0" in done.stdout


def test_command_probes_the_interpreter_first_on_path(release: Path) -> None:
    """The real probe, in this interpreter (found as `python` on PATH, the default), end to end."""
    try:
        import torch
    except ImportError:
        pytest.skip("this interpreter has no torch")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = _farm("doctor", str(release), env={"PATH": path})
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out
    assert "doctor/probe.py" in out and "$ " in out  # the probe's command line, logged before it ran
    kind = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
    assert f"torch: {metadata.version('torch')} ({kind})" in done.stdout, out
    assert f"CPython {platform.python_version()}" in done.stdout
    if torch.version.cuda is None and metadata.version("torch").startswith("2.13.") and sys.version_info[:2] == (3, 11):
        assert done.returncode == 0 and f"demo-ext: fits: {CPU}" in done.stdout, out


@pytest.mark.parametrize("case", ["missing", "no shape", "no wheels", "env missing", "env not json", "env no python",
                                  "python missing", "probe fails"])
def test_bad_input_is_one_line(case: str, release: Path, tmp_path: Path) -> None:
    env = ["--env", str(ENVS / "h100_cu130.json")]
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "notes.txt").write_text("x")
    (tmp_path / "empty_site").mkdir()
    (tmp_path / "empty_site" / "index.html").write_text("<html></html>")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "nopython.json").write_text('{"torch": null}')
    args, code, text = {
        "missing": ([str(tmp_path / "nowhere"), *env], 2, "error: the index folder does not exist ("),
        "no shape": ([str(tmp_path / "odd"), *env], 2, "error: not a wheelhouse (<target-id>/<wheel>), PEP 503 site"),
        "no wheels": ([str(tmp_path / "empty_site"), *env], 2, "error: the PEP 503 site holds no wheels ("),
        "env missing": ([str(release), "--env", str(tmp_path / "none.json")], 2,
                        "error: the recorded environment does not exist ("),
        "env not json": ([str(release), "--env", str(tmp_path / "bad.json")], 2, "error: not a recorded environment"),
        "env no python": ([str(release), "--env", str(tmp_path / "nopython.json")], 2,
                          "error: not a recorded environment (no 'python' object)"),
        "python missing": ([str(release), "--python", str(tmp_path / "no-python")], 2,
                           "error: --python is not an interpreter ("),
        "probe fails": ([str(release), "--python", "false"], 1, "error: the environment probe failed ("),
    }[case]
    done = _farm("doctor", *args)
    assert done.returncode == code, done.stdout + done.stderr
    assert _last_line(done).startswith(text), _last_line(done)
    assert "Traceback" not in done.stdout + done.stderr
