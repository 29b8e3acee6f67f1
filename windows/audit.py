"""Wheel audit (Windows): what each ``.pyd``/``.dll`` imports, whether the user's torch provides it, what it holds.

The checks mirror ``ci/audit/wheel_audit.py``'s and go into the same :class:`ci.audit.wheel_audit.AuditResult`;
a build publishes its wheel only when all pass.

* ``wheel-tag``: ``cpXY-abi3`` for abi3 targets, ``cpXY-cpXY`` for per-Python
  ones; ``win-platform``: ``win_amd64``; ``metadata`` as on Linux;
* ``module-suffix``: ``_C.pyd`` for abi3, ``_C.cp312-win_amd64.pyd`` per Python;
  ``machine:<lib>``: x64 code;
* ``python:<lib>``: an abi3 module imports ``python3.dll`` only, never
  ``python3XY.dll`` (that would tie it to one CPython); a per-Python one the
  target's ``python3XY.dll``;
* ``imports:<lib>``: every DLL in the import and delay-load tables is Windows',
  the VC++ runtime's, CPython's, the user's torch's (its DLLs and the CUDA DLLs
  of the cell's major it ships) or bundled in the wheel;
  ``bundled``: no torch or CUDA DLL was vendored;
* ``cpu-only:<lib>``: the project's ``cpu-libraries`` load under a CPU-only
  torch (no CUDA, ``c10_cuda`` or ``torch_cuda`` import that is resolved at load time);
* ``cuda-code:<lib>``: the project's ``cuda-libraries`` hold a fatbinary (section
  ``.nv_fatb``) and import ``cudart64_<major>.dll``;
* ``c10-cuda:<lib>``: ``c10::cuda`` symbols are imported from ``c10_cuda.dll``
  (a build that forgot ``c10_cuda.lib`` fails to link with LNK2001 or, linked
  against the wrong import library, fails at import); ``torch-cuda:<lib>``:
  ``at::cuda`` symbols come from ``torch_cuda.dll``, imported at load time so it
  stays loaded while the module's kernels run;
* ``exports:<lib>``: with the target's torch at hand, every name imported from a
  torch or CUDA DLL is exported by that DLL (the Windows form of "undefined symbol");
* ``sass``/``ptx``: as on Linux, when a ``cuobjdump`` is given.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ci import wheelmeta
from ci.audit import describe, wheel_size
from ci.audit.checks import AuditResult, Check, LibraryInfo
from ci.audit.gpu_code import (
    cuda_library_globs,
    expects_cpu_only,
    expects_cuda_code,
    no_cuda_code_advice,
    read_gpu_code,
)
from ci.audit.naming import check_metadata, check_wheel_tag, expected_prefix
from ci.universe import matrix
from ci.universe.project import DEFAULT_MAX_WHEEL_SIZE
from ci.universe.targets import Target
from windows import dlls, pe


@dataclasses.dataclass(frozen=True)
class TorchDlls:
    """The DLLs of the user's torch install: lower-case name -> file (torch/lib, nvidia/*/bin)."""

    files: Mapping[str, Path]

    @classmethod
    def scan(cls, site: Path) -> TorchDlls:
        found: dict[str, Path] = {}
        folders = [site / "torch" / "lib", *sorted(site.glob("nvidia/*/bin")), *sorted(site.glob("nvidia/*/bin/*"))]
        for folder in folders:
            if folder.is_dir():
                for dll in sorted(folder.glob("*.dll")):
                    found.setdefault(dll.name.lower(), dll)
        return cls(found)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.files)


def classify(name: str, cuda_major: int | None, torch: TorchDlls | None, bundled: Iterable[str]) -> str | None:
    """Why ``name`` may be imported (``system``, ``vc-runtime``, ``python``, ``torch``, ``cuda``, ``bundled``),
    or None when nothing provides it."""
    low = name.lower()
    if low in {b.lower() for b in bundled}:
        return "bundled"
    if dlls.is_system(low):
        return "system"
    if dlls.is_vc_runtime(low):
        return "vc-runtime"
    if dlls.python_dll(low):
        return "python"
    if dlls.is_cuda(low):
        if cuda_major is None:
            return None
        if low == "nvcuda.dll":
            return "cuda"  # the driver: System32 of every machine with an NVIDIA driver
        if torch is not None:
            return "cuda" if low in torch.names else None
        return "cuda" if dlls.matches_any(low, dlls.cuda_dlls_of_major(cuda_major)) else None
    if torch is not None:
        return "torch" if low in torch.names else None
    return "torch" if dlls.is_torch(low) else None


