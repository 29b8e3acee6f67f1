"""Symbol resolution on real ELF libraries compiled here (tiny stand-ins for c10_cuda and an extension)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ci.audit import symbols, wheel_audit

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

PROVIDER = """
namespace c10 { namespace cuda { int getCurrentCUDAStream(signed char device) { return device + 1; } } }
"""
USER = """
namespace c10 { namespace cuda { int getCurrentCUDAStream(signed char device); } }
int launch() { return c10::cuda::getCurrentCUDAStream(0); }
"""
GONE = """
namespace c10 { namespace cuda { int removedInThisRelease(int); } }
int launch() { return c10::cuda::removedInThisRelease(1); }
"""


def compile_lib(folder: Path, name: str, source: str, *links: str) -> Path:
    src = folder / f"{name}.cpp"
    src.write_text(source)
    out = folder / f"lib{name}.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(src), f"-L{folder}", "-Wl,--no-as-needed", *links],
                   check=True)
    return out


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("elf")
    compile_lib(folder, "c10_cuda", PROVIDER)
    compile_lib(folder, "middle", "int middle() { return 1; }", "-lc10_cuda")
    compile_lib(folder, "user_ok", USER, "-lc10_cuda")
    compile_lib(folder, "user_missing", USER)
    compile_lib(folder, "user_transitive", USER, "-lmiddle")
    compile_lib(folder, "user_gone", GONE, "-lc10_cuda")
    return folder


def search(folder: Path) -> symbols.LibrarySearch:
    return symbols.search_for([], Path("/usr/bin/python3"), None, [folder])


def test_elf_tables_are_read(libs: Path) -> None:
    info = symbols.read_elf(libs / "libuser_ok.so")
    assert "libc10_cuda.so" in info.needed
    assert ("_ZN3c104cuda20getCurrentCUDAStreamEa", False) in info.undefined
    assert "_Z6launchv" in info.defined and not info.has_cuda_code


def test_linked_library_resolves(libs: Path) -> None:
    result = symbols.unresolved(libs / "libuser_ok.so", search(libs))
    assert result.unresolved == () and "libc10_cuda.so" in result.closure


def test_missing_link_is_unresolved_and_the_provider_is_named(libs: Path) -> None:
    # The provider is found by name prefix (libc10*) in the search path, as torch's libraries would be.
    result = symbols.unresolved(libs / "libuser_missing.so", search(libs))
    assert result.unresolved == ("_ZN3c104cuda20getCurrentCUDAStreamEa",)
    assert result.provided_by == {"_ZN3c104cuda20getCurrentCUDAStreamEa": "libc10_cuda.so"}
    check = wheel_audit.check_symbols("pkg/_C.so", result, None)
    assert not check.ok and "defined in libc10_cuda.so, which the library does not link" in check.detail


def test_transitive_resolution_passes_but_the_c10_cuda_rule_fails(libs: Path) -> None:
    result = symbols.unresolved(libs / "libuser_transitive.so", search(libs))
    assert result.unresolved == ()  # the loader finds it through libmiddle's dependency...
    info = symbols.read_elf(libs / "libuser_transitive.so")
    checks = wheel_audit.check_cuda_namespaces("pkg/_C.so", info.needed, [n for n, _ in info.undefined])
    # ...but a library that uses c10::cuda must name libc10_cuda.so itself (Windows would not link at all).
    assert [c.ok for c in checks] == [False]
    assert "libc10_cuda.so is not in NEEDED" in checks[0].detail


def test_symbol_of_another_release_is_defined_nowhere(libs: Path) -> None:
    result = symbols.unresolved(libs / "libuser_gone.so", search(libs))
    assert result.unresolved == ("_ZN3c104cuda20removedInThisReleaseEi",) and result.provided_by == {}
    check = wheel_audit.check_symbols("pkg/_C.so", result, None)
    assert "defined nowhere" in check.detail and "another torch release" in check.detail


def test_missing_needed_library_is_reported(libs: Path, tmp_path: Path) -> None:
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(libs / "libuser_ok.so", lonely)
    result = symbols.unresolved(lonely / "libuser_ok.so", symbols.search_for([], Path("/usr/bin/python3"), None,
                                                                              [lonely]))
    assert result.missing_libraries == ("libc10_cuda.so",)
    assert not wheel_audit.check_symbols("x.so", result, None).ok


def test_not_elf_is_one_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "_C.abi3.so"
    fake.write_text("not a library")
    with pytest.raises(symbols.NotElf, match=r"not an ELF shared library \(_C.abi3.so\)"):
        symbols.read_elf(fake)


def test_exports_are_cached(libs: Path, tmp_path: Path) -> None:
    cached = symbols.search_for([], Path("/usr/bin/python3"), tmp_path / "cache", [libs])
    first = cached.info(libs / "libc10_cuda.so")
    assert len(list((tmp_path / "cache").glob("*.json.gz"))) == 1
    again = symbols.search_for([], Path("/usr/bin/python3"), tmp_path / "cache", [libs]).info(libs / "libc10_cuda.so")
    assert again == first
