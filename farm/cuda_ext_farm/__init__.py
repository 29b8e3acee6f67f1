"""The ``cuda-ext-farm`` console script: put the farm's code (ci/, windows/) on the path, then run its launcher
(``ci/launch.py``), which validates the arguments and runs ``python -m ci`` in the farm's own tool environment."""

from __future__ import annotations

import sys
from pathlib import Path


def farm_root() -> Path:
    """The folder holding ci/: beside this file when installed, the repository when run from a checkout."""
    here = Path(__file__).resolve().parent
    for root in (here, here.parent.parent):
        if (root / "ci" / "__main__.py").is_file():
            return root
    raise SystemExit(f"error: the farm's code (ci/) is missing beside {here}: reinstall cuda-ext-farm")


def main() -> None:
    root = str(farm_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    from ci import launch

    launch.main()