def check_imports(info: pe.PeInfo, lib: str, cuda_major: int | None, torch: TorchDlls | None,
                  bundled: Sequence[str]) -> Check:
    unexpected = [d for d in info.all_dlls if classify(d, cuda_major, torch, bundled) is None]
    listed = ", ".join(info.dlls) or "nothing"
    delayed = f"; delay-loads {', '.join(info.delay_dlls)}" if info.delay_dlls else ""
    if not unexpected:
        return Check(f"imports:{lib}", True, f"imports {listed}{delayed}")
    notes = []
    for name in unexpected:
        low = name.lower()
        if dlls.is_cuda(low) and cuda_major is None:
            notes.append(f"{name} (a CPU-only build must import no CUDA DLL)")
        elif low.startswith("cudart64_") or (dlls.is_cuda(low) and cuda_major is not None):
            notes.append(f"{name} (not a CUDA {cuda_major} DLL the user's torch ships: build with the cell's "
                         f"toolkit and torch's CUDA major)")
        elif dlls.is_torch(low):
            notes.append(f"{name} (the target's torch has no such DLL)")
        else:
            notes.append(f"{name} (neither Windows, the VC++ runtime, CPython, the user's torch nor this wheel "
                         "provides it: let delvewheel vendor it (--dll-path DIR) or link it statically)")
    return Check(f"imports:{lib}", False, f"imports {listed}{delayed}; unexpected: {'; '.join(notes)}")


def check_bundled(bundled: Sequence[str]) -> Check:
    bad = [b for b in bundled if dlls.is_torch(dlls.unmangled(b)) or dlls.is_cuda(dlls.unmangled(b))]
    return Check("bundled", not bad,
                 f"bundled: {', '.join(bundled) or 'nothing'}"
                 + (f"; torch/CUDA DLLs must come from the user's torch, never the wheel: {', '.join(bad)}"
                    if bad else ""))


def check_python(info: pe.PeInfo, lib: str, target: Target | None) -> Check | None:
    pythons = [p for p in (dlls.python_dll(d) for d in info.all_dlls) if p]
    if not pythons:
        return None
    abi3 = target is None or target.abi3
    want = "python3" if abi3 else "python3" + (target.python.split(".")[1] if target else "")
    bad = [p for p in pythons if p != want]
    if not bad:
        return Check(f"python:{lib}", True, f"imports {want}.dll")
    fix = ("an abi3 module must import python3.dll only: compile every file with Py_LIMITED_API and do not link "
           "torch_python.lib" if abi3 else f"build it with CPython {target.python if target else '?'}")
    return Check(f"python:{lib}", False, f"imports {', '.join(p + '.dll' for p in bad)}; {fix}")


def check_cpu_only(info: pe.PeInfo, lib: str) -> Check:
    cuda = [d for d in info.dlls if dlls.is_cuda(d) or d.lower() in ("c10_cuda.dll", "torch_cuda.dll")]
    return Check(f"cpu-only:{lib}", not cuda,
                 "imports no CUDA DLL at load time (loads under a CPU-only torch)" if not cuda else
                 f"imports {', '.join(cuda)} at load time: it would not load under a CPU-only torch "
                 "(it is listed in [tool.cuda-ext-farm] cpu-libraries)")


def check_cuda_code(info: pe.PeInfo, lib: str, target: Target, globs: Sequence[str] | None = None) -> list[Check]:
    """``globs``: the ``cuda-libraries`` that would pass on this wheel (gpu_code.cuda_library_globs), for the
    advice, as the Linux audit gives it."""
    if not info.has_cuda_code:
        return [Check(f"cuda-code:{lib}", False,
                      no_cuda_code_advice(target.project, target.cell, " (no .nv_fatb section)", globs=globs))]
    runtime = dlls.cudart(target.cell.cuda_major)
    linked = any(d.lower() == runtime for d in info.all_dlls)
    return [
        Check(f"cuda-code:{lib}", True, "holds CUDA code (a .nv_fatb fatbinary)"),
        Check(f"cuda-runtime:{lib}", linked,
              f"imports {runtime} from the user's torch" if linked else
              f"does not import {runtime}: the CUDA runtime of the cell's major must be linked dynamically "
              "(cudart.lib, what torch's CUDAExtension adds; never cudart_static.lib)"),
    ]


