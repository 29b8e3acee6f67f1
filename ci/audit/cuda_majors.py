"""The audit of a wheel across CUDA majors (``pypi-cuda-majors``, ci/release/majors.py): each major's libraries in
``<folder>/_cuda<MAJOR>/`` link that major's CUDA and nothing of another, and the wheel holds every major its torch
requirement admits on PyPI.

* ``cuda-major:<lib>``: the library links ``libcudart.so.<MAJOR>``, and every CUDA soname it needs is one that
  torch's CUDA ``<MAJOR>`` wheels ship, none only another major's (``libcublas.so.12`` in ``_cuda13/`` fails);
* ``cuda-majors``: the majors found, each CUDA module's loader (``<module>.py`` at the library's original place),
  the PyPI torch releases the ``Requires-Dist`` torch range admits all of a major the wheel holds, and (with
  cuobjdump) each major's SASS/PTX as ``cuda-ext-farm.json``'s ``majors`` entry says;
* ``cuda-runtime-minor:<lib>`` (``check_runtimes``, run by ``release pypi-wheel``, ``release assemble`` and the dry
  run): every CUDA runtime symbol the library imports (``cudaGetDriverEntryPointByVersion@libcudart.so.12``) is
  exported by the ``libcudart.so.<MAJOR>`` of the OLDEST CUDA minor of that major among the torch builds the torch
  range admits, on PyPI and on PyTorch's own index (``matrix.PYTORCH_INDEX_CUDA``: torch 2.10+cu126 beside PyPI's
  cu128). Every minor's symbols share one version node (``libcudart.so.12``), so no version requirement in the
  library says which minor it needs: the check reads the old runtime's exports by name (a symbol it lacks fails the
  import there: Python loads extensions with ``RTLD_NOW``).

ELF read with pyelftools (ci/audit/symbols.py), like the other checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ci.audit.checks import Check, LibraryInfo
from ci.audit.gpu_code import arch_to_sm, list_archs, major_of
from ci.universe import matrix

#: ci/audit/describe.py's coverage file (not imported: describe sits above this module on the import floors).
FILE = "cuda-ext-farm.json"


def _cuda_sonames(needed: Sequence[str]) -> list[str]:
    every = {s for major in (12, 13) for s in matrix.cuda_libraries(major)} - {"libcuda.so.1"}
    return [n for n in needed if n in every or n.startswith("libcudart.so.")]


def check_library(lib: LibraryInfo, major: int) -> Check:
    """``cuda-major:<lib>``: a ``_cuda<major>/`` library links that major's runtime and no other major's CUDA."""
    own = set(matrix.cuda_libraries(major))
    runtime = f"libcudart.so.{major}"
    foreign = [n for n in _cuda_sonames(lib.needed) if n not in own]
    problems = []
    if runtime not in lib.needed:
        problems.append(f"does not link {runtime}")
    if foreign:
        problems.append(f"links {', '.join(foreign)}, not of CUDA {major}")
    cuda = [n for n in _cuda_sonames(lib.needed) if n in own]
    return Check(f"cuda-major:{lib.path}", not problems,
                 f"CUDA {major}: links {', '.join(cuda)}" if not problems else
                 f"in _cuda{major}/ but {'; '.join(problems)}: build it in a CUDA {major} cell")


def majors_admitted(spec: SpecifierSet | None) -> dict[int, list[str]]:
    """The CUDA major of each PyPI torch release the wheel's torch requirement ``spec`` admits (major -> releases;
    None: no requirement, every release)."""
    admitted: dict[int, list[str]] = {}
    for release in matrix.TORCH_RELEASES:
        if spec is None or spec.contains(release.version, prereleases=True):
            admitted.setdefault(release.cuda_major, []).append(release.version)
    return admitted


def check_wheel(root: Path, libs: Sequence[LibraryInfo], spec: SpecifierSet | None, document: bytes | None,
                cuobjdump: Path | None) -> list[Check]:
    """The checks of a wheel across majors (``spec``: its ``Requires-Dist`` torch specifier; ``document``: its
    ``cuda-ext-farm.json``); none for a wheel with no ``_cuda<MAJOR>/`` library."""
    by_major: dict[int, list[LibraryInfo]] = {}
    for lib in libs:
        major = major_of(lib.path)
        if major is not None:
            by_major.setdefault(major, []).append(lib)
    if not by_major:
        return []
    checks = [check_library(lib, major) for major, found in sorted(by_major.items()) for lib in found]
    problems: list[str] = []
    modules = sorted({Path(lib.path).parent.parent.as_posix() + "/" + Path(lib.path).name.split(".")[0]
                      for found in by_major.values() for lib in found})
    for module in modules:
        shim = root / f"{module.lstrip('./')}.py"
        if not shim.is_file():
            problems.append(f"no loader {shim.relative_to(root)} for {module}")
        have = sorted(m for m, found in by_major.items()
                      if any(Path(lib.path).name.split(".")[0] == module.rsplit("/", 1)[-1] for lib in found))
        if have != sorted(by_major):
            problems.append(f"{module} is built for CUDA {', '.join(map(str, have))} only")
    admitted = majors_admitted(spec)
    missing = {m: r for m, r in admitted.items() if m not in by_major}
    if missing:
        problems += [f"torch {', '.join(r)} (CUDA {m}) is admitted by the torch requirement but the wheel has no "
                     f"_cuda{m}/" for m, r in sorted(missing.items())]
    recorded = json.loads(document).get("majors", {}) if document else {}
    if sorted(recorded) != sorted(str(m) for m in by_major):
        problems.append(f"{FILE} records majors {', '.join(sorted(recorded)) or 'none'}")
    elif cuobjdump is not None:
        for major, found in sorted(by_major.items()):
            sass, ptx = list_archs(cuobjdump, [root / lib.path for lib in found])
            want = recorded[str(major)]
            if list(sass) != [arch_to_sm(a) for a in want.get("sass") or []] or \
                    list(ptx) != [arch_to_sm(a) for a in want.get("ptx") or []]:
                problems.append(f"CUDA {major}'s SASS/PTX ({' '.join(sass) or '-'} / {' '.join(ptx) or '-'}) is not "
                                f"what {FILE} says")
    shown = "; ".join(f"CUDA {m}: {recorded.get(str(m), {}).get('cuda') or '?'} "
                      f"(SASS {' '.join(recorded.get(str(m), {}).get('sass') or []) or '-'})"
                      for m in sorted(by_major))
    checks.append(Check("cuda-majors", not problems,
                        f"{len(modules)} module(s) for CUDA {', '.join(map(str, sorted(by_major)))}: {shown}"
                        + (f"; {'; '.join(problems)}" if problems else "")))
    return checks


def torch_builds(spec: SpecifierSet | None) -> dict[str, list[str]]:
    """The CUDA version of every torch build the torch range ``spec`` admits, on PyPI and on PyTorch's own index
    (CUDA version -> the builds: ``torch 2.10.0+cu126``, ``torch 2.10.0 (PyPI)``)."""
    builds: dict[str, list[str]] = {}
    for release in matrix.TORCH_RELEASES:
        if spec is not None and not spec.contains(release.version, prereleases=True):
            continue
        builds.setdefault(release.cuda, []).append(f"torch {release.version} (PyPI)")
        for cuda in matrix.PYTORCH_INDEX_CUDA.get(release.minor, ()):
            if cuda != release.cuda:
                builds.setdefault(cuda, []).append(f"torch {release.version}+cu{cuda.replace('.', '')}")
    return builds


def oldest_runtimes(spec: SpecifierSet | None) -> dict[int, tuple[str, list[str]]]:
    """Each CUDA major's oldest minor among the builds ``spec`` admits, and those builds (major -> (``12.6``,
    [``torch 2.10.0+cu126``, ...]))."""
    oldest: dict[int, tuple[str, list[str]]] = {}
    for cuda, builds in sorted(torch_builds(spec).items(), key=lambda item: Version(item[0])):
        oldest.setdefault(int(cuda.split(".")[0]), (cuda, builds))
    return oldest


def runtime_imports(path: Path) -> list[tuple[str, str | None]]:
    """The non-weak symbols ``path`` imports from the CUDA runtime: (name, version node) of each undefined dynamic
    symbol whose GNU version requirement names a ``libcudart.so.*`` file; a library linked against an unversioned
    runtime names none, so then every undefined ``cuda*``/``__cuda*`` symbol, unversioned."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
    from elftools.elf.sections import SymbolTableSection

    with path.open("rb") as fh:
        elf = ELFFile(fh)
        needs: dict[int, tuple[str | None, str | None]] = {}  # version index -> (version name, file)
        versym = None
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for need, auxiliaries in section.iter_versions():
                    for aux in auxiliaries:
                        needs[aux.entry.vna_other] = (aux.name, need.name)
            elif isinstance(section, GNUVerSymSection):
                versym = section
        dynsym = elf.get_section_by_name(".dynsym")
        symbols = dynsym.iter_symbols() if isinstance(dynsym, SymbolTableSection) else iter(())
        found: list[tuple[str, str | None]] = []
        cudart_versions = any((file or "").startswith("libcudart.so.") for _, file in needs.values())
        for index, sym in enumerate(symbols):
            if sym.entry.st_shndx != "SHN_UNDEF" or not sym.name or sym.entry.st_info.bind == "STB_WEAK":
                continue
            ndx = versym.get_symbol(index).entry.ndx if versym is not None else None
            version, file = needs.get(ndx, (None, None)) if isinstance(ndx, int) else (None, None)
            if file is not None and file.startswith("libcudart.so."):
                found.append((sym.name, version))
            elif not cudart_versions and file is None and sym.name.startswith(("cuda", "__cuda")):
                found.append((sym.name, None))
    return sorted(found)


