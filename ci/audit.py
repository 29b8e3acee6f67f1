"""Wheel audit: what a wheel links, where it looks for libraries, what GPU code it holds.

Checks, each reported separately:

* every extension is an ``.abi3.so`` and the wheel is tagged ``cp310-abi3``
  (and abi3audit finds no symbol outside the limited API);
* the platform tag is a manylinux tag computed by auditwheel;
* NEEDED entries are only system libraries, torch's libraries and the CUDA
  runtime of the cell's major; the CPU library needs no CUDA library at all (so
  the wheel imports under a CPU-only torch); the CUDA library needs the CUDA
  runtime and torch's CUDA library (never a bundled copy);
* no RPATH/RUNPATH points at the build machine (only ``$ORIGIN``-relative entries);
* SASS for every listed architecture and PTX for the newest (cuobjdump).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from packaging.utils import parse_wheel_filename

from ci import matrix, proc

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

CUDA_LIBRARY_PREFIXES = ("libcudart", "libc10_cuda", "libtorch_cuda", "libcublas", "libnvrtc", "libcuda.")


class AuditError(RuntimeError):
    """The wheel failed one or more audit checks; the message lists them."""


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class LibraryInfo:
    path: str
    needed: tuple[str, ...]
    rpaths: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class AuditResult:
    wheel: Path
    tags: tuple[str, ...]
    size_bytes: int
    libraries: tuple[LibraryInfo, ...]
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def arch_to_sm(arch: str) -> str:
    """``"9.0"`` -> ``"sm_90"``, ``"10.0"`` -> ``"sm_100"``, ``"9.0a"`` -> ``"sm_90a"``."""
    major, minor = arch.split(".")
    return f"sm_{major}{minor}"


def read_library(path: Path, name: str) -> LibraryInfo:
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        needed: list[str] = []
        rpaths: list[str] = []
        for section in elf.iter_sections():
            if not isinstance(section, DynamicSection):
                continue
            for tag in section.iter_tags():
                # pyelftools sets these attributes dynamically per tag kind.
                kind = tag.entry.d_tag
                if kind == "DT_NEEDED":
                    needed.append(str(getattr(tag, "needed")))  # noqa: B009
                elif kind in ("DT_RPATH", "DT_RUNPATH"):
                    rpaths.extend(str(getattr(tag, kind[3:].lower())).split(":"))
    return LibraryInfo(path=name, needed=tuple(needed), rpaths=tuple(r for r in rpaths if r))


_ELF_ARCH = re.compile(r"\.(sm_\d+[af]?)\.cubin")
_PTX_ARCH = re.compile(r"\.(sm_\d+[af]?)\.ptx")


def parse_cuobjdump(list_elf: str, list_ptx: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Architectures from ``cuobjdump --list-elf`` and ``--list-ptx`` output."""
    sass = sorted(set(_ELF_ARCH.findall(list_elf)), key=_sm_key)
    ptx = sorted(set(_PTX_ARCH.findall(list_ptx)), key=_sm_key)
    return tuple(sass), tuple(ptx)


def _sm_key(sm: str) -> int:
    return int(re.sub(r"\D", "", sm))


def check_needed(
    libs: Sequence[LibraryInfo], cuda_major: int | None, bundled: Iterable[str]
) -> list[Check]:
    allowed = set(SYSTEM_LIBRARIES) | set(matrix.TORCH_LIBRARIES) | set(bundled)
    if cuda_major is not None:
        allowed |= set(matrix.cuda_libraries(cuda_major))
    checks: list[Check] = []
    for lib in libs:
        unexpected = [n for n in lib.needed if n not in allowed]
        checks.append(
            Check(
                f"needed:{lib.path}",
                not unexpected,
                f"NEEDED {', '.join(lib.needed)}"
                + (f"; unexpected: {', '.join(unexpected)}" if unexpected else ""),
            )
        )
        is_cuda_lib = "_C_cuda" in Path(lib.path).name
        cuda_needed = [n for n in lib.needed if n.startswith(CUDA_LIBRARY_PREFIXES)]
        if is_cuda_lib:
            want = set(matrix.cuda_libraries(cuda_major or 0)) | {"libtorch_cuda.so"}
            missing = sorted(want - set(lib.needed))
            checks.append(
                Check(
                    f"cuda-links:{lib.path}",
                    not missing,
                    "links the CUDA runtime and torch's CUDA library from the user's torch"
                    if not missing
                    else f"missing NEEDED {', '.join(missing)}",
                )
            )
        elif cuda_needed:
            checks.append(
                Check(
                    f"cpu-only:{lib.path}",
                    False,
                    f"the CPU library needs {', '.join(cuda_needed)}: it would not load under a CPU-only torch",
                )
            )
    return checks


