"""Wheel audit (Linux): what each library links, whether the loader can resolve it, what GPU code it holds.

The checks it runs, and what each proves, are listed once: ``ci/audit/__init__.py``.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ci import proc, wheelmeta
from ci.audit import cuda_majors, debug_info, describe, gil, symbols, wheel_size
from ci.audit import glibc_floor as floors
from ci.audit.checks import AuditResult, Check, LibraryInfo
from ci.audit.gpu_code import (
    GpuCode,
    cuda_library_globs,
    expects_cpu_only,
    expects_cuda_code,
    major_of,
    no_cuda_code_advice,
    read_gpu_code,
)
from ci.audit.naming import check_metadata, check_tags, expected_prefix
from ci.errors import AuditFailed
from ci.universe import matrix
from ci.universe.project import DEFAULT_MAX_WHEEL_SIZE
from ci.universe.shapes import Cell
from ci.universe.targets import Target

SYSTEM_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "librt.so.1",
        "libpthread.so.0",
        "libstdc++.so.6",
        "libgcc_s.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    }
)

CUDA_PREFIXES = ("libcudart", "libcublas", "libcusparse", "libcusolver", "libcufft", "libcurand", "libnvrtc",
                 "libcuda.", "libnvJitLink", "libcudnn", "libnccl", "libnvToolsExt")
TORCH_PREFIXES = ("libc10", "libtorch", "libshm")


def is_torch_or_cuda(soname: str) -> bool:
    return soname.startswith(TORCH_PREFIXES + CUDA_PREFIXES)


def check_needed(libs: Sequence[LibraryInfo], cuda_major: int | None, bundled: Sequence[str]) -> list[Check]:
    """A library in a ``_cuda<MAJOR>/`` folder (a wheel across CUDA majors) may need that major's CUDA libraries."""
    common = set(SYSTEM_LIBRARIES) | set(matrix.TORCH_LIBRARIES) | set(bundled)
    checks = []
    for lib in libs:
        major = (major_of(lib.path) or cuda_major) if cuda_major is not None else None
        allowed = common | (set(matrix.cuda_libraries(major)) if major is not None else set())
        unexpected = [n for n in lib.needed if n not in allowed]
        hint = ""
        if any(n.startswith(CUDA_PREFIXES) for n in unexpected):
            hint = f" (CUDA libraries must be those of CUDA {major}, which the user's torch ships)" \
                if major else " (a CPU-only build must need no CUDA library)"
        checks.append(Check(
            f"needed:{lib.path}", not unexpected,
            f"NEEDED {', '.join(lib.needed) or 'nothing'}"
            + (f"; unexpected: {', '.join(unexpected)}{hint}" if unexpected else ""),
        ))
    return checks


def check_bundled(bundled: Sequence[str]) -> Check:
    bad = [b for b in bundled if is_torch_or_cuda(b)]
    return Check("bundled", not bad,
                 f"bundled: {', '.join(bundled) or 'nothing'}"
                 + (f"; torch/CUDA libraries must come from the user's torch, never the wheel: {', '.join(bad)}"
                    if bad else ""))


def check_cpu_only(lib: LibraryInfo) -> Check:
    cuda_needed = [n for n in lib.needed if n.startswith(CUDA_PREFIXES) or n in ("libc10_cuda.so",
                                                                                  "libtorch_cuda.so")]
    return Check(f"cpu-only:{lib.path}", not cuda_needed,
                 "needs no CUDA library (loads under a CPU-only torch)" if not cuda_needed else
                 f"needs {', '.join(cuda_needed)}: it would not load under a CPU-only torch "
                 "(it is listed in [tool.cuda-ext-farm] cpu-libraries)")


