"""The command line is read before any tool environment exists (nox's own Python, the installed command's
launcher): parsing and validating every command's --help must need neither rich nor the farm's other tools."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.modules["rich"] = None  # any `import rich...` now fails, as in an environment without it
sys.path.insert(0, sys.argv[1])
from ci import cli
for name in cli.COMMANDS:
    try:
        cli.session_args(name, ["--help"])
    except SystemExit:
        pass
print(sorted(cli.COMMANDS))
"""


def test_every_command_parses_without_rich() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'build'" in done.stdout and "'release'" in done.stdout