def check_cuda_namespaces(info: pe.PeInfo, lib: str) -> list[Check]:
    checks = []
    for pattern, owner, namespace, fix in (
        (pe.C10_CUDA, "c10_cuda.dll", "c10::cuda",
         "link c10_cuda.lib (libraries=[\"c10_cuda\"] in the Extension; torch's CUDAExtension adds it)"),
        (pe.AT_CUDA, "torch_cuda.dll", "at::cuda",
         "link torch_cuda.lib (torch's CUDAExtension adds it) and keep it loaded with "
         "/INCLUDE:?warp_size@cuda@at@@YAHXZ, as torch.utils.cpp_extension.load() does"),
    ):
        used = info.importing(pattern)
        if not used:
            continue
        count = sum(len(v) for v in used.values())
        example = pe.readable(next(iter(used.values()))[0])
        elsewhere = [d for d in used if d.lower() != owner]
        delayed = any(d.lower() == owner for d in info.delay_imports) and owner not in {d.lower() for d in info.imports}
        short = owner.split(".")[0].replace("_", "-")
        if elsewhere:
            checks.append(Check(
                f"{short}:{lib}", False,
                f"uses {namespace} symbols ({example}) imported from {', '.join(elsewhere)}, not {owner}: the "
                f"user's torch defines them in {owner}, so the module fails to load (\"the specified procedure could "
                f"not be found\"); {fix}"))
        elif owner == "torch_cuda.dll" and delayed:
            checks.append(Check(
                f"{short}:{lib}", False,
                f"uses {namespace} symbols ({example}) but delay-loads {owner}: it is loaded only at the first call, "
                f"not kept loaded with the module; {fix}"))
        else:
            checks.append(Check(f"{short}:{lib}", True, f"uses {count} {namespace} symbols and imports {owner}"))
    return checks


class _Exports:
    """Export tables of the user's torch DLLs, read once each (torch_cpu.dll alone exports ~10^5 names)."""

    def __init__(self, torch: TorchDlls) -> None:
        self.torch = torch
        self._cache: dict[str, frozenset[str]] = {}

    def of(self, dll: str) -> frozenset[str] | None:
        path = self.torch.files.get(dll.lower())
        if path is None:
            return None
        if dll.lower() not in self._cache:
            self._cache[dll.lower()] = pe.read_exports(path)
        return self._cache[dll.lower()]

    def provider(self, name: str, candidates: Iterable[str]) -> str | None:
        for dll in candidates:
            exports = self.of(dll)
            if exports is not None and name in exports:
                return dll
        return None


#: Where a misplaced c10/at symbol is looked for (small export tables; torch_cpu.dll is only read when imported).
_PROVIDERS = ("c10.dll", "c10_cuda.dll", "torch_cuda.dll", "torch.dll")


def check_exports(info: pe.PeInfo, lib: str, exports: _Exports, target: Target | None) -> Check:
    missing: list[str] = []
    checked = 0
    for table in (info.imports, info.delay_imports):
        for dll, names in table.items():
            available = exports.of(dll)
            if available is None:
                continue
            checked += 1
            for name in names:
                if not name.startswith("#") and name not in available:
                    other = exports.provider(name, [d for d in _PROVIDERS if d != dll.lower()])
                    where = f", which {other} exports: link {other[:-4]}.lib" if other else ""
                    missing.append(f"{pe.readable(name)} from {dll}{where}")
    if not missing:
        return Check(f"exports:{lib}", True, f"every name imported from {checked} torch/CUDA DLLs is exported by them")
    torch = f"torch {target.torch}" if target else "this torch"
    shown = "; ".join(missing[:5]) + ("; ..." if len(missing) > 5 else "")
    return Check(f"exports:{lib}", False,
                 f"{len(missing)} imported names are not exported by {torch}'s DLLs ({shown}): the module fails to "
                 f"load; build it against {torch}")


def check_tags(wheel: Path, target: Target | None) -> tuple[tuple[str, ...], list[Check]]:
    parsed = wheelmeta.parse_name(wheel)
    windows = list(parsed.platforms) == ["win_amd64"]
    return parsed.tags, [
        check_wheel_tag(parsed.tags, target),  # one rule for Linux and Windows (abi3 floors included)
        Check("win-platform", windows, f"platform {', '.join(parsed.platforms)}"
              + ("" if windows else "; expected win_amd64")),
    ]


