"""A wheel across CUDA majors against the oldest CUDA runtime minor it meets (ci/audit/cuda_majors.py
``check_runtimes``, ci/release/runtimes.py): real ELF files, runtimes with a ``libcudart.so.12`` version node written
by a linker version script as NVIDIA's are (every minor's symbols in one node), a half built against the newer one."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from ci.audit import cuda_majors
from ci.audit.checks import LibraryInfo
from ci.release import majors, runtimes
from ci.universe import matrix
from tests.unit.release.test_majors import build_half, config

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")

#: What CUDA 12.6's libcudart.so.12 has of these, and what 12.8 added (cudaMemcpyBatchAsync: 12.8's batch copies).
OLD = ("__cudaRegisterFatBinary", "cudaLaunchKernel", "cudaGetDriverEntryPointByVersion")
NEW = (*OLD, "cudaMemcpyBatchAsync")


def runtime(tmp: Path, name: str, exported: tuple[str, ...], major: int = 12) -> Path:
    """A ``libcudart.so.<major>`` exporting ``exported`` under the version node ``libcudart.so.<major>``."""
    folder = tmp / name
    folder.mkdir()
    (folder / "r.c").write_text("".join(f"int {s}(void) {{ return 0; }}\n" for s in exported))
    listed = " ".join(f"{s};" for s in exported)
    (folder / "v.map").write_text(f"libcudart.so.{major} {{ global: {listed} local: *; }};\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / f"libcudart.so.{major}"), str(folder / "r.c"),
                    f"-Wl,--version-script={folder / 'v.map'}", f"-Wl,-soname,libcudart.so.{major}"], check=True)
    return folder


def user(tmp: Path, runtime_dir: Path, calls: tuple[str, ...], major: int = 12) -> Path:
    """A library that calls ``calls`` of the runtime in ``runtime_dir`` (linked against it: versioned imports)."""
    source = tmp / f"user-{'-'.join(calls)}.c"
    source.write_text("".join(f"int {s}(void);\n" for s in calls)
                      + f"int use(void) {{ return {' + '.join(f'{s}()' for s in calls)}; }}\n")
    out = tmp / f"_cuda{major}" / f"lib-{'-'.join(calls)}.so"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source), f"-L{runtime_dir}",
                    f"-l:libcudart.so.{major}"], check=True)
    return out


def test_the_imports_are_read_with_their_version_node(tmp_path: Path) -> None:
    new = runtime(tmp_path, "new", NEW)
    lib = user(tmp_path, new, ("cudaMemcpyBatchAsync", "cudaLaunchKernel"))
    assert cuda_majors.runtime_imports(lib) == [("cudaLaunchKernel", "libcudart.so.12"),
                                                ("cudaMemcpyBatchAsync", "libcudart.so.12")]
    exports = cuda_majors.runtime_exports(new / "libcudart.so.12")
    assert ("cudaMemcpyBatchAsync", "libcudart.so.12") in exports and ("cudaMemcpyBatchAsync", None) in exports
    # Linked against an unversioned runtime (the merge tests' stub): every cuda* import, unversioned.
    bare = tmp_path / "bare"
    bare.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(bare / "libcudart.so.12"), "-xc", "-",
                    "-Wl,-soname,libcudart.so.12"], input="int cudaLaunchKernel(void) { return 0; }\n", text=True,
                   check=True)
    assert cuda_majors.runtime_imports(user(tmp_path, bare, ("cudaLaunchKernel",))) == [("cudaLaunchKernel", None)]


def test_the_oldest_minor_is_read_from_pypi_and_pytorchs_index() -> None:
    oldest = cuda_majors.oldest_runtimes(SpecifierSet(">=2.10"))
    assert {major: cuda for major, (cuda, _) in oldest.items()} == {12: "12.6", 13: "13.0"}
    assert oldest[12][1][:2] == ["torch 2.10.0+cu126", "torch 2.11.0+cu126"]
    assert "torch 2.11.0 (PyPI)" in oldest[13][1]
    # A release only PyPI's build is recorded for: its own CUDA version.
    assert {m: c for m, (c, _) in cuda_majors.oldest_runtimes(SpecifierSet("==2.15.*")).items()} == {13: "13.2"}
    assert set(matrix.PYTORCH_INDEX_CUDA) <= {r.minor for r in matrix.TORCH_RELEASES}
    every = {c for r in matrix.TORCH_RELEASES for c in (r.cuda, *matrix.PYTORCH_INDEX_CUDA.get(r.minor, ()))}
    assert every <= set(matrix.CUDA_RUNTIMES)  # every runtime the check can need is pinned


def test_a_half_that_needs_a_newer_minor_is_refused(tmp_path: Path) -> None:
    old, new = runtime(tmp_path, "old", OLD), runtime(tmp_path, "new", NEW)
    fine = user(tmp_path, new, ("cudaLaunchKernel",))
    newer = user(tmp_path, new, ("cudaMemcpyBatchAsync", "cudaLaunchKernel"))
    libs = [LibraryInfo(p.relative_to(tmp_path).as_posix(), (), ()) for p in (fine, newer)]
    oldest = cuda_majors.oldest_runtimes(SpecifierSet(">=2.10"))
    checks = cuda_majors.check_runtimes(tmp_path, libs, oldest, {12: old / "libcudart.so.12"})
    assert [c.ok for c in checks] == [True, False]
    assert checks[0].detail == ("its 1 CUDA runtime symbols resolve in CUDA 12.6's libcudart.so.12 (the oldest the "
                                "torch range admits: torch 2.10.0+cu126, torch 2.11.0+cu126 and 3 more)")
    assert checks[1].name == "cuda-runtime-minor:_cuda12/lib-cudaMemcpyBatchAsync-cudaLaunchKernel.so"
    assert checks[1].detail.startswith("needs cudaMemcpyBatchAsync@libcudart.so.12, which CUDA 12.6's libcudart.so.12 "
                                       "lacks (the runtime of torch 2.10.0+cu126, torch 2.11.0+cu126 and 3 more): the "
                                       "import fails there")
    assert all(c.ok for c in cuda_majors.check_runtimes(tmp_path, libs, oldest, {12: new / "libcudart.so.12"}))


def test_the_release_audit_checks_each_half_of_a_merged_wheel(tmp_path: Path) -> None:
    """``release pypi-wheel`` and ``release assemble`` add these checks to the merged wheel's audit."""
    old, new = runtime(tmp_path, "old", OLD), runtime(tmp_path, "new", NEW)
    old13 = runtime(tmp_path, "old13", OLD, major=13)
    base = build_half(tmp_path, 13, "2_31", runtime=old13, calls="cudaLaunchKernel")
    for calls, ok in (("cudaLaunchKernel", True), ("cudaMemcpyBatchAsync", False)):
        half = build_half(tmp_path, 12, "2_35", runtime=new, calls=calls)
        wheel = majors.merge({12: half, 13: base}, config(tmp_path), tmp_path / f"out-{calls}").wheel
        found = {c.name: c for c in runtimes.runtime_checks(wheel, {12: old / "libcudart.so.12",
                                                                    13: old13 / "libcudart.so.13"})}
        assert set(found) == {"cuda-runtime-minor:pkg/_cuda12/_C_cuda.abi3.so",
                              "cuda-runtime-minor:pkg/_cuda13/_C_cuda.abi3.so"}
        assert found["cuda-runtime-minor:pkg/_cuda12/_C_cuda.abi3.so"].ok is ok, found
        assert found["cuda-runtime-minor:pkg/_cuda13/_C_cuda.abi3.so"].ok
    with zipfile.ZipFile(wheel) as zf:
        assert "pkg/_cuda12/_C_cuda.abi3.so" in zf.namelist()