def check_cuda_code(lib: LibraryInfo, target: Target, globs: Sequence[str] | None = None) -> list[Check]:
    """``globs``: the ``cuda-libraries`` that would pass on this wheel (gpu_code.cuda_library_globs), for the advice."""
    if not lib.has_cuda_code:
        return [Check(
            f"cuda-code:{lib.path}", False, no_cuda_code_advice(target.project, target.cell, globs=globs),
        )]
    runtime = f"libcudart.so.{major_of(lib.path) or target.cell.cuda_major}"
    linked = runtime in lib.needed
    return [
        Check(f"cuda-code:{lib.path}", True, "holds CUDA code (a fatbinary)"),
        Check(f"cuda-runtime:{lib.path}", linked,
              f"links {runtime} from the user's torch" if linked else
              f"missing NEEDED {runtime}: the CUDA runtime of the cell's major must be linked dynamically"),
    ]


def check_cuda_namespaces(path: str, needed: Sequence[str], undefined: Sequence[str]) -> list[Check]:
    checks = []
    for pattern, lib, namespace in ((symbols.C10_CUDA, "libc10_cuda.so", "c10::cuda"),
                                    (symbols.AT_CUDA, "libtorch_cuda.so", "at::cuda")):
        used = [s for s in undefined if pattern.match(s)]
        if not used:
            continue
        ok = lib in needed
        example = symbols.demangle(used[:1])[used[0]]
        checks.append(Check(
            f"{lib.split('.')[0][3:]}:{path}", ok,
            f"uses {len(used)} {namespace} symbols and links {lib}" if ok else
            f"uses {namespace} symbols ({example}) but {lib} is not in NEEDED: link it "
            f"(libraries=[\"{lib[3:-3]}\"] in the Extension; torch's CUDAExtension adds it), or it fails to load "
            "(undefined symbol) wherever torch has not loaded it first",
        ))
    return checks


def check_symbols(path: str, resolution: symbols.Resolution, target: Target | None,
                  torch_label: str | None = None) -> Check:
    """``torch_label``: the torch whose libraries were searched (default: the target's)."""
    if resolution.missing_libraries:
        return Check(f"symbols:{path}", False,
                     "NEEDED libraries not found in the target's environment: "
                     + ", ".join(resolution.missing_libraries))
    if not resolution.unresolved:
        return Check(f"symbols:{path}", True,
                     f"every undefined symbol resolves (scope: {len(resolution.closure)} libraries)")
    readable = symbols.demangle(resolution.unresolved)
    lines = []
    elsewhere = [s for s in resolution.unresolved if s in resolution.provided_by]
    nowhere = [s for s in resolution.unresolved if s not in resolution.provided_by]
    for name in elsewhere[:5]:
        lines.append(f"{readable[name]} is defined in {resolution.provided_by[name]}, which the library does not "
                     "link: add it to the Extension's libraries")
    if nowhere:
        torch = torch_label or (f"torch {target.torch}" if target else "this torch")
        shown = "; ".join(readable[s] for s in nowhere[:5])
        lines.append(f"{len(nowhere)} symbols are defined nowhere in {torch}'s libraries ({shown}"
                     f"{'; ...' if len(nowhere) > 5 else ''}): the library was built against another torch "
                     f"release (or links a library the wheel does not ship); rebuild it against {torch}")
    return Check(f"symbols:{path}", False, f"{len(resolution.unresolved)} unresolved symbols: " + " | ".join(lines))


#: pyelftools' ``e_machine`` names of the architectures the farm builds.
ELF_MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}


def check_machine(files: Sequence[Path], root: Path, arch: str) -> Check:
    """Every library of the wheel is code for the target's architecture (a cross build that fell back to the
    build machine's compiler would otherwise be caught only at import on the target)."""
    from elftools.elf.elffile import ELFFile

    wanted = ELF_MACHINES.get(arch, arch)
    wrong = []
    for path in files:
        with path.open("rb") as fh:
            machine = ELFFile(fh).header["e_machine"]
        if machine != wanted:
            wrong.append(f"{path.relative_to(root)} ({machine})")
    return Check("elf-machine", not wrong, f"{len(files)} libraries are {wanted}" if not wrong
                 else f"not {wanted}: {', '.join(wrong)}; the build used a compiler for another machine")


