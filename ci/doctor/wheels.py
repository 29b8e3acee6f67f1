"""What each wheel of an index declares, for ``python -m ci doctor`` (ci/doctor/diagnose.py), read without installing.

An index is a folder in one of three shapes:

* a **wheelhouse** as the farm writes it: ``<target-id>/<wheel>`` (the folder name carries the variant: ``-cu130-``);
* a **PEP 503 site** (ci/release/index.py): ``index.html`` and ``<variant>/<project>/index.html`` pages linking wheels
  (``cu130``, ``cpu``, ``torch2.11-cu130``), also one variant's own root (``<project>/index.html`` below it) and a
  release folder (``index/`` beside ``assets/``); links are read relative to their page, or as ``file:`` URLs;
  a wheel behind an ``http(s)`` link is judged by its name and its index alone;
* a flat folder of ``*.whl`` files.

Per wheel: name, version and tags (file name); ``Requires-Dist: torch`` and ``Requires-Python`` (METADATA);
the farm's ``<dist-info>/cuda-ext-farm.json`` (:data:`FARM_FILE`: CUDA, SASS, PTX, torch floor), every key
optional. Without it the CUDA version comes from the local label (``+pt2.11.cu130``, ``+cu128``, ``+pt2.13.cpu``),
else the index or target folder's name, else it is unknown; SASS and PTX are then unknown.

Standard library plus ``packaging``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import zipfile
from collections.abc import Iterator
from email.parser import HeaderParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, NormalizedName, parse_wheel_filename
from packaging.version import Version

from ci import settings, wheelmeta
from ci.audit import describe
from ci.errors import UsageError
from ci.release import index
from ci.release import variants as release_variants

#: The farm's machine-readable record of a wheel's CUDA build, in its .dist-info folder (written by
#: ci/audit/describe.py).
FARM_FILE = describe.FILE
#: ``pt2.11.cu130``, ``pt2.13.cpu``, ``cu128``, ``cpu``, and the older ``pt211cu130``, at the start of a local version.
LABEL = re.compile(r"^(?:pt(?P<torch>\d+\.\d+)\.|pt(?P<old>\d{3,})(?=cu|cpu))?(?P<variant>cu\d{3,}|cpu)(?:\.|$)")
#: A variant inside an index or target folder name: ``cu130``, ``torch2.11-cu130``, ``my_ext-stable-cu130-cp310…``.
VARIANT = re.compile(r"(?:^|-)(cu\d{3,}|cpu)(?:-|$)")


@dataclasses.dataclass(frozen=True)
class WheelFacts:
    file: str
    #: The file on this machine, or None (a remote link: nothing but the name and index is known).
    path: Path | None
    #: The index (``cu130``), target folder, or None (a flat folder).
    where: str | None
    url: str
    project: NormalizedName
    version: Version
    tags: frozenset[Tag]
    #: ``13.0``; None for a CPU build; :data:`UNKNOWN` when nothing says.
    cuda: str | None
    cuda_from: str
    torch_requirement: SpecifierSet | None
    torch_requirement_from: str
    requires_python: SpecifierSet | None
    #: ``classic`` (bound to one torch release) or ``stable`` (the torch stable ABI).
    abi: str
    #: None: not recorded (no cuda-ext-farm.json).
    sass: tuple[str, ...] | None
    ptx: tuple[str, ...] | None
    #: Why the wheel could not be read, if it could not (then it fits nothing).
    unreadable: str | None = None
    #: A variant wheel's label (``cuda13.0``, ``null``: PEP 825, ci/release/variants/); None for a plain wheel.
    variant_label: str | None = None
    #: A wheel across CUDA majors (``pypi-cuda-majors``): major -> (CUDA version, SASS, PTX) of its build for that
    #: major (cuda-ext-farm.json ``majors``); None for a wheel of one major.
    majors: dict[int, tuple[str, tuple[str, ...], tuple[str, ...]]] | None = None

    def for_major(self, major: int) -> WheelFacts | None:
        """The wheel as a wheel of its build for CUDA ``major`` (None: it has none); itself when of one major."""
        if self.majors is None:
            return self
        if major not in self.majors:
            return None
        cuda, sass, ptx = self.majors[major]
        return dataclasses.replace(self, cuda=cuda, sass=sass, ptx=ptx, majors=None,
                                   cuda_from=f"{FARM_FILE} majors[{major}]")

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "path": str(self.path) if self.path else None, "where": self.where,
                "url": self.url, "project": self.project, "version": str(self.version),
                "tags": sorted(str(t) for t in self.tags), "cuda": self.cuda, "cuda_from": self.cuda_from,
                "torch_requirement": str(self.torch_requirement) if self.torch_requirement is not None else None,
                "requires_python": str(self.requires_python) if self.requires_python is not None else None,
                "abi": self.abi, "sass": self.sass, "ptx": self.ptx, "unreadable": self.unreadable,
                "variant_label": self.variant_label,
                **({"majors": {str(m): {"cuda": c, "sass": list(s), "ptx": list(p)}
                               for m, (c, s, p) in self.majors.items()}} if self.majors else {})}


UNKNOWN = "unknown"


def cuda_of_variant(variant: str) -> str | None:
    """``cu130`` -> ``13.0``, ``cu128`` -> ``12.8``, ``cpu`` -> None."""
    return None if variant == "cpu" else f"{variant[2:-1]}.{variant[-1]}"


@dataclasses.dataclass(frozen=True)
class Listed:
    file: str
    path: Path | None
    where: str | None
    url: str


def _bad_folder(folder: Path) -> UsageError:
    return UsageError("not a wheelhouse (<target-id>/<wheel>), PEP 503 site (<variant>/<project>/index.html) nor "
                      "a folder of wheels", folder, "name the folder build-all or a release wrote, or a folder of .whl "
                      "files")


def list_index(folder: Path) -> tuple[str, list[Listed]]:
    """The shape of ``folder`` and the wheels it holds or links."""
    if not folder.exists():
        raise UsageError("the index folder does not exist", folder, "name a wheelhouse, a PEP 503 site or a folder "
                         "of wheels")
    if not folder.is_dir():
        raise UsageError("the index is not a folder", folder, "name the folder that holds the wheels or index.html")
    site = folder / "index" if (folder / "index" / "index.html").is_file() else folder
    if (site / "index.html").is_file():
        shape, found = "PEP 503 site", list(_site(site))
    elif any(folder.glob("*.whl")):
        shape, found = "folder of wheels", [Listed(p.name, p, None, p.as_uri()) for p in sorted(folder.glob("*.whl"))]
    elif any(p.is_dir() and any(p.glob("*.whl")) for p in folder.iterdir()):
        shape = "wheelhouse"
        found = [Listed(w.name, w, d.name, w.as_uri()) for d in sorted(folder.iterdir()) if d.is_dir()
                 for w in sorted(d.glob("*.whl"))]
    elif not any(folder.iterdir()):
        shape, found = "folder", []
    else:
        raise _bad_folder(folder)
    found = [f for f in found if f.file.endswith(".whl")]
    if not found:
        raise UsageError(f"the {shape} holds no wheels", folder, "name the folder of a build or release that wrote "
                         f"wheels ({settings.entry('build-all')}, {settings.entry('release', 'dry-run')})")
    return shape, found


def _site(site: Path) -> Iterator[Listed]:
    pages = sorted(site.glob("*/*/index.html"))  # <variant>/<project>/index.html
    single = not pages
    if single:  # one variant's own root: <project>/index.html below it
        pages = sorted(site.glob("*/index.html"))
    seen: set[str] = set()
    for page in pages:
        variant = site.name if single else page.parent.parent.name
        try:
            links = index.read_project_page(page)
        except (KeyError, OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"a PEP 503 project page cannot be read ({type(exc).__name__}: {exc})", page,
                             f"write the index again ({settings.entry('release')}), or name a folder of "
                             "wheels") from None
        for link in links:
            parsed = urlparse(link.url)
            if parsed.scheme in ("http", "https"):
                path = None
            elif parsed.scheme == "file":
                path = Path(url2pathname(parsed.path))
            else:
                path = (page.parent / unquote(parsed.path)).resolve()
            key = str(path) if path else link.url
            if key not in seen:
                seen.add(key)
                yield Listed(link.name, path, variant, link.url)


def read(listed: Listed) -> WheelFacts:
    """What ``listed`` declares; a wheel that cannot be read is returned with ``unreadable`` set."""
    base, variant_label = release_variants.split_name(listed.file)
    try:
        name, version, _build, tags = parse_wheel_filename(base)
    except InvalidWheelFilename as exc:
        return _unreadable(listed, f"not a wheel file name ({exc})")
    metadata: dict[str, list[str]] = {}
    farm: dict[str, Any] = {}
    here = listed.path is not None and listed.path.exists()
    if listed.path is not None and here:
        try:
            metadata, farm = _read_wheel(listed.path)
        except UsageError as exc:
            return _unreadable(listed, exc.line().removeprefix("error: "))
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            return _unreadable(listed, f"{type(exc).__name__}: {exc}")
    label = LABEL.match(version.local or "")
    cuda, cuda_from = _cuda(farm, label, listed.where)
    torch_req, torch_from = _torch_requirement(metadata, farm, label)
    requires_python = None
    with contextlib.suppress(InvalidSpecifier):
        if metadata.get("Requires-Python"):
            requires_python = SpecifierSet(metadata["Requires-Python"][0])
    classic = bool(label and (label.group("torch") or label.group("old"))) or any(
        s.operator == "==" and s.version.endswith(".*") for s in (torch_req or SpecifierSet()))
    abi = str(farm.get("abi") or ("classic" if classic else "stable"))
    sass = _archs(farm.get("sass"))
    ptx = _archs(farm.get("ptx"))
    if not here:
        cuda_from += " (the file is not on this machine: judged by its name and index)"
    return WheelFacts(listed.file, listed.path, listed.where, listed.url, name, version, frozenset(tags), cuda,
                      cuda_from, torch_req, torch_from, requires_python, abi, sass, ptx, variant_label=variant_label,
                      majors=_majors(farm))


def _unreadable(listed: Listed, why: str) -> WheelFacts:
    try:
        name, version, _build, tags = parse_wheel_filename(release_variants.split_name(listed.file)[0])
    except InvalidWheelFilename:
        name, version, tags = NormalizedName(listed.file.split("-")[0]), Version("0"), frozenset()
    return WheelFacts(listed.file, listed.path, listed.where, listed.url, name, version, frozenset(tags), UNKNOWN,
                      "nothing", None, "nothing", None, "stable", None, None,
                      unreadable=why)


def _read_wheel(path: Path) -> tuple[dict[str, list[str]], dict[str, Any]]:
    labelled = release_variants.split_name(path.name)[1] is not None  # wheelmeta refuses a variant wheel's name
    with zipfile.ZipFile(path) if labelled else wheelmeta.open_wheel(path) as zf:
        info = wheelmeta.dist_info_dir(zf, path)
        text = zf.read(f"{info}/METADATA").decode("utf-8", errors="replace")
        farm: dict[str, Any] = {}
        if f"{info}/{FARM_FILE}" in zf.namelist():
            try:
                loaded = json.loads(zf.read(f"{info}/{FARM_FILE}"))
            except ValueError:
                loaded = None
            farm = loaded if isinstance(loaded, dict) else {}
    metadata: dict[str, list[str]] = {}
    for key, value in HeaderParser().parsestr(text).items():
        metadata.setdefault(key, []).append(value)
    return metadata, farm


def _cuda(farm: dict[str, Any], label: re.Match[str] | None, where: str | None) -> tuple[str | None, str]:
    if "cuda" in farm and (farm["cuda"] is None or isinstance(farm["cuda"], str)):
        return farm["cuda"], FARM_FILE
    if label:
        return cuda_of_variant(label.group("variant")), f"local version +{label.group(0).rstrip('.')}"
    found = VARIANT.search(where or "")
    if found:
        return cuda_of_variant(found.group(1)), f"index {where}"
    return UNKNOWN, "nothing (no cuda-ext-farm.json, no cuXYZ label or variant)"


def _torch_requirement(metadata: dict[str, list[str]], farm: dict[str, Any],
                       label: re.Match[str] | None) -> tuple[SpecifierSet | None, str]:
    unmarked: list[Requirement] = []
    marked: list[Requirement] = []
    for text in metadata.get("Requires-Dist", []):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower() == "torch" and "extra" not in str(req.marker or ""):
            (marked if req.marker else unmarked).append(req)
    chosen = (unmarked or marked)[:1]
    if chosen:
        return chosen[0].specifier, "Requires-Dist"
    if isinstance(farm.get("torch_requirement"), str):
        with contextlib.suppress(InvalidRequirement):
            return Requirement(farm["torch_requirement"]).specifier, FARM_FILE
    if isinstance(farm.get("torch_floor"), str):
        with contextlib.suppress(InvalidSpecifier):
            return SpecifierSet(f">={farm['torch_floor']}"), f"{FARM_FILE} torch_floor"
    if label and label.group("torch"):
        return SpecifierSet(f"=={label.group('torch')}.*"), "local version"
    if label and label.group("old"):
        old = label.group("old")
        return SpecifierSet(f"=={old[0]}.{old[1:]}.*"), "local version"
    return None, "nothing"


def _majors(farm: dict[str, Any]) -> dict[int, tuple[str, tuple[str, ...], tuple[str, ...]]] | None:
    """``majors`` of cuda-ext-farm.json (a wheel across CUDA majors), entries that say their CUDA version."""
    found = farm.get("majors")
    if not isinstance(found, dict):
        return None
    return {int(m): (str(e["cuda"]), _archs(e.get("sass")) or (), _archs(e.get("ptx")) or ())
            for m, e in found.items() if str(m).isdigit() and isinstance(e, dict) and isinstance(e.get("cuda"), str)}


def _archs(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(str(v) for v in value)