def runtime_exports(path: Path) -> set[tuple[str, str | None]]:
    """(name, version node) of every symbol the runtime library ``path`` defines, and (name, None) too: an
    unversioned import binds to any version."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerSymSection
    from elftools.elf.sections import SymbolTableSection

    with path.open("rb") as fh:
        elf = ELFFile(fh)
        names: dict[int, str] = {}
        versym = None
        for section in elf.iter_sections():
            if isinstance(section, GNUVerDefSection):
                for definition, auxiliaries in section.iter_versions():
                    names[definition.entry.vd_ndx] = next(iter(auxiliaries)).name
            elif isinstance(section, GNUVerSymSection):
                versym = section
        dynsym = elf.get_section_by_name(".dynsym")
        found: set[tuple[str, str | None]] = set()
        for index, sym in enumerate(dynsym.iter_symbols() if isinstance(dynsym, SymbolTableSection) else ()):
            if sym.entry.st_shndx == "SHN_UNDEF" or not sym.name:
                continue
            ndx = versym.get_symbol(index).entry.ndx if versym is not None else None
            found |= {(sym.name, None), (sym.name, names.get(ndx) if isinstance(ndx, int) else None)}
    return found


def check_runtimes(root: Path, libs: Sequence[LibraryInfo], oldest: Mapping[int, tuple[str, list[str]]],
                   runtimes: Mapping[int, Path]) -> list[Check]:
    """``cuda-runtime-minor:<lib>`` for each ``_cuda<MAJOR>/`` library: its runtime imports resolve against
    ``runtimes[MAJOR]``, the ``libcudart.so.<MAJOR>`` of ``oldest[MAJOR]`` (``oldest_runtimes``)."""
    checks = []
    for lib in libs:
        major = major_of(lib.path)
        if major is None or major not in oldest:
            continue
        cuda, builds = oldest[major]
        imports = runtime_imports(root / lib.path)
        exports = runtime_exports(runtimes[major])
        missing = [f"{name}@{version}" if version else name for name, version in imports
                   if (name, version) not in exports]
        who = ", ".join(builds[:2]) + (f" and {len(builds) - 2} more" if len(builds) > 2 else "")
        checks.append(Check(
            f"cuda-runtime-minor:{lib.path}", not missing,
            f"its {len(imports)} CUDA runtime symbols resolve in CUDA {cuda}'s libcudart.so.{major} (the oldest "
            f"the torch range admits: {who})" if not missing else
            f"needs {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}, which CUDA {cuda}'s "
            f"libcudart.so.{major} lacks (the runtime of {who}): the import fails there; build the CUDA {major} half "
            f"without that API, or with CUDA {cuda}'s toolkit"))
    return checks
