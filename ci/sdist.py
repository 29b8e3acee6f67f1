"""The project's sdist: built in the farm's build environment of the release target, found again by the
release's assemble step."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import CommandFailed, UsageError

if TYPE_CHECKING:
    from ci.project import ProjectConfig


def build_sdist(config: ProjectConfig, dest: Path) -> Path:
    """``python -m build --sdist`` in the farm's build environment of the release target (its setup.py may
    import torch, which an isolated build would download again)."""
    from ci import envs, options, proc, targets

    target = targets.default_target(config)
    env = envs.build_env(options.current_python(), target.torch_requirement, config.build_requires)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="farm-sdist-") as tmp:
        proc.run([env.python, "-m", "build", "--sdist", "--no-isolation", "--outdir", tmp, config.root],
                 env={"PIP_CONSTRAINT": os.devnull}, what="building the sdist failed")
        made = sorted(Path(tmp).glob("*.tar.gz"))
        if len(made) != 1:
            raise CommandFailed("the sdist build did not produce exactly one archive",
                                ", ".join(p.name for p in made) or "none", "its output is above")
        final = dest / made[0].name
        shutil.copy2(made[0], final)
    return final


def find_sdist(folder: Path) -> Path:
    found = sorted(folder.glob("*.tar.gz"))
    if len(found) != 1:
        raise UsageError("expected exactly one sdist", f"{folder}: {', '.join(p.name for p in found) or 'none'}",
                         "pass the folder python -m ci release --sdist wrote")
    return found[0]
