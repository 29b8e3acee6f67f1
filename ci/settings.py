"""Settings the user gives by option, environment variable or default, resolved in one cascade."""

from __future__ import annotations

import os
from pathlib import Path


def path_option(value: str | None, variable: str, default: Path) -> Path:
    """The one cascade for folders: option, else environment variable, else default."""
    chosen = value or os.environ.get(variable, "").strip() or None
    return Path(chosen).expanduser().resolve() if chosen else default
