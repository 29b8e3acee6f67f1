"""The release dry run runs the generated workflow's import-test commands, changed only where this machine
cannot reach what GitHub can (PyTorch's indexes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ci import gha, project, rehearsal, targets

ROOT = Path(__file__).resolve().parent.parent


def test_the_dry_run_runs_the_workflows_own_import_commands_on_the_targets_python(tmp_path: Path) -> None:
    config = project.load(ROOT)
    target = next(t for t in targets.targets_for(config, "linux") if t.cell.name == "cu124")
    wheel = tmp_path / "x.whl"
    commands = dict(gha.import_commands(target))
    assert len(commands) == 2  # fusedops declares cpu-libraries: a CPU and a CUDA import test
    for command in commands.values():
        local = rehearsal.local_command(command, wheel=wheel, cpu_torch="2.13.0")
        assert local[:3] == [sys.executable, "-m", "ci"]
        assert "--torch-index" not in local and local[local.index("--import-test") + 1] == str(wheel)
        assert local[local.index("--test-python") + 1] == target.python == "3.10"
        assert local[local.index("--target") + 1] == target.id
        # Everything else is the generated command's, in its order.
        kept = [w for w in command.split()[3:] if not w.startswith("https://") and w not in ("--torch-index", "dist")]
        assert [w for w in local[3:] if w not in (str(wheel), "--cpu-torch", "2.13.0")] == kept
        assert ("--cpu-torch" in local) == ("--torch-kind cpu" in command)


def test_only_farm_commands_are_rehearsed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a farm command"):
        rehearsal.local_command("pip install x", wheel=tmp_path, cpu_torch=None)