def check_rpaths(libs: Sequence[LibraryInfo]) -> list[Check]:
    checks = []
    for lib in libs:
        bad = [r for r in lib.rpaths if not r.startswith("$ORIGIN")]
        checks.append(Check(f"rpath:{lib.path}", not bad,
                            "no RPATH/RUNPATH outside $ORIGIN" if not bad else
                            f"build-machine paths in RPATH/RUNPATH: {bad}"))
    return checks


def run_abi3audit(wheel: Path) -> Check:
    result = proc.run([sys.executable, "-m", "abi3audit", "--strict", "--verbose", str(wheel)],
                      capture=True, check=False)
    text = (result.stdout + result.stderr).strip()
    last = text.splitlines()[-1] if text else ""
    return Check("abi3audit", result.returncode == 0, last or f"exit status {result.returncode}")


#: The suffix of a Python extension module named for one CPython (``.cpython-311-x86_64-linux-gnu.so``) or for the
#: stable ABI (``.abi3.so``); a name without either (``_C.so``, what ``no_python_abi_suffix=True`` gives) has none.
PYTHON_SUFFIX = re.compile(r"\.(?:cpython-(?P<version>\d+t?)-(?P<platform>[^.]+)|abi3)\.so$")


def suffix_problem(path: str, target: Target | None, python: str) -> str | None:
    """What is wrong with a library's Python suffix (None: nothing). A suffix matters where an importer finds the
    module by it (``importlib.machinery.EXTENSION_SUFFIXES``): CPython 3.11 finds ``.cpython-311-<platform>.so``,
    ``.abi3.so`` and a bare ``.so``. A library without a suffix is found as ``NAME.so`` by every CPython, and one
    loaded by path (``torch.ops.load_library``) by any name, so only a suffix for another CPython is wrong: in an
    abi3 wheel (or without a target) any one CPython's, in a classic wheel another CPython's or platform's."""
    found = PYTHON_SUFFIX.search(path)
    if found is None or found["version"] is None:
        return None
    one = f"CPython {found['version'][0]}.{found['version'][1:]} ({found['platform']})"
    if target is None or target.abi3:
        return f"{path} is named for {one} alone, while the wheel installs on every CPython from its floor"
    if found["version"] != python.replace(".", "") or not found["platform"].startswith(f"{target.arch}-"):
        return f"{path} is named for {one}, so CPython {python} ({target.arch}) does not import it"
    return None


def check_module_suffix(libs: Sequence[LibraryInfo], target: Target | None, python: str) -> Check:
    """``module-suffix``: the wheel holds extension libraries, and none is named for a CPython it will not be
    imported by (:func:`suffix_problem`)."""
    if not libs:
        return Check("module-suffix", False, "no extension library in the wheel")
    wrong = [found for lib in libs if (found := suffix_problem(lib.path, target, python)) is not None]
    bare = sum(1 for lib in libs if PYTHON_SUFFIX.search(lib.path) is None)
    if not wrong:
        return Check("module-suffix", True, f"{len(libs)} extension libraries"
                     + (f" ({bare} without a Python suffix: imported as NAME.so, or loaded by path)" if bare else ""))
    fix = ("build the extension with py_limited_api=True (setuptools names it .abi3.so), or without a suffix "
           "(BuildExtension.with_options(no_python_abi_suffix=True))" if target is None or target.abi3 else
           f"build it with CPython {python} for {target.arch}, as the target says")
    return Check("module-suffix", False, f"not named for {expected_prefix(target, python)}: {'; '.join(wrong)}: {fix}")


