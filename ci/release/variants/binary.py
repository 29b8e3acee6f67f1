"""A wheel's variant, read from its binary: the CUDA runtime major its libraries link (ELF ``DT_NEEDED``, or a PE
file's import tables) and the architectures its CUDA code holds (cuobjdump), as the NVIDIA provider's properties
(``ci/release/variants/__init__.py`` says the rules)."""

from __future__ import annotations

import dataclasses
import re
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import UsageError
from ci.release.variants import LOWER_BOUND, NULL, SM_ARCH, Variant

if TYPE_CHECKING:
    from ci.universe.targets import Target

_SASS = re.compile(r"sm_(\d+)")


def sm_values(sass: Iterable[str], ptx: Iterable[str]) -> tuple[str, ...]:
    """The provider's ``sm_arch`` values of a wheel's SASS and PTX (``sm_90`` -> ``90_real`` / ``90_virtual``);
    arch-specific ``sm_90a``/``sm_100f`` have none."""
    found = {f"{m.group(1)}_real" for s in sass if (m := _SASS.fullmatch(s))}
    found |= {f"{m.group(1)}_virtual" for s in ptx if (m := _SASS.fullmatch(s))}
    return tuple(sorted(found, key=lambda v: (v.endswith("_virtual"), int(v.split("_")[0]))))


def runtime_majors(needed: Iterable[str]) -> set[int]:
    """The CUDA runtime majors a set of DT_NEEDED entries links (``libcudart.so.13`` -> 13)."""
    return {int(m.group(1)) for n in needed if (m := re.fullmatch(r"libcudart\.so\.(\d+)", n))}


@dataclasses.dataclass(frozen=True)
class _Code:
    """A CUDA wheel's runtime majors (``runtime``: the file of a major, ``libcudart.so.{}``), SASS and PTX."""

    majors: frozenset[int]
    runtime: str
    sass: tuple[str, ...]
    ptx: tuple[str, ...]


def _elf_code(root: Path, cuobjdump: Path) -> _Code | None:
    from ci.audit import gpu_code, symbols

    libraries = [p for p in sorted(root.rglob("*.so*")) if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    infos = {p: symbols.read_elf(p) for p in libraries}
    cuda_libs = [p for p, info in infos.items() if info.has_cuda_code]
    if not cuda_libs:
        return None
    return _Code(frozenset(runtime_majors(n for info in infos.values() for n in info.needed)), "libcudart.so.{}",
                 *gpu_code.list_archs(cuobjdump, cuda_libs))


def _pe_code(root: Path, cuobjdump: Path) -> _Code | None:
    """A Windows wheel's PE files (``.pyd``/``.dll``): the runtime from both import tables (``cudart64_13.dll``;
    delay-loaded counts too), the architectures from each ``.nv_fatb`` section. cuobjdump (the Linux one the farm
    installs) does not open PE files, but the section holds nvcc's fatbinary containers, which cuobjdump reads as a
    ``.fatbin`` file (without the padding around them, which it refuses): the same tool, and the same names and
    ``a``/``f`` rules, as for ELF libraries."""
    from ci.audit import debug_info, gpu_code
    from windows import dlls, pe

    files = [p for p in sorted(root.rglob("*")) if p.suffix.lower() in (".pyd", ".dll") and p.is_file()
             and p.read_bytes()[:2] == b"MZ"]
    infos = {p: pe.read(p, exports=False) for p in files}
    sections = [fatbin for p, info in infos.items() if info.has_cuda_code for data in pe.fatbin_sections(p)
                if (fatbin := b"".join(debug_info.fatbin_containers(data)))]
    if not sections:
        return None
    dumps = [root.parent / f"section-{i}.fatbin" for i in range(len(sections))]
    for path, data in zip(dumps, sections, strict=True):
        path.write_bytes(data)
    majors = {m for info in infos.values() for dll in info.all_dlls if (m := dlls.cudart_major(dll)) is not None}
    return _Code(frozenset(majors), "cudart64_{}.dll", *gpu_code.list_archs(cuobjdump, dumps))


def variant_of(wheel: Path, target: Target, cuobjdump: Path | None) -> Variant:
    """The wheel's variant, from its libraries (ELF on Linux, PE on Windows): the null variant for a CPU build, else
    the label of its cell and the properties its binary gives (see the module's rules)."""
    if target.cpu:
        return Variant(NULL, {}, "a CPU build: the null variant")
    if cuobjdump is None:
        raise UsageError("the variant's sm_arch is read with cuobjdump, which was not found", wheel.name,
                         "run the release where the farm can install it")
    with tempfile.TemporaryDirectory(prefix="farm-variant-") as tmp:
        root = Path(tmp) / "wheel"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(root)
        code = (_pe_code if target.os == "windows" else _elf_code)(root, cuobjdump)
    if code is None:
        raise UsageError("a CUDA build holds no CUDA code, so it has no variant", wheel.name,
                         "fix the build (the audit says why), or release without --variant-wheels")
    cell = target.cell
    if code.majors != {cell.cuda_major}:
        raise UsageError("the CUDA runtime the wheel links is not its cell's single major", f"{wheel.name}: links "
                         f"{code.runtime.format('*')} {sorted(code.majors) or 'none'}, cell {cell.name}",
                         "a variant's cuda_version_lower_bound comes from the one runtime it links: link the cell's "
                         "CUDA runtime (torch's CUDAExtension does), or release without --variant-wheels")
    values = sm_values(code.sass, code.ptx)
    if not values:
        raise UsageError("the wheel's GPU code has no sm_arch value", f"{wheel.name}: SASS "
                         f"{' '.join(code.sass) or 'none'}, PTX {' '.join(code.ptx) or 'none'}", "build for at least "
                         "one architecture without the a/f suffix (TORCH_CUDA_ARCH_LIST '9.0', not only '9.0a')")
    lower = f"{cell.cuda_major}.{cell.cuda.split('.')[1]}"
    return Variant(f"cuda{cell.cuda}", {LOWER_BOUND: (lower,), SM_ARCH: values},
                   f"links {code.runtime.format(cell.cuda_major)}, cell {cell.name}; SASS {' '.join(code.sass)}; PTX "
                   f"{' '.join(code.ptx) or 'none'}")
