"""How long builds take: cold, warm with nothing changed, warm after a one-file change.

``python -m ci bench-builds [--kind host --kind aarch64 --kind 13 --kind 12]`` builds the project's release
target of each kind three times in a clone of the project (the checkout is never modified):

* **cold**: an empty build folder; for containers also an empty compiler cache, torch volume and symbol
  cache (a fresh ``FARM_VOLUME_NAMESPACE``); the builder image, the toolkit, the build environment and
  pip's download cache exist (they are per machine, not per build);
* **warm, no change**: the same build again;
* **warm, one file**: after a line of code is appended to one CUDA source file (the smallest ``.cu`` of
  the project, or ``--touch PATH``), so exactly one translation unit is compiled again, for every
  architecture of the target.

It prints a table with the ratios to the cold time and writes ``build-times.json`` into ``--out``.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from rich.table import Table

from ci import fsutil, proc
from ci.errors import UsageError
from ci.linux import images, reproduce
from ci.log import log
from ci.universe import targets
from ci.universe.project import FARM_ROOT, ProjectConfig
from ci.universe.selection import Selection, select


@dataclasses.dataclass
class Row:
    kind: str
    target: str
    cold: float = 0.0
    warm: float = 0.0
    one_file: float = 0.0

    def ratio(self, value: float) -> float:
        return value / self.cold if self.cold else 0.0


def one_file_to_touch(project: Path, given: str | None) -> Path:
    if given:
        path = project / given
        if not path.is_file():
            raise UsageError("--touch names no file of the project", given, "give a path relative to the project")
        return path
    sources = sorted(project.rglob("*.cu"), key=lambda p: (p.stat().st_size, str(p)))
    sources = [s for s in sources if "fixtures" not in s.parts and "build" not in s.parts]
    if not sources:
        raise UsageError("the project has no .cu file to change", project, "pass --touch PATH")
    return sources[0]


def timed_build(cmd: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    proc.run(cmd, env=env, what="a timed build failed", hint="its output is above")
    return time.monotonic() - started


def bench(config: ProjectConfig, kinds: list[str], touch: str | None, out: Path) -> list[Row]:
    """Time cold, warm and one-file builds of each kind."""
    top, inside, commit = reproduce.repository_of(config.root)
    rows: list[Row] = []
    folder = Path(tempfile.mkdtemp(prefix="farm-build-times-"))
    try:
        clone = folder / "clone"
        proc.run(["git", "clone", "--quiet", "--no-hardlinks", str(top), str(clone)])
        proc.run(["git", "-C", str(clone), "checkout", "--quiet", commit])
        project_dir = clone / inside
        for kind in kinds:
            container = kind not in ("host", "aarch64")
            if kind == "aarch64":  # the release target cross-compiled for aarch64 on this machine (ci/linux/cross.py)
                default = targets.default_target(config)
                target = select(config, Selection(cuda=default.cell.name, arch="aarch64"))[0]
            elif container:
                target = select(config, Selection(cuda=kind))[0]
            else:
                target = targets.default_target(config)
            namespace = f"bench{uuid.uuid4().hex[:8]}"
            env = {"PYTHONPATH": str(FARM_ROOT)}
            if container:
                env["FARM_VOLUME_NAMESPACE"] = namespace
            build_dir = folder / f"build-{kind}"
            cmd = [sys.executable, "-m", "ci", "build-cuda" if container else "build", "--project", str(project_dir),
                   "--target", target.id, "--wheelhouse", str(folder / f"wheelhouse-{kind}"),
                   "--build-dir", str(build_dir)]
            if container:
                images.ensure_image(images.spec_for(target.cell))  # the image is the machine's, not the build's
            row = Row(f"container {target.cell.name}" if container else
                      ("host, cross to aarch64" if target.cross else "host"), target.id)
            row.cold = timed_build(cmd, env)
            row.warm = timed_build(cmd, env)
            changed = one_file_to_touch(project_dir, touch)
            # A change of code, not of a comment: a compiler cache would still hit a comment-only change.
            changed.write_text(changed.read_text() + "\nnamespace { [[maybe_unused]] constexpr int "
                               f"farm_bench_{uuid.uuid4().hex} = 1; }}\n")
            row.one_file = timed_build(cmd, env)
            proc.run(["git", "-C", str(clone), "checkout", "--quiet", "--", "."])
            rows.append(row)
            if container:
                remove_volumes(namespace)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    table = Table(title=f"build times of {config.name} (seconds; ratio to cold)")
    for col in ("build", "target", "cold", "warm, no change", "warm, one file"):
        table.add_column(col)
    for row in rows:
        table.add_row(row.kind, row.target, f"{row.cold:.0f}", f"{row.warm:.0f} ({row.ratio(row.warm):.0%})",
                      f"{row.one_file:.0f} ({row.ratio(row.one_file):.0%})")
    log.result(table)
    fsutil.atomic_write_json(out / "build-times.json", {"project": config.name, "commit": commit,
                                                        "rows": [dataclasses.asdict(r) for r in rows]})
    log.info(f"written to {out / 'build-times.json'}")
    return rows


def remove_volumes(namespace: str) -> None:
    docker = images.docker_cli()
    listed = proc.run([docker, "volume", "ls", "-q", "--filter", f"name=cuda-ext-farm-{namespace}-"], capture=True,
                      check=False, log=False).stdout.split()
    if listed:
        proc.run([docker, "volume", "rm", "-f", *listed], capture=True, check=False)