def check_rpaths(libs: Sequence[LibraryInfo]) -> list[Check]:
    checks = []
    for lib in libs:
        bad = [r for r in lib.rpaths if not r.startswith("$ORIGIN")]
        checks.append(
            Check(
                f"rpath:{lib.path}",
                not bad,
                "no RPATH/RUNPATH outside $ORIGIN" if not bad else f"build-machine paths in RPATH/RUNPATH: {bad}",
            )
        )
    return checks


def check_archs(
    sass: Sequence[str], ptx: Sequence[str], want_sass: Sequence[str], want_ptx: str
) -> list[Check]:
    want = [arch_to_sm(a) for a in want_sass]
    missing = [a for a in want if a not in sass]
    extra = [a for a in sass if a not in want]
    ptx_want = arch_to_sm(want_ptx)
    return [
        Check(
            "sass",
            not missing,
            f"SASS for {', '.join(sass) or 'nothing'}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unexpected {', '.join(extra)}" if extra else ""),
        ),
        Check(
            "ptx",
            ptx_want in ptx,
            f"PTX for {', '.join(ptx) or 'nothing'}" + ("" if ptx_want in ptx else f"; missing {ptx_want}"),
        ),
    ]


def check_tags(wheel: Path) -> tuple[tuple[str, ...], list[Check]]:
    _, _, _, tags = parse_wheel_filename(wheel.name)
    tag_strs = tuple(sorted(str(t) for t in tags))
    abi3 = all(t.interpreter == "cp310" and t.abi == "abi3" for t in tags)
    manylinux = all(t.platform.startswith("manylinux") for t in tags)
    return tag_strs, [
        Check("abi3-tag", abi3, f"tags {', '.join(tag_strs)}" + ("" if abi3 else "; expected cp310-abi3")),
        Check(
            "manylinux",
            manylinux,
            f"platform {', '.join(sorted({t.platform for t in tags}))}"
            + ("" if manylinux else "; not repaired by auditwheel"),
        ),
    ]


def run_abi3audit(wheel: Path) -> Check:
    cmd = [sys.executable, "-m", "abi3audit", "--strict", "--verbose", str(wheel)]
    result = proc.run(cmd, capture=True, check=False)
    text = (result.stdout + result.stderr).strip()
    last = text.splitlines()[-1] if text else ""
    return Check("abi3audit", result.returncode == 0, last or f"exit status {result.returncode}")


def audit_wheel(
    wheel: Path,
    cell: matrix.Cell | None,
    cuobjdump: Path | None,
    *,
    abi3audit: bool = True,
) -> AuditResult:
    """Audit ``wheel``. ``cell`` None means a CPU-only wheel (no GPU code expected)."""
    tags, checks = check_tags(wheel)
    with tempfile.TemporaryDirectory(prefix="farm-audit-") as tmp:
        root = Path(tmp)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(root)
        so_files = sorted(p for p in root.rglob("*.so*") if p.is_file())
        ext_files = [p for p in so_files if p.parent.name == "fusedops" or ".abi3." in p.name]
        bundled = [p.name for p in so_files if p not in ext_files]
        libs = tuple(read_library(p, str(p.relative_to(root))) for p in ext_files)
        not_abi3 = [lib.path for lib in libs if not Path(lib.path).name.endswith(".abi3.so")]
        checks.append(
            Check(
                "abi3-suffix",
                not not_abi3 and bool(libs),
                f"{len(libs)} extension libraries" + (f"; not abi3: {not_abi3}" if not_abi3 else ""),
            )
        )
        cuda_major = cell.cuda_major if cell else None
        checks += check_needed(libs, cuda_major, bundled)
        checks += check_rpaths(libs)
        sass: tuple[str, ...] = ()
        ptx: tuple[str, ...] = ()
        cuda_libs = [p for p in ext_files if "_C_cuda" in p.name]
        if cell is not None:
            if not cuda_libs:
                checks.append(Check("cuda-library", False, "no _C_cuda library in a CUDA wheel"))
            elif cuobjdump is not None:
                elf = proc.run([cuobjdump, "--list-elf", cuda_libs[0]], capture=True, check=False)
                ptx_out = proc.run([cuobjdump, "--list-ptx", cuda_libs[0]], capture=True, check=False)
                sass, ptx = parse_cuobjdump(elf.stdout, ptx_out.stdout)
                checks += check_archs(sass, ptx, cell.sass_archs, cell.ptx_arch)
        if abi3audit:
            checks.append(run_abi3audit(wheel))
    return AuditResult(
        wheel=wheel,
        tags=tags,
        size_bytes=wheel.stat().st_size,
        libraries=libs,
        sass=sass,
        ptx=ptx,
        checks=tuple(checks),
    )


def raise_for_failures(result: AuditResult) -> None:
    if result.ok:
        return
    lines = [f"  - {c.name}: {c.detail}" for c in result.failures()]
    raise AuditError(f"wheel audit failed for {result.wheel.name}:\n" + "\n".join(lines))
