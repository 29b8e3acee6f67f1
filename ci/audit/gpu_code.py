"""The GPU-code part of the audit, the same on Linux and Windows: which libraries must (or must not) hold CUDA
code, what to do when one holds none, and what the CUDA libraries hold (SASS and PTX per architecture, read
with ``cuobjdump``, checked against the cell's lists, with their bytes per architecture).

``ci/audit/wheel_audit.py`` (ELF) and ``windows/audit.py`` (PE) read their libraries their own way and hand the
CUDA ones here; ``ci/audit/describe.py`` reads the architectures it records through :func:`list_archs` too.
It takes the project and the cell, not a target, so that it sits below ``describe`` on the import floors.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path

from ci.audit.checks import AuditResult, Check
from ci.universe.project import ProjectConfig
from ci.universe.shapes import Cell


def arch_to_sm(arch: str) -> str:
    """``"9.0"`` -> ``"sm_90"``, ``"10.0"`` -> ``"sm_100"``, ``"9.0a"`` -> ``"sm_90a"``."""
    major, minor = arch.split(".")
    return f"sm_{major}{minor}"


#: A library of one CUDA major in a wheel across majors (``myext/_cuda12/_C_cuda.abi3.so``; ci/release/majors.py).
MAJOR_PART = re.compile(r"(^|/)_cuda(\d+)/(?=[^/]+$)")


def major_of(path: str) -> int | None:
    """The CUDA major of a library in a ``_cuda<MAJOR>/`` folder of a wheel across majors; None elsewhere."""
    found = MAJOR_PART.search(path.replace("\\", "/"))
    return int(found.group(2)) if found else None


def matches(path: str, patterns: Sequence[str]) -> bool:
    """Whether a library (its path in the wheel, or its file name) matches one of the project's patterns; a
    library of one major in a wheel across majors is matched at its module's place (without ``_cuda<MAJOR>/``)."""
    path = MAJOR_PART.sub(r"\1", path.replace("\\", "/"))
    name = Path(path).name
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in patterns)


def expects_cpu_only(path: str, project: ProjectConfig | None, cuda: bool) -> bool:
    """A library that must load under a CPU-only torch: every one of a CPU build (or of an audit without a
    target), else those the project lists in ``cpu-libraries``."""
    if project is None or not cuda:
        return True
    return matches(path, project.cpu_libraries)


def expects_cuda_code(path: str, project: ProjectConfig | None, cuda: bool) -> bool:
    """A library of a CUDA build that must hold CUDA code: listed in ``cuda-libraries``, not in ``cpu-libraries``."""
    if project is None or not cuda:
        return False
    return matches(path, project.cuda_libraries) and not matches(path, project.cpu_libraries)


def no_cuda_code_advice(project: ProjectConfig, cell: Cell, found: str = "",
                        globs: Sequence[str] | None = None) -> str:
    """Why a library of a CUDA build holds no CUDA code, and what to do (Linux and Windows audits). The build saw
    torch.cuda.is_available() True unless the project turned ``cuda-available-in-build`` off
    (ci/builds/cuda_available.py): then that is the usual cause; else the build decided on something else.
    ``globs``: the ``cuda-libraries`` that pass on this wheel (:func:`cuda_library_globs`), named first where
    other libraries of the wheel hold CUDA code (a project that pairs ``*_cpu`` and ``*_cuda`` libraries)."""
    keys = ", ".join(f"{k}={v}" for k, v in project.build_env.items()) or "nothing"
    if project.cuda_available_in_build:
        cause = ("The build saw torch.cuda.is_available() True (the farm's cuda-available-in-build), so it decided "
                 "on CUDA by something else: a variable of its own, torch.cuda.device_count() or the GPU's "
                 "capability (0 and none on a builder without a GPU), or CUDA_HOME. Make setup.py read an "
                 f"environment variable and set that in [tool.cuda-ext-farm] build-env (the farm sets {keys}, "
                 "and CUDA_HOME to its toolkit)")
    else:
        cause = ("The usual cause: setup.py decides on CUDA from torch.cuda.is_available(), which is False on a "
                 "builder without a GPU, and [tool.cuda-ext-farm] cuda-available-in-build = false keeps that "
                 "answer: remove that line (the build then sees True), or make setup.py read an environment "
                 f"variable and set that in [tool.cuda-ext-farm] build-env (the farm sets {keys})")
    if globs:
        listed = ", ".join(f'"{g}"' for g in globs)
        return (f"holds no CUDA code{found} although this is a CUDA build ({cell.name}), and other libraries of the "
                f"wheel do. If this one is meant to be CPU-only, set cuda-libraries = [{listed}] in "
                "[tool.cuda-ext-farm]: they match exactly the libraries that hold CUDA code. If it must hold CUDA "
                f"code too: {cause[0].lower()}{cause[1:]}")
    return (f"holds no CUDA code{found} although this is a CUDA build ({cell.name}). {cause}; if this library is "
            "meant to be CPU-only, list the ones that must hold CUDA code in [tool.cuda-ext-farm] cuda-libraries")


def cuda_library_globs(libraries: Sequence[tuple[str, bool]], project: ProjectConfig) -> tuple[str, ...] | None:
    """``cuda-libraries`` globs that make every ``cuda-code`` check of a wheel's ``libraries`` (path, holds CUDA
    code) pass and still check each library that holds CUDA code: the fewest of a shared name part (``*_cuda.*``
    for ``ops_cuda``/``_C_cuda`` beside ``ops_cpu``), else each library's name (``ops.*``), else its path. None:
    no library holds CUDA code (the build's decision is the cause, not the list), or none lacks it."""
    holders = [p for p, code in libraries if code]
    lacking = [p for p, code in libraries if not code and not matches(p, project.cpu_libraries)]
    if not holders or not lacking:
        return None
    for globs in _glob_candidates(holders):
        if all(matches(p, globs) for p in holders) and not any(matches(p, globs) for p in lacking):
            return globs
    return None


