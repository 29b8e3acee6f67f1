"""Build small, real x64 PE files (``.pyd``/``.dll``) on Linux with LLVM's tools, for the PE audit and repair tests.

Each module is assembled from a few lines of x86-64 assembly (``llvm-mc``), linked
(``lld-link``) against import libraries made from ``.def`` files
(``llvm-dlltool``), so its import table (and delay-load table, ``/DELAYLOAD``)
names exactly the DLLs and symbols a test wants. A fatbinary is imitated by a
``.nv_fatb`` section, or is a real one: fatbin files nvcc wrote (``nvcc -fatbin``),
put into ``.nv_fatb`` one after the other, 8-byte aligned, as MSVC links the
sections of several nvcc objects. Nothing here is downloaded; the tools come
from Debian's ``llvm`` and ``lld`` packages (tests skip when they are missing).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import shutil
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

TOOLS = ("llvm-mc", "llvm-dlltool", "lld-link")


def find_tool(name: str) -> str | None:
    """``name`` on PATH, a versioned ``name-NN``, or LLVM's own bin folder."""
    found = shutil.which(name)
    if found:
        return found
    for version in range(25, 13, -1):
        found = shutil.which(f"{name}-{version}")
        if found:
            return found
    candidates = sorted(glob.glob(f"/usr/lib/llvm-*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def missing_tools() -> list[str]:
    return [t for t in TOOLS if find_tool(t) is None]


@dataclasses.dataclass(frozen=True)
class Module:
    """A PE file to build: what it imports (DLL -> symbols), delay-loads, exports, and whether it holds 'CUDA code'
    (True: a stand-in fatbin header; fatbin files: those, in ``.nv_fatb``)."""

    imports: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    delay: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    exports: Sequence[str] = ("PyInit__C",)
    fatbin: bool | tuple[Path, ...] = False


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def _assembly(module: Module) -> str:
    lines = ["    .text"]
    calls = [s for symbols in (*module.imports.values(), *module.delay.values()) for s in symbols]
    for index, name in enumerate(module.exports):
        lines += [f'    .globl "{name}"', f'"{name}":']
        if index == 0:
            lines += [f'    call *"__imp_{s}"(%rip)' for s in calls]
        lines.append("    ret")
    if module.delay:
        # lld-link's delay-load thunks call the helper MSVC's delayimp.lib provides; a stub is enough to link.
        lines += ["    .globl __delayLoadHelper2", "__delayLoadHelper2:", "    ret"]
    if module.fatbin is True:
        lines += ['    .section .nv_fatb,"dr"', "    .long 0xba55ed50", "    .long 0"]
    elif module.fatbin:
        lines += ['    .section .nv_fatb,"dr"']
        lines += [line for path in module.fatbin for line in ("    .p2align 3", f'    .incbin "{path}"')]
    return "\n".join(lines) + "\n"


def import_libraries(modules: Sequence[Module], work: Path) -> dict[str, Path]:
    """One import library per DLL, declaring every symbol any of ``modules`` takes from it."""
    symbols: dict[str, list[str]] = {}
    for module in modules:
        for dll, names in (*module.imports.items(), *module.delay.items()):
            known = symbols.setdefault(dll, [])
            known.extend(n for n in names if n not in known)
    work.mkdir(parents=True, exist_ok=True)
    libs = {}
    for dll, names in symbols.items():
        definition = work / f"{dll}.def"
        definition.write_text(f"LIBRARY {dll}\nEXPORTS\n" + "".join(f"    {n}\n" for n in names))
        libs[dll] = definition.with_suffix(".lib")
        _run([find_tool("llvm-dlltool") or "llvm-dlltool", "-m", "i386:x86-64", "-d", str(definition), "-l",
              str(libs[dll])])
    return libs


def build(module: Module, out: Path, work: Path, libs: dict[str, Path] | None = None) -> Path:
    """Link ``module`` into ``out`` (a .pyd or .dll); ``work`` holds the intermediate files."""
    work.mkdir(parents=True, exist_ok=True)
    libs = libs if libs is not None else import_libraries([module], work / out.stem)
    key = hashlib.sha256(repr(module).encode()).hexdigest()[:10]
    source = work / f"{out.stem}-{key}.s"
    obj = source.with_suffix(".obj")
    source.write_text(_assembly(module))
    _run([find_tool("llvm-mc") or "llvm-mc", "-triple=x86_64-pc-windows-msvc", "-filetype=obj", "-o", str(obj),
          str(source)])
    out.parent.mkdir(parents=True, exist_ok=True)
    used = [str(libs[dll]) for dll in {**module.imports, **module.delay}]
    cmd = [find_tool("lld-link") or "lld-link", "/dll", "/noentry", "/machine:x64", f"/out:{out}", str(obj), *used,
           *(f"/export:{name}" for name in module.exports), *(f"/delayload:{dll}" for dll in module.delay)]
    _run(cmd)
    return out


def build_all(modules: Mapping[str, Module], out_dir: Path, work: Path) -> dict[str, Path]:
    """Every module of ``modules`` (name -> module; names ending in .dll are DLLs, the rest .pyd files)."""
    libs = import_libraries(list(modules.values()), work / "libs")
    return {name: build(module, out_dir / (name if name.endswith(".dll") else f"{name}.pyd"), work, libs)
            for name, module in modules.items()}


def make_wheel(folder: Path, name: str, version: str, tag: str, files: Mapping[str, bytes],
               requires: Sequence[str] = ()) -> Path:
    """A wheel holding ``files`` (archive path -> bytes) with minimal, valid metadata."""
    dist = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: farm-tests\nRoot-Is-Purelib: false\nTag: {tag}\n"
    entries = {**files, f"{dist}/METADATA": metadata.encode(), f"{dist}/WHEEL": wheel_meta.encode()}
    record = "".join(f"{path},,\n" for path in entries) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-{tag}.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in {**entries, f"{dist}/RECORD": record.encode()}.items():
            zf.writestr(member, data)
    return path