def _symbols_check(path: Path, lib: LibraryInfo, target: Target | None, cell: Cell | None,
                   search: symbols.LibrarySearch | None, resolutions: Mapping[str, symbols.Resolution] | None,
                   local_dirs: Sequence[Path], torch_label: str | None) -> Check | None:
    """``symbols:<lib>`` against the torch searched (``search``) or resolved in the build (``resolutions``); a
    library of another CUDA major than the torch searched is left to its own build; None: nothing to check with."""
    other = major_of(lib.path)
    if (search is not None or resolutions is not None) and cell is not None and other not in (None, cell.cuda_major):
        return Check(f"symbols:{lib.path}", True, f"not checked here: a CUDA {other} library, the torch "
                     f"searched is the target's (CUDA {cell.cuda_major}); its own build checked it")
    if search is not None:
        return check_symbols(lib.path, symbols.unresolved(path, search, local_dirs), target, torch_label)
    if resolutions is not None:
        found = resolutions.get(lib.path)
        return (check_symbols(lib.path, found, target) if found is not None else
                Check(f"symbols:{lib.path}", False, "no symbol resolution was computed for it"))
    return None


def _library_checks(ext_files: Sequence[Path], libs: Sequence[LibraryInfo], undefined: Mapping[Path, list[str]],
                    target: Target | None, cell: Cell | None, cuda: bool, search: symbols.LibrarySearch | None,
                    resolutions: Mapping[str, symbols.Resolution] | None, local_dirs: Sequence[Path],
                    torch_label: str | None) -> tuple[list[Check], list[Path]]:
    """Each extension library's own checks (CPU-only, CUDA code, torch's CUDA namespaces, symbols), and the
    libraries that hold the CUDA code the project asks for."""
    checks: list[Check] = []
    cuda_libs: list[Path] = []
    globs = cuda_library_globs([(lib.path, lib.has_cuda_code) for lib in libs], target.project) if target else None
    for path, lib in zip(ext_files, libs, strict=True):
        if expects_cpu_only(lib.path, target.project if target else None, cuda):
            checks.append(check_cpu_only(lib))
        if target is not None and expects_cuda_code(lib.path, target.project, cuda):
            checks += check_cuda_code(lib, target, globs)
            if lib.has_cuda_code:
                cuda_libs.append(path)
        checks += check_cuda_namespaces(lib.path, lib.needed, undefined[path])
        found = _symbols_check(path, lib, target, cell, search, resolutions, local_dirs, torch_label)
        if found is not None:
            checks.append(found)
    if search is None and resolutions is None:
        checks.append(Check("symbols", True, "not checked: no torch environment given (--torch-env)"))
    return checks, cuda_libs


def _gpu_code_checks(wheel: Path, root: Path, libs: Sequence[LibraryInfo], files: Sequence[Path],
                     cuda_libs: Sequence[Path], target: Target | None, cell: Cell | None,
                     cuobjdump: Path | None) -> tuple[list[Check], GpuCode]:
    """What the wheel's GPU code is and what the wheel says of it: each CUDA major's libraries (a wheel across
    majors), the target's own major's SASS/PTX, and the wheel's description of itself."""
    checks: list[Check] = []
    if cell is not None:
        spec = describe.torch_specifier(wheelmeta.read_metadata(wheel).get("Requires-Dist", []))
        checks += cuda_majors.check_wheel(root, libs, spec, describe.read_document(root), cuobjdump)
    # A wheel across CUDA majors: the target's own major is read here, the others by cuda_majors.check_wheel.
    own = [p for p in cuda_libs if major_of(str(p.relative_to(root))) in (None, cell.cuda_major if cell else None)]
    gpu = read_gpu_code(cell, own, cuobjdump)
    checks += gpu.checks
    checks += describe.audit_checks(wheel, root, files, target, gpu.sass, gpu.ptx, cuda=cell is not None,
                                    archs_read=cell is None or cuobjdump is not None)
    return checks, gpu


