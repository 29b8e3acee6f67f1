"""Map the farm's code into the distribution: ci/, windows/ and docker/ from the repository (a checkout: one
folder up) or from the sdist's root (where the sdist build put them), never a copy kept in git.

In the wheel they sit under cuda_ext_farm/, so the installed layout is the checkout's (ci/ beside windows/ beside
docker/: the farm finds its Dockerfile and locks as it does in a checkout) and no top-level `ci` package lands in
the user's site-packages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FARM_FOLDERS = ("ci", "windows", "docker")
SKIP = ("__pycache__", ".mypy_cache", ".ruff_cache")


class FarmLayoutHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        here = Path(self.root)
        source = here.parent if (here.parent / "ci" / "__main__.py").is_file() else here
        if not (source / "ci" / "__main__.py").is_file():
            raise FileNotFoundError(f"the farm's ci/ is neither in {here.parent} (a checkout) nor in {here} (an sdist)")
        prefix = "cuda_ext_farm/" if self.target_name == "wheel" else ""
        for folder in FARM_FOLDERS:
            for path in sorted((source / folder).rglob("*")):
                if path.is_file() and not any(part in SKIP for part in path.parts) and path.suffix != ".pyc":
                    build_data["force_include"][str(path)] = prefix + path.relative_to(source).as_posix()
