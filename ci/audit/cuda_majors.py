"""The audit of a wheel across CUDA majors (``pypi-cuda-majors``, ci/release/majors.py): each major's libraries in
``<folder>/_cuda<MAJOR>/`` link that major's CUDA and nothing of another, and the wheel holds every major its torch
requirement admits on PyPI.

* ``cuda-major:<lib>``: the library links ``libcudart.so.<MAJOR>``, and every CUDA soname it needs is one that
  torch's CUDA ``<MAJOR>`` wheels ship, none only another major's (``libcublas.so.12`` in ``_cuda13/`` fails);
* ``cuda-majors``: the majors found, each CUDA module's loader (``<module>.py`` at the library's original place),
  the PyPI torch releases the ``Requires-Dist`` torch range admits all of a major the wheel holds, and (with
  cuobjdump) each major's SASS/PTX as ``cuda-ext-farm.json``'s ``majors`` entry says.

ELF read with pyelftools (ci/audit/symbols.py), like the other checks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from packaging.specifiers import SpecifierSet

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
