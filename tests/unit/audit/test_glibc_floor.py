"""The glibc floor check (ci/audit/glibc_floor.py): real shared objects built with this machine's compilers.

This machine's glibc and libstdc++ (Debian bookworm: glibc 2.36, gcc 12) are newer than the release's floor
(manylinux_2_28: glibc 2.28, GLIBCXX_3.4.24), so a library that calls ``arc4random`` (GLIBC_2.36) or
``std::to_chars(double)`` (GLIBCXX_3.4.29) is one a release must refuse.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci import errors
from ci.audit import glibc_floor, wheel_audit

NEW_C = "#include <stdlib.h>\nunsigned int fresh(void) { return arc4random(); }\n"
OLD_C = "#include <string.h>\nsize_t old(const char *s) { return strlen(s); }\n"
NEW_CXX = """#include <charconv>
#include <memory>
#include <string>
std::shared_ptr<std::string> fmt(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::make_shared<std::string>(buf, r.ptr);
}
"""


def compile_so(tmp_path: Path, name: str, source: str, compiler: str) -> Path:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    suffix = ".cpp" if "++" in compiler else ".c"
    src = tmp_path / f"{name}{suffix}"
    src.write_text(source)
    out = tmp_path / f"{name}.so"
    flags = ["-std=c++17"] if suffix == ".cpp" else []
    subprocess.run([compiler, *flags, "-shared", "-fPIC", "-O2", str(src), "-o", str(out)], check=True)
    return out


def make_wheel(folder: Path, libs: dict[str, Path], platform: str = "manylinux_2_36_x86_64",
               name: str = "fusedops") -> Path:
    """A minimal wheel: the libraries at their paths, WHEEL, METADATA and RECORD."""
    wheel = folder / f"{name}-0.1.0-cp310-abi3-{platform}.whl"
    info = f"{name}-0.1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        for arcname, path in libs.items():
            zf.write(path, arcname)
        zf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                                     f"Tag: cp310-abi3-{platform}\n")
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
        zf.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("glibc")
    return {
        "new": compile_so(tmp, "new", NEW_C, "gcc"),
        "old": compile_so(tmp, "old", OLD_C, "gcc"),
        "cxx": compile_so(tmp, "cxx", NEW_CXX, "g++"),
    }


def test_a_new_glibc_symbol_fails_the_release_floor_naming_symbol_and_object(
        built: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["new"]})
    check = glibc_floor.check_wheel(wheel, "manylinux_2_28")
    assert check.name == "glibc-floor" and not check.ok
    assert check.detail.startswith("needs GLIBC_2.36 (arc4random in fusedops/_C.abi3.so) above manylinux_2_28's "
                                   "GLIBC_2.28; build on the release's manylinux_2_28 base"), check.detail
    assert "\n" not in check.detail
    (offender,) = glibc_floor.offenders(glibc_floor.read_wheel(wheel), "manylinux_2_28")
    assert (offender.symbol, offender.version, offender.path) == ("arc4random", "GLIBC_2.36", "fusedops/_C.abi3.so")


def test_the_same_wheel_passes_its_own_floor(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["new"]})
    check = glibc_floor.check_wheel(wheel, "manylinux_2_36")
    assert check.ok and check.detail == "newest GLIBC_2.36: within manylinux_2_36", check.detail


def test_old_symbols_pass_the_release_floor(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["old"]}, "manylinux_2_17_x86_64")
    check = glibc_floor.check_wheel(wheel, "manylinux_2_28")
    assert check.ok and check.detail.startswith("newest GLIBC_2.") and check.detail.endswith("within manylinux_2_28")


def test_a_wheel_tagged_above_the_floor_fails_even_with_old_symbols(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["old"]}, "manylinux_2_34_x86_64")
    check = glibc_floor.check_wheel(wheel, "manylinux_2_28")
    assert not check.ok and "tagged manylinux_2_34" in check.detail and "--plat manylinux_2_28" in check.detail


def test_a_new_libstdcxx_symbol_fails_the_release_floor(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["cxx"]})
    check = glibc_floor.check_wheel(wheel, "manylinux_2_28")
    assert not check.ok
    assert check.detail.startswith("needs GLIBCXX_3.4.29 (std::to_chars(char*, char*, double) in fusedops/_C.abi3.so)"
                                   " above manylinux_2_28's GLIBCXX_3.4.24"), check.detail
    assert "libstdc++ provides at most GLIBCXX_3.4.24" in check.detail
    within = glibc_floor.check_wheel(make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["cxx"]},
                                                "manylinux_2_34_x86_64", "cxx"), "manylinux_2_34")
    assert within.ok and "GLIBCXX_3.4.29" in within.detail and "CXXABI_1.3" in within.detail, within.detail


def test_a_bundled_library_is_judged_too(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["old"],
                                  "fusedops.libs/libnew-0a1b2c3d.so.1": built["new"]})
    check = glibc_floor.check_wheel(wheel, "manylinux_2_28")
    assert not check.ok and "(arc4random in fusedops.libs/libnew-0a1b2c3d.so.1)" in check.detail


@pytest.mark.parametrize("value", ["manylinux_2_x", "manylinux_2_29", "musllinux_1_2", "2.28"])
def test_a_bad_floor_is_one_usage_error(value: str) -> None:
    with pytest.raises(errors.UsageError) as info:
        glibc_floor.context_floor(env={glibc_floor.ENV: value})
    line = info.value.line()
    assert line.startswith(f"error: FARM_GLIBC_FLOOR is not a manylinux policy auditwheel knows ({value}): use one of")
    assert "manylinux_2_28" in line and "\n" not in line


def test_the_context_floor_comes_from_the_argument_then_the_environment() -> None:
    assert glibc_floor.context_floor(env={}) is None
    assert glibc_floor.context_floor(env={glibc_floor.ENV: " manylinux_2_28 "}) == "manylinux_2_28"
    assert glibc_floor.context_floor(env={glibc_floor.ENV: "manylinux2014"}) == "manylinux_2_17"
    assert glibc_floor.context_floor("manylinux_2_34", env={glibc_floor.ENV: "manylinux_2_28"}) == "manylinux_2_34"


def test_the_wheel_tag_floor_is_its_lowest_manylinux_tag() -> None:
    assert glibc_floor.wheel_tag_floor("x-1.0-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl") \
        == "manylinux_2_17"
    assert glibc_floor.wheel_tag_floor("x-1.0-cp310-abi3-manylinux_2_34_x86_64.manylinux_2_28_x86_64.whl") \
        == "manylinux_2_28"
    assert glibc_floor.wheel_tag_floor("x-1.0-cp310-abi3-manylinux_2_28_aarch64.whl") == "manylinux_2_28"
    assert glibc_floor.wheel_tag_floor("x-1.0-cp310-abi3-linux_x86_64.whl") is None


# --- through the audit ----------------------------------------------------------------------


def test_audit_wheel_fails_a_wheel_over_the_floor_it_is_given(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["new"]})
    result = wheel_audit.audit_wheel(wheel, None, None, abi3audit=False, glibc_floor="manylinux_2_28")
    by_name = {c.name: c for c in result.checks}
    assert not by_name["glibc-floor"].ok and "arc4random in fusedops/_C.abi3.so" in by_name["glibc-floor"].detail
    with pytest.raises(errors.AuditFailed) as info:
        wheel_audit.raise_for_failures(result)
    assert "glibc-floor: needs GLIBC_2.36 (arc4random" in info.value.details


def test_audit_wheel_reads_the_floor_from_the_environment(built: dict[str, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": built["new"]})
    monkeypatch.delenv(glibc_floor.ENV, raising=False)
    unset = wheel_audit.audit_wheel(wheel, None, None, abi3audit=False)
    assert "glibc-floor" not in {c.name for c in unset.checks}
    monkeypatch.setenv(glibc_floor.ENV, "manylinux_2_28")
    (check,) = [c for c in wheel_audit.audit_wheel(wheel, None, None,
            abi3audit=False).checks if c.name == "glibc-floor"]
    assert not check.ok and "GLIBC_2.36" in check.detail
    ok = wheel_audit.audit_wheel(wheel, None, None, abi3audit=False, glibc_floor="manylinux_2_36")
    assert {c.name: c for c in ok.checks}["glibc-floor"].ok
    monkeypatch.setenv(glibc_floor.ENV, "manylinux_2_x")
    with pytest.raises(errors.UsageError, match=r"FARM_GLIBC_FLOOR is not a manylinux policy"):
        wheel_audit.audit_wheel(wheel, None, None, abi3audit=False)


# --- AArch64 -----------------------------------------------------------------------------------


def test_an_aarch64_library_is_judged_by_the_aarch64_policy(tmp_path: Path) -> None:
    lib = compile_so(tmp_path, "new_arm", NEW_C, "aarch64-linux-gnu-gcc")
    wheel = make_wheel(tmp_path, {"fusedops/_C.abi3.so": lib}, "manylinux_2_36_aarch64")
    (obj,) = glibc_floor.read_wheel(wheel)
    assert obj.arch == "aarch64"
    check = glibc_floor.check_wheel(wheel, "manylinux_2_28")
    assert not check.ok
    assert check.detail.startswith("needs GLIBC_2.36 (arc4random in fusedops/_C.abi3.so) above manylinux_2_28's "
                                   "GLIBC_2.28; build on the release's manylinux_2_28 base "
                                   "(quay.io/pypa/manylinux_2_28_aarch64)"), check.detail
    assert glibc_floor.check_wheel(wheel, "manylinux_2_36").ok
