"""Map the farm's code into the distribution: ci/, windows/ and docker/ from the repository (a checkout: one
folder up) or from the sdist's root (where the sdist build put them), never a copy kept in git.

In the wheel they sit under cuda_ext_farm/, so the installed layout is the checkout's (ci/ beside windows/ beside
docker/: the farm finds its Dockerfile and locks as it does in a checkout) and no top-level `ci` package lands in
the user's site-packages.

Both also get ci/commands/farm_source.json: the version, and the repository and commit the code was built from
(read from the checkout's git metadata by ci/commands/farm_source.py; a wheel built from the sdist keeps the sdist's
record).
`cuda-ext-farm --version` prints it and `workflows render` pins a project's workflows to it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FARM_FOLDERS = ("ci", "windows", "docker")
SKIP = ("__pycache__", ".mypy_cache", ".ruff_cache")
RECORD = Path("ci") / "commands" / "farm_source.json"


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
                relative = path.relative_to(source)
                if path.is_file() and not any(part in SKIP for part in path.parts) and path.suffix != ".pyc" \
                        and relative != RECORD:
                    build_data["force_include"][str(path)] = prefix + relative.as_posix()
        self._scratch = Path(tempfile.mkdtemp(prefix="farm-source-"))
        written = self._scratch / RECORD.name
        written.write_text(json.dumps(_farm_source(source).record(source, self.metadata.version), indent=2) + "\n",
                           encoding="utf-8")
        build_data["force_include"][str(written)] = prefix + RECORD.as_posix()

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        shutil.rmtree(getattr(self, "_scratch", ""), ignore_errors=True)


def _farm_source(source: Path) -> Any:
    """The farm's own ci/commands/farm_source.py (standard library only), loaded by path: the build environment has
    no ci."""
    spec = importlib.util.spec_from_file_location("farm_source", source / "ci" / "commands" / "farm_source.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
