"""The install lines a release documents, as data, and their check with real pip.

:func:`install_lines` gives, from a release manifest, the commands users type, per index and per situation:

* ``fresh``: a new environment. A stable-ABI project's variant names the torch that has its CUDA major when PyPI's
  newest torch has another one (``pip install <project> "torch==2.10.*" --extra-index-url <site>/cu124``: PyPI's
  torch 2.10 is its CUDA 12.8 build; without the pin pip takes PyPI's newest torch, a CUDA 13 build). A classic
  project's index (one per torch release x variant) holds only builds of one torch, whose wheels pin it.
* ``keep-torch``: torch is installed and stays: the line pins the installed one
  (``"torch==$(python -c 'import torch; print(torch.__version__)')"``), so pip takes the project's build for it
  or fails, and never trades the user's torch for another.

Each line carries its expected outcome: the wheel files it may pick (one per Python and OS) and the torch it gives.
:func:`check_install_lines` runs every line with real pip (``install --dry-run --report``) against the release
folder's indexes (file:// URLs for the site's) with PyPI the only other source: in a new venv with
``--ignore-installed`` and the wheel's own tags (fresh), or in a venv that has a torch installed (keep-torch).

The package: the lines as data here; ``pip_check`` runs them with real pip (PyPI without downloads:
``ci/release/pypi_view.py``).
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from ci import settings
from ci.errors import UsageError
from ci.release.manifest import Manifest, ReleaseFile
from ci.universe import shapes

FRESH = "fresh"
KEEP_TORCH = "keep-torch"
#: What a keep-torch line writes for the installed torch (the shell fills it in).
INSTALLED_TORCH = "torch==$(python -c 'import torch; print(torch.__version__)')"

#: The site the docs show; the check puts the release folder's index/ in its place.
SITE = "https://OWNER.github.io/REPO"


@dataclasses.dataclass(frozen=True)
class InstallLine:
    """One documented ``pip install`` command and what it must give."""

    index: str
    situation: str  # FRESH or KEEP_TORCH
    project: str
    #: The torch requirement the line writes (None: none; KEEP_TORCH lines: :data:`INSTALLED_TORCH`).
    torch: str | None
    #: The release index the line adds (None: PyPI alone, the PyPI variant's wheels).
    index_url: str | None
    #: The files it may pick: the one for the user's Python and OS.
    wheels: tuple[str, ...]
    #: The torch releases the index's wheels serve (``>=2.10`` stable-ABI, ``==2.10.*`` classic).
    serves: str
    #: The CUDA major of the torch it gives (that of PyPI's build of the release).
    cuda_major: int
    #: The torch a fresh line must give (a specifier); keep-torch lines give the installed one.
    expect_torch: str
    summary: str

    @property
    def id(self) -> str:
        return f"{self.index} {self.situation}"

    @property
    def requirements(self) -> tuple[str, ...]:
        return (self.project, *([self.torch] if self.torch else []))

    def command(self) -> str:
        """The line as the docs show it."""
        words = ["pip", "install", *(_quote(r) for r in self.requirements)]
        if self.index_url:
            words += ["--extra-index-url", self.index_url]
        return " ".join(words)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "id": self.id, "command": self.command(), "wheels": list(self.wheels)}


def _quote(word: str) -> str:
    if word == INSTALLED_TORCH:
        return f'"{word}"'
    return shlex.quote(word) if any(c in word for c in "*<>=!; $") else word


def stable_torch(cuda_major: int, floor: str) -> tuple[str | None, str]:
    """The torch requirement a fresh line of a stable-ABI variant writes (None: PyPI's newest torch is of its
    CUDA major), and the torch releases it must then give, from the farm's table of PyPI's torch releases."""
    from ci.universe import matrix

    fits = [r for r in matrix.TORCH_RELEASES
            if r.cuda_major == cuda_major and shapes.version_key(r.version) >= shapes.version_key(floor)]
    if not fits:
        raise UsageError(f"no torch on PyPI is a CUDA {cuda_major} build of torch {shapes.minor_of(floor)} or newer",
                         floor, "such a variant's users get torch from PyTorch's own index; if PyPI has one, a "
                         f"newer farm knows it ({settings.entry('adopt-torch', '--check')} says what PyPI has)")
    newest = max(fits, key=lambda r: shapes.version_key(r.version))
    overall = max(matrix.TORCH_RELEASES, key=lambda r: shapes.version_key(r.version))
    if newest == overall:
        return None, f">={shapes.minor_of(floor)}"
    return f"torch=={newest.minor}.*", f"=={newest.minor}.*"


def _is_classic(item: ReleaseFile) -> bool:
    if item.abi is not None:
        return item.abi == "classic"
    local = item.name.split("-")[1].partition("+")[2]
    return local.startswith("pt")  # a manifest written before the abi was recorded


def install_lines(manifest: Manifest, site_url: str = SITE) -> list[InstallLine]:
    """The documented install commands of a release: per index, a fresh environment and one with torch."""
    from ci.universe import matrix

    lines: list[InstallLine] = []
    for index_name, files in sorted(manifest.variants().items()):
        first = files[0]
        if first.cuda is None or first.torch is None:
            raise UsageError("a wheel of the manifest names no CUDA or torch", first.name,
                             "write the manifest with python -m ci release")
        cuda_major = int(first.cuda.split(".")[0])
        wheels = tuple(sorted(f.name for f in files))
        url = None if all(f.pypi for f in files) else f"{site_url.rstrip('/')}/{index_name}"
        minor = shapes.minor_of(first.torch)
        if _is_classic(first):
            release = matrix.get_torch(minor)
            if release.cuda_major != cuda_major:
                raise UsageError(f"PyPI's torch {minor} is a CUDA {release.cuda_major} build", first.name,
                                 f"a classic build of torch {minor} belongs to a CUDA {release.cuda_major} cell")
            pin, serves, expect = None, f"=={minor}.*", f"=={minor}.*"
            what = f"the torch {minor} build ({first.variant}) with torch {minor} (PyPI: CUDA {release.cuda})"
        else:
            pin, expect = stable_torch(cuda_major, first.torch)
            serves = f">={minor}"
            gives = f"torch {expect.removeprefix('==').removesuffix('.*')}" if pin else "PyPI's newest torch"
            what = f"the {first.variant} build with {gives} (a CUDA {cuda_major} build)"
        lines.append(InstallLine(index_name, FRESH, manifest.project, pin, url, wheels, serves, cuda_major, expect,
                                 f"a new environment: {what}"))
        lines.append(InstallLine(
            index_name, KEEP_TORCH, manifest.project, INSTALLED_TORCH, url, wheels, serves, cuda_major, "",
            f"torch {serves.lstrip('=')} (CUDA {cuda_major}) installed: the {index_name} build; torch stays as it is"))
    return lines
