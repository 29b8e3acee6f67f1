"""One PyPI wheel across CUDA majors (``pypi-cuda-majors = true``): the stable-ABI wheels of one project, built
once per CUDA major that PyPI's torch uses in the project's torch range, merged into one wheel.

PyPI's torch 2.10 is a CUDA 12.8 build and 2.11 and newer are CUDA 13.0 builds; a stable-ABI wheel for
``torch>=2.10`` loads in both, but its CUDA library links one major's runtime (``libcudart.so.13``). The merged
wheel is the newest major's wheel (the *base*) with:

* every ``cuda-libraries`` file of every major at ``<folder>/_cuda<MAJOR>/<file>`` (``myext/_cuda12/
  _C_cuda.abi3.so``, ``myext/_cuda13/_C_cuda.abi3.so``), nothing at its old place;
* a generated module at that place (``myext/_C_cuda.py``, :func:`shim_source`): on import it reads
  ``torch.version.cuda``, loads ``_cuda<MAJOR>/<file>`` as the extension module of its own dotted name (so its
  ``PyInit_`` matches) and puts it in ``sys.modules`` in its own stead; a CPU-only torch, or a major the wheel lacks,
  is one ``ImportError`` line naming the majors it has;
* every other package file of the base; one that differs in another major's wheel (``_build_info.json``) is kept
  per major too, at ``<folder>/_cuda<MAJOR>/<file>`` (its Python sources and CPU libraries may not differ: a
  ``.py`` that does is refused, CPU libraries are the base's, the audit's ``cpu-only`` checks keep them free of CUDA);
* the dist-info's ``cuda-ext-farm.json`` of the base with a ``majors`` entry per major (its target, CUDA version,
  SASS, PTX); the platform tag the highest of the halves' (each half's tag is its own binaries'
  floor).

The archive is written as ``wheelmeta.rewrite`` writes every farm wheel (sorted entries, the base's entry time, RECORD
regenerated): the same halves give the same bytes.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import re
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ci import wheelmeta
from ci.audit import describe
from ci.audit.gpu_code import matches
from ci.errors import UsageError
from ci.release.loader import shim_source
from ci.release.runtimes import runtime_checks

if TYPE_CHECKING:
    from ci.builds.tail import Outputs
    from ci.release.plan import Built
    from ci.universe.project import ProjectConfig
    from ci.universe.targets import Target

#: The folder of one major's CUDA libraries, beside the module's original place.
MAJOR_DIR = "_cuda{major}"


@dataclasses.dataclass(frozen=True)
class Merged:
    wheel: Path
    majors: tuple[int, ...]
    #: (dotted module name, file name) of each CUDA module the shim loads
    modules: tuple[tuple[str, str], ...]
    #: per-major copies of data files that differ between the halves
    per_major: tuple[str, ...]


def pypi_majors(config: ProjectConfig) -> tuple[int, ...]:
    """The CUDA majors of PyPI's torch releases in the project's torch range: ``torch`` / its specifier where the
    table says, else from the oldest torch any of its stable targets builds against up."""
    from packaging.version import Version

    from ci.universe import matrix, targets
    from ci.universe.targets import axes

    if config.torch or config.torch_spec is not None:
        releases = axes.torch_releases(config)
    else:
        oldest = min((Version(t.torch) for t in targets.platform_targets(config, "linux")), default=None)
        releases = [r for r in matrix.TORCH_RELEASES if oldest is None or Version(r.version) >= oldest]
    return tuple(sorted({r.cuda_major for r in releases}))


def major_targets(config: ProjectConfig) -> dict[int, Target]:
    """The target built for each major: its release cell's x86_64 target (aarch64 wheels stay single-major: PyPI's
    torch has no CUDA 12 aarch64 build)."""
    from ci.universe import targets

    if not config.pypi_cuda_majors:
        fix = ("set pypi-cuda-majors = true in [tool.cuda-ext-farm]" if config.abi == "stable" else
               "a classic wheel is bound to one torch release, so to one CUDA major: `release` publishes one per "
               "torch release and variant index")
        raise UsageError(f"{config.name} does not ask for one PyPI wheel across CUDA majors", "pypi-cuda-majors", fix)
    linux = [t for t in targets.platform_targets(config, "linux") if t.arch == "x86_64"]
    chosen: dict[int, Target] = {}
    for major in pypi_majors(config):
        # The abi3 wheel's: a free-threaded target's wheel (cp313t) stays the newest major's alone on PyPI.
        cells = [t for t in linux if t.cell.cuda_major == major and not t.free_threaded]
        pick = [t for t in cells if t.cell.release] or cells
        if not pick:
            raise UsageError(f"no CUDA {major} target of {config.name} (PyPI's torch uses CUDA {major} in its range)",
                             major, "add a CUDA {major} cell to [tool.cuda-ext-farm] cuda, or narrow torch")
        chosen[major] = pick[0]
    return chosen


def _module_of(member: str) -> tuple[str, str, str]:
    """``myext/_C_cuda.abi3.so`` -> (``myext``, ``_C_cuda.abi3.so``, ``myext._C_cuda``)."""
    folder, _, name = member.rpartition("/")
    stem = name.split(".")[0]
    return folder, name, ".".join([*folder.split("/"), stem]) if folder else stem


def _read(wheel: Path) -> tuple[str, dict[str, tuple[bytes, int]]]:
    with wheelmeta.open_wheel(wheel) as zf:
        info = wheelmeta.dist_info_dir(zf, wheel)
        files = {i.filename: (zf.read(i), (i.external_attr >> 16) & 0o777) for i in zf.infolist() if not i.is_dir()}
    return info, files


def _platform_tag(wheels: Sequence[Path]) -> str:
    """The highest platform tag of the halves (``manylinux_2_31_x86_64``): a merged wheel needs every half's floor."""
    best: tuple[tuple[int, int], str] | None = None
    for wheel in wheels:
        platforms = wheelmeta.parse_name(wheel).platforms
        found = [re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", p) for p in platforms]
        if not all(found):
            raise UsageError("a half of the merged wheel has no manylinux platform tag", wheel.name,
                             "merge the repaired (audited) wheels of each major's build")
        for m in found:
            assert m is not None
            key = ((int(m.group(1)), int(m.group(2))), m.group(0))
            best = key if best is None or key[0] > best[0] else best
    assert best is not None
    return best[1]


def _python_tags(halves: Mapping[int, Path]) -> tuple[str, str]:
    """The halves' one interpreter and ABI tag (``cp310``, ``abi3``): a merged wheel installs where every half
    imports, and one tag cannot say two floors (a cp39-abi3 half beside a cp310-abi3 one is refused, naming both)."""
    found = {major: sorted({"-".join(t.split("-")[:2]) for t in wheelmeta.parse_name(wheel).tags})
             for major, wheel in sorted(halves.items())}
    if len({tuple(tags) for tags in found.values()}) != 1 or any(len(tags) != 1 for tags in found.values()):
        listed = " / ".join(f"{'.'.join(tags)} (CUDA {major})" for major, tags in found.items())
        raise UsageError("the wheels to merge have different Python or ABI tags", listed,
                         "build every major's wheel for one Python floor (the same requires-python and "
                         "py_limited_api), as `release pypi-wheel` does from one commit")
    interpreter, abi = next(iter(found.values()))[0].split("-")
    return interpreter, abi


Files = dict[str, tuple[bytes, int]]


def _check_halves(halves: Mapping[int, Path]) -> tuple[str, str]:
    """Refuse halves that are not one project's one version for one Python; their interpreter and ABI tags."""
    if len(halves) < 2:
        raise UsageError("a wheel across CUDA majors needs the wheels of two majors or more",
                         ", ".join(str(m) for m in halves) or "none", "build each major's wheel first")
    names = {wheelmeta.parse_name(w).name for w in halves.values()}
    versions = {wheelmeta.parse_name(w).version.public for w in halves.values()}  # a half's +cu128 label goes
    if len(names) != 1 or len(versions) != 1:
        raise UsageError("the wheels to merge are not one project's one version", ", ".join(
            sorted(w.name for w in halves.values())), "merge the builds of one commit (release pypi-wheel)")
    return _python_tags(halves)


@dataclasses.dataclass
class _Merge:
    """What the merge gathers from the halves: the merged wheel's package entries, the base's CUDA libraries, the
    per-major copies of differing data files and each major's ``cuda-ext-farm.json``."""

    config: ProjectConfig
    base_major: int
    base_info: str
    base: Files
    entries: Files = dataclasses.field(default_factory=dict)
    per_major: set[str] = dataclasses.field(default_factory=set)
    documents: dict[int, dict[str, object]] = dataclasses.field(default_factory=dict)

    def is_cuda(self, member: str, info: str) -> bool:
        return (not member.startswith(info + "/") and ".so" in member.rsplit("/", 1)[-1]
                and matches(member, self.config.cuda_libraries) and not matches(member, self.config.cpu_libraries))

    def package_files(self, info: str, files: Files) -> Files:
        return {n: v for n, v in files.items() if not n.startswith(info + "/") and not self.is_cuda(n, info)}

    def cuda_members(self) -> list[str]:
        found = sorted(n for n in self.base if self.is_cuda(n, self.base_info))
        if not found:
            raise UsageError(f"the CUDA {self.base_major} wheel holds no library matching cuda-libraries", ", ".join(
                self.config.cuda_libraries), "check [tool.cuda-ext-farm] cuda-libraries against the wheel's files")
        return found

    def add_half(self, major: int, info: str, files: Files) -> None:
        """One major's CUDA libraries into ``_cuda<MAJOR>/``; its package files checked against the base's."""
        theirs, cuda_members = sorted(n for n in files if self.is_cuda(n, info)), self.cuda_members()
        if theirs != cuda_members:
            raise UsageError(f"the CUDA {major} and CUDA {self.base_major} wheels hold different CUDA libraries",
                             f"{', '.join(theirs)} / {', '.join(cuda_members)}", "build both from one source tree")
        for member in theirs:
            self.entries[_in_major_dir(member, major)] = files[member]
        own, base = self.package_files(info, files), self.package_files(self.base_info, self.base)
        if set(own) != set(base):
            raise UsageError(f"the CUDA {major} and CUDA {self.base_major} wheels hold different files",
                             sorted(set(own) ^ set(base))[0],
                             "build both from one source tree (release pypi-wheel builds them together)")
        for member, (data, mode) in own.items():
            if data == self.base[member][0] or ".so" in member.rsplit("/", 1)[-1]:
                continue  # CPU libraries: the base major's build
            if member.endswith(".py"):
                raise UsageError(f"a Python file differs between the CUDA {major} and CUDA {self.base_major} "
                                 "wheels", member, "generate no Python source at build time from the CUDA version")
            self.per_major.add(member)
            self.entries[_in_major_dir(member, major)] = (data, mode)
            self.entries[_in_major_dir(member, self.base_major)] = self.base[member]
        doc_name = f"{info}/{describe.FILE}"
        self.documents[major] = json.loads(files[doc_name][0]) if doc_name in files else {}

    def add_loaders(self, majors: Sequence[int]) -> tuple[tuple[str, str], ...]:
        """The generated module in each CUDA library's place (ci/release/loader.py)."""
        modules = []
        for member in self.cuda_members():
            folder, name, module = _module_of(member)
            shim = f"{folder}/{name.split('.')[0]}.py".lstrip("/")
            if shim in self.entries:
                raise UsageError("a CUDA library's module name is taken by a Python file", shim,
                                 "rename one: the merged wheel puts its loader there")
            self.entries[shim] = (shim_source(module, name, majors).encode(), 0o644)
            modules.append((module, name))
        return tuple(modules)

    def add_dist_info(self, wheel_tag: str) -> None:
        """The base's dist-info, its WHEEL file with the merged wheel's tag (RECORD and the farm's file are
        written again)."""
        for member, (data, mode) in self.base.items():
            if member.startswith(self.base_info + "/") and not member.endswith(("/RECORD", f"/{describe.FILE}")):
                if member == f"{self.base_info}/WHEEL":
                    lines = [ln for ln in data.decode().splitlines() if not ln.startswith("Tag:")]
                    data = ("\n".join([*lines[:_last_header(lines)], f"Tag: {wheel_tag}",
                                       *lines[_last_header(lines):]]) + "\n").encode()
                self.entries[member] = (data, mode)


def _in_major_dir(member: str, major: int) -> str:
    folder, name, _ = _module_of(member)
    return f"{folder}/{MAJOR_DIR.format(major=major)}/{name}".lstrip("/")


def merge(halves: Mapping[int, Path], config: ProjectConfig, outdir: Path, *, epoch: int | None = None) -> Merged:
    """Merge the per-major wheels ``halves`` (major -> audited wheel) of ``config`` into one wheel in ``outdir``."""
    interpreter, abi = _check_halves(halves)
    majors = tuple(sorted(halves))
    base_major = majors[-1]
    base_info, base = _read(halves[base_major])
    gathered = _Merge(config, base_major, base_info, base)
    gathered.entries.update(gathered.package_files(base_info, base))
    for major in majors:
        gathered.add_half(major, *((base_info, base) if major == base_major else _read(halves[major])))
    modules = gathered.add_loaders(majors)
    tag = _platform_tag(list(halves.values()))
    gathered.add_dist_info(f"{interpreter}-{abi}-{tag}")
    document = _document(gathered.documents, majors, base_major)
    if epoch is None:  # the base's entry time (its build's SOURCE_DATE_EPOCH): the halves alone decide the bytes
        with zipfile.ZipFile(halves[base_major]) as zf:
            epoch = calendar.timegm((*zf.infolist()[0].date_time, 0, 0, 0))
    parsed = wheelmeta.parse_name(halves[base_major])
    with tempfile.TemporaryDirectory(prefix="farm-majors-") as tmp:
        build = f"-{parsed.build}" if parsed.build else ""
        staged = Path(tmp) / f"{parsed.name}-{parsed.version}{build}-{interpreter}-{abi}-{tag}.whl"
        with zipfile.ZipFile(staged, "w") as zf:
            for member, (data, mode) in gathered.entries.items():
                item = zipfile.ZipInfo(member)
                item.external_attr = (0o100000 | mode) << 16
                zf.writestr(item, data)
        wheel = wheelmeta.rewrite(staged, outdir, epoch=epoch, dist_info_files={describe.FILE: document})
    return Merged(wheel, majors, modules, tuple(sorted(gathered.per_major)))


def _last_header(lines: Sequence[str]) -> int:
    """Where the header block of a WHEEL file ends (its lines before the first blank one)."""
    return next((i for i, ln in enumerate(lines) if not ln.strip()), len(lines))


def _document(documents: Mapping[int, Mapping[str, object]], majors: Sequence[int], base_major: int) -> bytes:
    """The merged ``cuda-ext-farm.json``: the base's (what a reader that knows no ``majors`` sees: the newest
    major's build, as before), and ``majors`` (one entry per major)."""
    doc = dict(documents[base_major])
    doc["majors"] = {str(m): {k: documents[m].get(k) for k in ("target", "cuda", "sass", "ptx")} for m in majors}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def release_wheel(config: ProjectConfig, outputs: Outputs, out: Path, *, reuse: bool,
                  base_image: str | None, max_jobs: int | None, cuobjdump: Path | None) -> tuple[Merged, list[str]]:
    """``release pypi-wheel``: each major's target built (a stand-in cell where the release cell's toolkit is out
    of reach: cu124 for cu128 here), or its audited wheel in ``wheelhouse`` reused; merged into ``out``; audited.
    Returns the merged wheel and one line per half (its target and size)."""
    from ci.audit import wheel_audit
    from ci.linux import buildall
    from ci.log import log
    from ci.release.plan import find_built, reusable, verify_built

    chosen = major_targets(config)
    local = dict(zip(chosen, buildall.local_equivalents(tuple(chosen.values())), strict=True))
    by_id = {t.id: t for t in local.values()}
    ready = reusable(outputs.wheelhouse, by_id, log.progress.print) if reuse else []
    to_build = tuple(t for t in local.values() if t.id not in ready)
    if to_build:
        buildall.build_all(to_build, outputs, jobs=1, base_image=base_image, max_jobs=max_jobs)
    built = {item.target.id: item for item in find_built(outputs.wheelhouse, by_id)}
    for item in built.values():
        verify_built(item)
    halves = {major: built[target.id].wheel for major, target in local.items()}
    merged = merge(halves, config, out)
    result = wheel_audit.audit_wheel(merged.wheel, local[max(local)], cuobjdump)
    result = dataclasses.replace(result, checks=(*result.checks, *runtime_checks(merged.wheel)))
    wheel_audit.raise_for_failures(result)
    lines = [f"CUDA {major}: {local[major].id} ({halves[major].stat().st_size:,} bytes)" for major in sorted(halves)]
    lines.append(f"audit: {len(result.checks)} checks passed")
    return merged, lines


def _halves(config: ProjectConfig, local: bool) -> dict[int, Target]:
    """``major_targets``, or with ``local`` their local equivalents (cu124 for cu128 without NVIDIA's repository),
    as ``release dry-run`` builds them."""
    chosen = major_targets(config)
    if not local:
        return chosen
    from ci.linux import buildall

    return dict(zip(chosen, buildall.local_equivalents(tuple(chosen.values())), strict=True))


def pypi_built(config: ProjectConfig, built: Sequence[Built], outdir: Path, *,
               local: bool = False) -> tuple[list[Built], Merged | None]:
    """``release assemble`` with ``pypi-cuda-majors``: the release cells' x86_64 wheels (``major_targets``: cu128,
    cu130) merged into ``outdir``; the merged wheel takes the newest major's wheel's place in the release (its
    target, variant and index, and PyPI). Without the key: ``built`` unchanged and None. Nothing is built here.
    ``local`` (``release dry-run``): the halves are the local equivalents, and a selection without one of them
    is no error (the merge is then not rehearsed: ``built`` unchanged and None)."""
    from ci.release.plan import Built, pypi_target_ids

    if not config.pypi_cuda_majors:
        return list(built), None
    chosen = _halves(config, local)
    by_id = {item.target.id: item for item in built}
    missing = [t.id for t in chosen.values() if t.id not in by_id]
    if missing and local:
        return list(built), None
    if missing:
        raise UsageError("the one PyPI wheel across CUDA majors needs each major's release wheel",
                         ", ".join(missing), "download every release cell's x86_64 wheel artifact (wheels.yml builds "
                         "them), or set pypi-cuda-majors = false")
    base = chosen[max(chosen)]
    if base.id not in pypi_target_ids(config):
        raise UsageError("the newest CUDA major's wheel is not the one PyPI gets", base.id,
                         "make that major's cell the release cell, or set pypi-cuda-majors = false")
    merged = merge({major: by_id[t.id].wheel for major, t in chosen.items()}, config, outdir)
    report = {"target": base.id, "wheel": merged.wheel.name,
              "merged": {str(major): by_id[t.id].wheel.name for major, t in chosen.items()}}
    return [Built(base, merged.wheel, report) if item.target.id == base.id else item for item in built], merged


def audit_merged(merged: Merged, config: ProjectConfig, cuobjdump: Path | None, halves: Sequence[Built], *,
                 local: bool = False) -> dict[str, str]:
    """The merged wheel's checks for the manifest: every audit check (held to the release's glibc floor, as
    ``plan.audit_again``; with ``local``, the dry run's halves, to the floor its stand-in half has, as each half's
    own audit), and which wheels it was merged from. A failed check raises before anything is written."""
    from ci.audit import glibc_floor, wheel_audit
    from ci.universe import matrix

    chosen = _halves(config, local)
    floor = None if local else glibc_floor.context_floor() or matrix.RELEASE_FLOOR
    result = wheel_audit.audit_wheel(merged.wheel, chosen[max(chosen)], cuobjdump, glibc_floor=floor)
    result = dataclasses.replace(result, checks=(*result.checks, *runtime_checks(merged.wheel)))
    wheel_audit.raise_for_failures(result)
    names = {item.target.id: item.wheel.name for item in halves}
    listed = ", ".join(f"CUDA {major} {names[t.id]}" for major, t in sorted(chosen.items()))
    where = "in the dry run" if local else "in the assemble job"
    return {"audit": f"ok: {len(result.checks)} checks of the wheel across CUDA majors {where}",
            "cuda-majors": f"merged from {listed}"}

