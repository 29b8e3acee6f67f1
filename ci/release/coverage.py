"""Which of a project's targets a folder of wheels already holds, and which are missing.

A folder is read in one of the two shapes the farm writes:

* a **wheelhouse** (``build``, ``build-all``): one folder per target id holding that target's wheel;
* a **PEP 503 site** (ci/release/index.py: ``<site>/index.html``, ``<site>/<variant>/<project>/index.html``, one
  index per CUDA variant as PyTorch's): a target's wheel is a file of its variant's project page whose name
  is the project's, whose local version carries the target's label (``pt2.11.cu130``; a stable-ABI wheel of
  the PyPI variant has none) and whose tags are the target's (``cp310-abi3``, ``manylinux…_x86_64``).

A wheel across CUDA majors (``pypi-cuda-majors``: ``release pypi-wheel``, its dist-info's ``cuda-ext-farm.json``
has ``majors``) found for one target covers too the release-cell targets of its other majors with the same Python
tags and CPU architecture (the cu128 target through its ``_cuda12/`` build): their row names the wheel and the major.

``build-all --missing`` builds exactly the missing Linux targets into a wheelhouse: each target's wheel is
moved into its folder only once it passed the audit (ci/builds/tail.py), so a stopped run leaves no partial wheel
and the next ``--missing`` run continues with what is still missing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from rich.table import Table

from ci import wheelmeta
from ci.errors import UsageError
from ci.release import index
from ci.universe.targets import Target


@dataclasses.dataclass(frozen=True)
class Coverage:
    folder: Path
    shape: str  # "wheelhouse" or "PEP 503 site"
    #: target id -> the wheel that covers it
    present: dict[str, str]
    missing: tuple[Target, ...]
    targets: tuple[Target, ...]

    @property
    def percent(self) -> float:
        return 100.0 * len(self.present) / len(self.targets) if self.targets else 100.0

    def as_dict(self) -> dict[str, object]:
        return {"folder": str(self.folder), "shape": self.shape, "percent": round(self.percent, 1),
                "present": self.present, "missing": [t.id for t in self.missing]}

    def table(self, project: str) -> Table:
        table = Table(title=f"{project}: {len(self.present)} of {len(self.targets)} targets in {self.folder} "
                            f"({self.shape}): {self.percent:.0f}%")
        table.add_column("target", no_wrap=True)
        table.add_column("wheel")
        for t in self.targets:
            table.add_row(t.id, self.present.get(t.id, "[red]missing[/]"))
        return table


def _bad_folder(folder: Path) -> UsageError:
    return UsageError("not a wheelhouse (<target-id>/ folders with wheels) nor a PEP 503 site "
                      "(index.html with <variant>/<project>/index.html pages)", folder,
                      "name the folder build-all wrote (--wheelhouse) or a release's index site")


def shape_of(folder: Path, chosen: Sequence[Target]) -> str:
    if not folder.is_dir():
        raise UsageError("the folder to compare with does not exist", folder, "name an existing folder")
    if (folder / "index.html").is_file():
        return "PEP 503 site"
    ids = {t.id for t in chosen}
    children = [p for p in folder.iterdir() if p.is_dir()]
    if any(p.name in ids or any(p.glob("*.whl")) for p in children) or not any(folder.iterdir()):
        return "wheelhouse"
    raise _bad_folder(folder)


def matches(file_name: str, target: Target) -> bool:
    """Whether the wheel named ``file_name`` is ``target``'s (name, local label, interpreter-ABI and platform)."""
    try:
        name, version, _build, tags = parse_wheel_filename(file_name)
    except InvalidWheelFilename:
        return False
    if name != canonicalize_name(target.project.name):
        return False
    if not wheelmeta.local_matches(version.local or "", target.local_version):
        return False
    want_interpreter, want_abi = target.wheel_tag_prefix.split("-")
    for tag in tags:
        if target.abi3:
            # Any abi3 wheel whose floor is at or below the Python the target serves covers it: a cp39-abi3 wheel
            # is the cp311 abi3 target's wheel when the floor was not known before the build.
            if tag.abi != "abi3" or not abi3_serves(tag.interpreter, target.python):
                continue
        elif (tag.interpreter, tag.abi) != (want_interpreter, want_abi):
            continue
        if target.os == "windows" and tag.platform == "win_amd64":
            return True
        if target.os == "linux" and tag.platform.endswith(f"_{target.arch}") \
                and tag.platform.startswith(("manylinux", "musllinux", "linux")):
            return True
    return False


def abi3_serves(interpreter: str, python: str) -> bool:
    """Whether an abi3 wheel of ``interpreter`` (``cp39``) installs on CPython ``python`` (``3.11``)."""
    found = re.fullmatch(r"cp3(\d+)", interpreter)
    return found is not None and int(found.group(1)) <= int(python.split(".")[1])


def _site_files(site: Path, variant: str, project: str) -> list[tuple[str, Path]]:
    page = site / variant / index.normalize(project) / "index.html"
    if not page.is_file():
        return []
    return [(f.name, (page.parent / f.url.split("#")[0]).resolve()) for f in index.read_project_page(page)]


def majors_of(wheel: Path) -> tuple[int, ...]:
    """The CUDA majors a wheel across majors holds (``cuda-ext-farm.json`` ``majors``); () for any other wheel or a
    file not on this machine."""
    import json
    import zipfile

    from ci.audit import describe

    try:
        with zipfile.ZipFile(wheel) as zf:
            found = [n for n in zf.namelist() if n.endswith(f".dist-info/{describe.FILE}")]
            doc = json.loads(zf.read(found[0])) if found else {}
    except (OSError, zipfile.BadZipFile, ValueError):
        return ()
    majors = doc.get("majors") if isinstance(doc, dict) else None
    return tuple(sorted(int(m) for m in majors if str(m).isdigit())) if isinstance(majors, dict) else ()


def read(folder: Path, chosen: Sequence[Target]) -> Coverage:
    """The coverage of ``chosen`` by ``folder`` (a wheelhouse or a PEP 503 site)."""
    shape = shape_of(folder, chosen)
    present: dict[str, str] = {}
    across: list[tuple[Target, str, tuple[int, ...]]] = []
    for target in chosen:
        if shape == "wheelhouse":
            files = [(p.name, p) for p in sorted((folder / target.id).glob("*.whl"))]
        else:
            files = _site_files(folder, target.variant, target.project.name)
        found = [(f, p) for f, p in files if matches(f, target)]
        if found:
            present[target.id] = found[-1][0]
            held = majors_of(found[-1][1])
            if held:
                present[target.id] += f" (CUDA {', '.join(map(str, held))})"
                across.append((target, found[-1][0], held))
    for target in chosen:
        for by, file, held in across:
            if target.id not in present and target.cell.cuda_major in held and target.cell.release \
                    and target.cell.cuda_major != by.cell.cuda_major and target.arch == by.arch \
                    and target.os == by.os and target.wheel_tag_prefix == by.wheel_tag_prefix:
                present[target.id] = f"{file} (its CUDA {target.cell.cuda_major} build)"
    missing = tuple(t for t in chosen if t.id not in present)
    return Coverage(folder, shape, present, missing, tuple(chosen))