def audit_wheel(
    wheel: Path,
    target: Target | None,
    cuobjdump: Path | None,
    *,
    search: symbols.LibrarySearch | None = None,
    resolutions: Mapping[str, symbols.Resolution] | None = None,
    cuda: bool = True,
    abi3audit: bool = True,
    torch_label: str | None = None,
    glibc_floor: str | None = None,
) -> AuditResult:
    """Audit ``wheel`` for ``target``; ``cuda`` False audits it as a CPU-only build; ``torch_label`` names the
    torch ``search`` looks in when it is not the target's (``--torch-env``); ``glibc_floor`` (default:
    ``FARM_GLIBC_FLOOR``, else no ``glibc-floor`` check) the manylinux policy the wheel must stay within."""
    floor = floors.context_floor(glibc_floor)
    tags, checks = check_tags(wheel, target)
    cell = target.cell if (target is not None and cuda) else None
    python = target.python if target else matrix.PYTHON_LIMITED_API
    with tempfile.TemporaryDirectory(prefix="farm-audit-") as tmp:
        root = Path(tmp)
        with wheelmeta.open_wheel(wheel) as zf:
            zf.extractall(root)
        so_files = sorted(p for p in root.rglob("*.so*") if p.is_file() and not p.name.endswith(".py"))
        bundled_files = [p for p in so_files if any(part.endswith(".libs") for part in p.relative_to(root).parts)]
        ext_files = [p for p in so_files if p not in bundled_files]
        bundled = [p.name for p in bundled_files]
        infos = {p: symbols.read_elf(p) for p in ext_files}
        libs = tuple(LibraryInfo(str(p.relative_to(root)), i.needed, i.rpaths, i.has_cuda_code)
                     for p, i in infos.items())
        checks.append(check_module_suffix(libs, target, python))
        if target is not None:
            checks.append(check_metadata(wheel, target))
        checks += check_needed(libs, cell.cuda_major if cell else None, bundled)
        checks.append(check_bundled(bundled))
        undefined = {p: [name for name, _weak in i.undefined] for p, i in infos.items()}
        local_dirs = sorted({p.parent for p in bundled_files})
        found, cuda_libs = _library_checks(ext_files, libs, undefined, target, cell, cuda, search, resolutions,
                                           local_dirs, torch_label)
        checks += found
        checks += check_rpaths(libs)
        if target is not None and target.os == "linux":
            checks.append(check_machine(ext_files + bundled_files, root, target.arch))
        if gil.wanted(target.free_threaded if target is not None else None, tags):
            checks += gil.check_modules(ext_files, root)
        checks += floors.check_unpacked(root, wheel, floor)
        checks.append(debug_info.check_debug_info(ext_files + bundled_files, root, target))
        checks.append(debug_info.check_fatbin(ext_files, root, cell.cuda_major if cell else None))
        found, gpu = _gpu_code_checks(wheel, root, libs, ext_files + bundled_files, cuda_libs, target, cell, cuobjdump)
        checks += found
        checks.append(wheel_size.check_size(wheel, target.project.max_wheel_size if target else DEFAULT_MAX_WHEEL_SIZE))
        if abi3audit and (target is None or target.abi3):
            checks.append(run_abi3audit(wheel))
    return AuditResult(wheel=wheel, tags=tags, size_bytes=wheel.stat().st_size, libraries=libs,
                       sass=gpu.sass, ptx=gpu.ptx, checks=tuple(checks), arch_bytes=gpu.arch_bytes)


def raise_for_failures(result: AuditResult, fix: str | None = None) -> None:
    """The audit's error when a check failed; ``fix``: a more precise fix than the general one."""
    if result.ok:
        return
    failures = result.failures()
    lines = [f"  - {c.name}: {c.detail}" for c in failures]
    raise AuditFailed(
        f"the wheel audit failed {len(failures)} check{'s' if len(failures) != 1 else ''}", result.wheel.name,
        fix or "fix the build as each failed check above says (a build publishes nothing until every check passes)",
        details="wheel audit failures:\n" + "\n".join(lines),
    )