def test_the_pinned_runtimes_differ_as_recorded(tmp_path: Path) -> None:
    """NVIDIA's own runtimes from their hash-pinned locks: CUDA 12.8's libcudart.so.12 has cudaMemcpyBatchAsync,
    12.6's lacks it; a library linked against 12.8's that calls it is refused against 12.6's."""
    cu126, cu128 = runtimes.runtime_library("12.6"), runtimes.runtime_library("12.8")
    assert ("cudaMemcpyBatchAsync", "libcudart.so.12") in cuda_majors.runtime_exports(cu128)
    assert ("cudaMemcpyBatchAsync", "libcudart.so.12") not in cuda_majors.runtime_exports(cu126)
    assert ("cudaGetDriverEntryPointByVersion", "libcudart.so.12") in cuda_majors.runtime_exports(cu126)
    lib = user(tmp_path, cu128.parent, ("cudaMemcpyBatchAsync", "cudaGetDriverEntryPointByVersion"))
    info = [LibraryInfo(lib.relative_to(tmp_path).as_posix(), (), ())]
    refused = cuda_majors.check_runtimes(tmp_path, info, cuda_majors.oldest_runtimes(SpecifierSet(">=2.10")),
                                         {12: cu126})[0]
    assert not refused.ok and refused.detail.startswith("needs cudaMemcpyBatchAsync@libcudart.so.12, which CUDA 12.6")