def _glob_candidates(holders: Sequence[str]) -> list[tuple[str, ...]]:
    places = [MAJOR_PART.sub(r"\1", p.replace("\\", "/")) for p in holders]
    stems = [Path(p).name.split(".")[0] for p in places]
    parts = [s.strip("_").split("_") for s in stems]
    found: list[tuple[str, ...]] = []
    if all(len(p) > 1 for p in parts) and len({p[-1] for p in parts}) == 1:
        found.append((f"*_{parts[0][-1]}.*",))
    if all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) == 1:
        found.append((f"*{parts[0][0]}_*",))
    found.append(tuple(dict.fromkeys(f"{s}.*" for s in stems)))
    found.append(tuple(dict.fromkeys(f"{p.rsplit('/', 1)[0]}/{s}.*" if "/" in p else f"{s}.*"
                                     for p, s in zip(places, stems, strict=True))))
    found.append(tuple(dict.fromkeys(places)))
    return found


def parse_cuobjdump(list_elf: str, list_ptx: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Architectures from ``cuobjdump --list-elf`` and ``--list-ptx`` output."""
    elf_arch = re.compile(r"\.(sm_\d+[af]?)\.cubin")
    ptx_arch = re.compile(r"\.(sm_\d+[af]?)\.ptx")
    sass = sorted(set(elf_arch.findall(list_elf)), key=_sm_key)
    ptx = sorted(set(ptx_arch.findall(list_ptx)), key=_sm_key)
    return tuple(sass), tuple(ptx)


def _sm_key(sm: str) -> tuple[int, str]:
    # The name breaks ties: sorted() of a set must give one order (sm_90 before sm_90a) whatever the set's.
    return int("".join(ch for ch in sm if ch.isdigit())), sm


def list_archs(cuobjdump: Path, libraries: Sequence[Path]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The SASS and PTX architectures (``sm_90``) of the fatbinaries in ``libraries``."""
    from ci import proc  # here: the doctor reads wheels with packaging alone (no rich, which proc's logger needs)

    elf = [proc.run([cuobjdump, "--list-elf", p], capture=True, check=False).stdout for p in libraries]
    ptx = [proc.run([cuobjdump, "--list-ptx", p], capture=True, check=False).stdout for p in libraries]
    return parse_cuobjdump("\n".join(elf), "\n".join(ptx))


def check_archs(sass: Sequence[str], ptx: Sequence[str], want_sass: Sequence[str], want_ptx: str) -> list[Check]:
    want = [arch_to_sm(a) for a in want_sass]
    missing = [a for a in want if a not in sass]
    extra = [a for a in sass if a not in want]
    sass_check = Check("sass", not missing, f"SASS for {', '.join(sass) or 'nothing'}"
                       + (f"; missing {', '.join(missing)}" if missing else "")
                       + (f"; unexpected {', '.join(extra)}" if extra else ""))
    if not want_ptx:  # torch's own builds carry no PTX, nor do the wheels that follow them
        return [sass_check, Check("ptx", True, f"PTX for {', '.join(ptx) or 'nothing'} (none asked for)")]
    ptx_want = arch_to_sm(want_ptx)
    return [sass_check, Check("ptx", ptx_want in ptx, f"PTX for {', '.join(ptx) or 'nothing'}"
                              + ("" if ptx_want in ptx else f"; missing {ptx_want}"))]


@dataclasses.dataclass(frozen=True)
class GpuCode:
    """What the CUDA libraries of a wheel hold: SASS and PTX architectures, the ``sass``/``ptx`` checks, and the
    bytes of CUDA code per architecture. Empty when nothing was read (a CPU build, no CUDA library, no
    ``cuobjdump``)."""

    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    arch_bytes: tuple[tuple[str, int], ...] = ()


def read_gpu_code(cell: Cell | None, cuda_libs: Sequence[Path], cuobjdump: Path | None) -> GpuCode:
    """Read the CUDA libraries ``cuda_libs`` with ``cuobjdump`` and check them against ``cell`` (None: a CPU
    build, nothing to read)."""
    if cell is None or not cuda_libs or cuobjdump is None:
        return GpuCode()
    from ci.audit import wheel_size

    sass, ptx = list_archs(cuobjdump, cuda_libs)
    return GpuCode(sass=sass, ptx=ptx, checks=tuple(check_archs(sass, ptx, cell.sass_archs, cell.ptx_arch)),
                   arch_bytes=tuple(wheel_size.arch_bytes(cuobjdump, cuda_libs).items()))


#: The checks that judge the architectures a wheel's CUDA code was compiled for.
ARCH_CHECKS = ("sass", "ptx")


def name_arch_flags(result: AuditResult, advice: str) -> tuple[AuditResult, str | None]:
    """``result`` with ``advice`` added to its failed ``sass``/``ptx`` checks, and the fix the audit's error then
    gives (None: no such failure, or nothing to add). ``advice`` says which architecture flags the build's nvcc
    was given instead of those of the cell's list and what to drop (``ci/builds/arch_flags.py`` reads it from the
    build's output: the audit itself never sees the build)."""
    failed = [c for c in result.failures() if c.name in ARCH_CHECKS]
    if not advice or not failed:
        return result, None
    checks = tuple(dataclasses.replace(c, detail=f"{c.detail}; {advice}") if c in failed else c
                   for c in result.checks)
    others = len(result.failures()) - len(failed)
    fix = advice + ("; then fix the other failed checks above" if others else "") + \
        " (a build publishes nothing until every check passes)"
    return dataclasses.replace(result, checks=checks), fix