def _suffix_check(modules: Sequence[Path], root: Path, target: Target | None, python: str) -> Check:
    abi3 = target is None or target.abi3
    tag = f".cp{python.replace('.', '')}-win_amd64.pyd"
    wrong = []
    for path in modules:
        if path.suffix.lower() != ".pyd":
            continue
        tagged = ".cp" in path.name and path.name.endswith("-win_amd64.pyd")
        if (abi3 and tagged) or (not abi3 and not path.name.endswith(tag)):
            wrong.append(str(path.relative_to(root)))
    pyds = [p for p in modules if p.suffix.lower() == ".pyd"]
    if wrong:
        return Check("module-suffix", False, f"not named for {expected_prefix(target, python)}: {', '.join(wrong)}"
                     + (" (an abi3 module is NAME.pyd)" if abi3 else f" (expected NAME{tag})"))
    if not pyds:
        return Check("module-suffix", False, "no extension module (.pyd) in the wheel")
    return Check("module-suffix", True, f"{len(pyds)} extension modules, {len(modules) - len(pyds)} other DLLs")


def audit_wheel(
    wheel: Path,
    target: Target | None,
    *,
    torch: TorchDlls | None = None,
    cuobjdump: Path | None = None,
    cuda: bool = True,
) -> AuditResult:
    """Audit the Windows wheel ``wheel`` for ``target``; ``torch``: the DLLs of the target's torch, when at hand."""
    tags, checks = check_tags(wheel, target)
    cell = target.cell if (target is not None and cuda) else None
    major = cell.cuda_major if cell else None
    python = target.python if target else matrix.PYTHON_LIMITED_API
    if target is not None:
        checks.append(check_metadata(wheel, target))
    exports = _Exports(torch) if torch is not None else None
    with tempfile.TemporaryDirectory(prefix="farm-win-audit-") as tmp:
        root = Path(tmp)
        with wheelmeta.open_wheel(wheel) as zf:
            zf.extractall(root)
        binaries = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in (".pyd", ".dll"))
        vendored = [p for p in binaries if any(part.endswith(".libs") for part in p.relative_to(root).parts)]
        modules = [p for p in binaries if p not in vendored]
        # Every DLL the wheel carries counts: Python loads an extension with its own folder on the DLL search path.
        bundled = [p.name for p in binaries if p.suffix.lower() == ".dll"]
        checks.append(_suffix_check(modules, root, target, python))
        checks.append(check_bundled(bundled))
        infos = {p: pe.read(p, exports=False) for p in modules}
        libs = tuple(LibraryInfo(str(p.relative_to(root)).replace("\\", "/"), i.all_dlls, (), i.has_cuda_code)
                     for p, i in infos.items())
        cuda_libs: list[Path] = []
        globs = cuda_library_globs([(lib.path, lib.has_cuda_code) for lib in libs], target.project) if target else None
        for (path, info), lib in zip(infos.items(), libs, strict=True):
            name = lib.path
            if info.machine != pe.AMD64:
                checks.append(Check(f"machine:{name}", False, f"machine type 0x{info.machine:04x}, not x64 (0x8664)"))
            checks.append(check_imports(info, name, major, torch, bundled))
            found = check_python(info, name, target)
            if found is not None:
                checks.append(found)
            if expects_cpu_only(name, target.project if target else None, cuda):
                checks.append(check_cpu_only(info, name))
            if target is not None and expects_cuda_code(name, target.project, cuda):
                checks += check_cuda_code(info, name, target, globs)
                if info.has_cuda_code:
                    cuda_libs.append(path)
            checks += check_cuda_namespaces(info, name)
            if exports is not None:
                checks.append(check_exports(info, name, exports, target))
        if exports is None:
            checks.append(Check("exports", True, "not checked: the target's torch was not given"))
        gpu = read_gpu_code(cell, cuda_libs, cuobjdump)
        checks += gpu.checks
        checks += describe.audit_checks(wheel, root, modules + vendored, target, gpu.sass, gpu.ptx,
                                        cuda=cell is not None, archs_read=cell is None or cuobjdump is not None)
        checks.append(wheel_size.check_size(wheel, target.project.max_wheel_size if target else DEFAULT_MAX_WHEEL_SIZE))
    return AuditResult(wheel=wheel, tags=tags, size_bytes=wheel.stat().st_size, libraries=libs, sass=gpu.sass,
                       ptx=gpu.ptx, checks=tuple(checks), arch_bytes=gpu.arch_bytes)
