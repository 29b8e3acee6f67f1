"""One PyPI wheel across CUDA majors (ci/release/majors.py, ci/audit/cuda_majors.py): two small real wheels (a CPU
library and a ``_C_cuda`` Python extension module per major, linked against a ``libcudart.so.<MAJOR>`` stub) merged,
audited, and imported through the generated loader with a ``torch`` that says only its CUDA version."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from ci.audit import cuda_majors, describe, symbols, wheel_audit
from ci.audit.checks import Check, LibraryInfo
from ci.errors import UsageError
from ci.release import majors
from ci.universe import project
from ci.universe.project import reading, validation
from ci.universe.tomlvalues import ConfigError

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")

MODULE = r"""
#define Py_LIMITED_API 0x030A0000
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C_cuda", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__C_cuda(void) {
    PyObject *m = PyModule_Create(&def);
    if (m) PyModule_AddIntConstant(m, "MAJOR", MAJOR);
    return m;
}
"""
TABLE = {"abi": "stable", "cpu-libraries": ["pkg/_C.*"], "cuda-libraries": ["pkg/_C_cuda.*"],
         "pypi-cuda-majors": True}


def config(tmp: Path, **table: object) -> project.ProjectConfig:
    return validation.parse({**TABLE, **table}, root=tmp, source=tmp / "pyproject.toml",
                         pyproject={"project": {"name": "pkg"}})


def _gcc(out: Path, *args: str) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), *args], check=True)


def _record(files: dict[str, bytes]) -> bytes:
    rows = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
            for n, d in files.items()]
    return ("\n".join([*rows, "pkg-1.0.dist-info/RECORD,,"]) + "\n").encode()


def build_half(tmp: Path, major: int, glibc: str, *, cudart: int | None = None, py: str = "",
               python_tag: str = "cp310-abi3", runtime: Path | None = None, calls: str = "") -> Path:
    """A wheel of one major: ``pkg/_C.abi3.so`` (no CUDA), ``pkg/_C_cuda.abi3.so`` (an extension module linking
    ``libcudart.so.<cudart>``: the unversioned stub, or the one in ``runtime`` whose function ``calls`` it calls),
    ``pkg/__init__.py``, ``pkg/_build_info.json`` and the dist-info, tagged ``<python_tag>-manylinux_<glibc>``."""
    work = tmp / f"half{major}-{cudart}-{glibc}{'-py' if py else ''}-{python_tag}-{calls}"
    work.mkdir()
    stub = runtime or stub_dir(tmp)
    (work / "m.c").write_text(MODULE + (f"int {calls}(void);\nint call_runtime(void) {{ return {calls}(); }}\n"
                                        if calls else ""))
    (work / "cpu.c").write_text("int cpu(void) { return 1; }\n")
    _gcc(work / "_C_cuda.abi3.so", f"-DMAJOR={major}", f"-I{sysconfig.get_paths()['include']}", str(work / "m.c"),
         f"-L{stub}", "-Wl,--no-as-needed", f"-l:libcudart.so.{cudart or major}")
    _gcc(work / "_C.abi3.so", str(work / "cpu.c"))
    doc = {"abi": "stable", "cuda": f"{major}.0", "format": 1, "ptx": [], "sass": ["8.0", f"{major - 3}.0"],
           "target": f"pkg-stable-cu{major}0-cp310abi3-linux_x86_64", "torch_requirement": "torch>=2.10"}
    tag = f"{python_tag}-manylinux_{glibc}_x86_64"
    files = {
        "pkg/__init__.py": f"# pkg{py}\n".encode(),
        "pkg/_C.abi3.so": (work / "_C.abi3.so").read_bytes(),
        "pkg/_C_cuda.abi3.so": (work / "_C_cuda.abi3.so").read_bytes(),
        "pkg/_build_info.json": json.dumps({"cuda": f"{major}.0"}).encode(),
        "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\nRequires-Dist: torch>=2.10\n",
        "pkg-1.0.dist-info/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
        "pkg-1.0.dist-info/cuda-ext-farm.json": json.dumps(doc).encode(),
    }
    wheel = work / f"pkg-1.0-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in [*files.items(), ("pkg-1.0.dist-info/RECORD", _record(files))]:
            zf.writestr(name, data)
    return wheel


def stub_dir(tmp: Path) -> Path:
    """``libcudart.so.12`` and ``.13`` stubs (empty libraries with those sonames)."""
    stub = tmp / "stubs"
    if not stub.is_dir():
        stub.mkdir()
        (stub / "e.c").write_text("int cudart_stub;\n")
        for major in (12, 13):
            _gcc(stub / f"libcudart.so.{major}", f"-Wl,-soname,libcudart.so.{major}", str(stub / "e.c"))
    return stub


@pytest.fixture
def halves(tmp_path: Path) -> dict[int, Path]:
    return {12: build_half(tmp_path, 12, "2_35"), 13: build_half(tmp_path, 13, "2_31")}


def test_merge_puts_each_majors_library_in_its_folder_and_is_reproducible(tmp_path: Path,
                                                                           halves: dict[int, Path]) -> None:
    merged = majors.merge(halves, config(tmp_path), tmp_path / "a")
    again = majors.merge(halves, config(tmp_path), tmp_path / "b")
    assert merged.wheel.read_bytes() == again.wheel.read_bytes()
    # The higher glibc floor of the two halves (each tag is its own binaries' floor).
    assert merged.wheel.name == "pkg-1.0-cp310-abi3-manylinux_2_35_x86_64.whl"
    assert merged.majors == (12, 13) and merged.modules == (("pkg._C_cuda", "_C_cuda.abi3.so"),)
    assert merged.per_major == ("pkg/_build_info.json",)
    with zipfile.ZipFile(merged.wheel) as zf:
        names = zf.namelist()
        assert "pkg/_C_cuda.abi3.so" not in names
        assert {"pkg/_C_cuda.py", "pkg/_cuda12/_C_cuda.abi3.so", "pkg/_cuda13/_C_cuda.abi3.so",
                "pkg/_cuda12/_build_info.json", "pkg/_cuda13/_build_info.json"} <= set(names)
        assert json.loads(zf.read("pkg/_cuda12/_build_info.json")) == {"cuda": "12.0"}
        assert json.loads(zf.read("pkg/_build_info.json")) == {"cuda": "13.0"}  # the base's, at its place
        assert b"Tag: cp310-abi3-manylinux_2_35_x86_64" in zf.read("pkg-1.0.dist-info/WHEEL")
        doc = json.loads(zf.read("pkg-1.0.dist-info/cuda-ext-farm.json"))
        assert doc["majors"]["12"] == {"cuda": "12.0", "ptx": [], "sass": ["8.0", "9.0"],
                                       "target": "pkg-stable-cu120-cp310abi3-linux_x86_64"}
        assert doc["sass"] == ["8.0", "10.0"] and doc["cuda"] == "13.0"  # the base's, for readers without majors
        record = zf.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
        assert len(record) == len(names) and {r.split(",")[0] for r in record} == set(names)
        with zipfile.ZipFile(halves[13]) as base:  # every entry at the base's time (its SOURCE_DATE_EPOCH)
            assert {i.date_time for i in zf.infolist()} == {base.infolist()[0].date_time}


def _import(tmp: Path, wheel: Path, cuda: str | None, *, hip: str | None = None, xpu: str | None = None,
            mps: bool = False) -> subprocess.CompletedProcess[str]:
    """``import pkg._C_cuda`` from the unpacked wheel, with a ``torch`` whose ``version.cuda`` is ``cuda`` (and
    ``version.hip``, ``version.xpu``, ``backends.mps.is_built()`` as given: a ROCm, XPU or MPS build)."""
    site = tmp / f"site-{cuda}-{hip}-{xpu}-{mps}"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        f"__version__ = '2.x'\nclass version:\n    cuda = {cuda!r}\n    hip = {hip!r}\n    xpu = {xpu!r}\n"
        f"class backends:\n    class mps:\n        is_built = staticmethod(lambda: {mps!r})\n")
    code = "import pkg._C_cuda as m, sys; print(m.MAJOR, m.__file__, sys.modules['pkg._C_cuda'] is m)"
    return subprocess.run([sys.executable, "-c", code], cwd=site, capture_output=True, text=True,
                          env={**os.environ, "LD_LIBRARY_PATH": str(stub_dir(tmp)), "PYTHONPATH": str(site)})


def test_the_generated_module_loads_the_build_of_torchs_cuda_major(tmp_path: Path, halves: dict[int, Path]) -> None:
    wheel = majors.merge(halves, config(tmp_path), tmp_path / "out").wheel
    for cuda, major in (("12.8", 12), ("13.0", 13)):
        result = _import(tmp_path, wheel, cuda)
        assert result.returncode == 0, result.stderr
        found, path, replaced = result.stdout.split()
        assert (int(found), replaced) == (major, "True") and path.endswith(f"pkg/_cuda{major}/_C_cuda.abi3.so")
    cpu = _import(tmp_path, wheel, None)
    assert cpu.returncode != 0
    assert cpu.stderr.strip().splitlines()[-1] == ("ImportError: pkg._C_cuda holds CUDA code (built for CUDA 12, 13) "
                                                   "and torch 2.x is a CPU-only build")
    rocm = _import(tmp_path, wheel, None, hip="6.4.43484")
    assert rocm.stderr.strip().splitlines()[-1] == ("ImportError: pkg._C_cuda holds CUDA code (built for CUDA 12, 13) "
                                                    "and torch 2.x is a ROCm build (HIP 6.4.43484), not a CUDA one")
    xpu = _import(tmp_path, wheel, None, xpu="20250101")
    assert xpu.stderr.strip().splitlines()[-1].endswith(
        "torch 2.x is an Intel XPU build (SYCL 20250101), not a CUDA one")
    mps = _import(tmp_path, wheel, None, mps=True)
    assert mps.stderr.strip().splitlines()[-1].endswith("torch 2.x is an Apple MPS build, not a CUDA one")
    other = _import(tmp_path, wheel, "11.8")
    assert other.stderr.strip().splitlines()[-1] == ("ImportError: pkg._C_cuda has builds for CUDA 12, 13; torch 2.x "
                                                     "uses CUDA 11.8: install a torch of one of those CUDA majors")


def _check(root: Path, libs: list[LibraryInfo]) -> list[Check]:
    return cuda_majors.check_wheel(root, libs, SpecifierSet(">=2.10"), describe.read_document(root), None)


def _libs(root: Path) -> list[LibraryInfo]:
    found = sorted(root.rglob("*.so"))
    return [LibraryInfo(str(p.relative_to(root)), symbols.read_elf(p).needed, ()) for p in found]


def test_the_audit_passes_the_merge_and_fails_a_library_of_the_wrong_major(tmp_path: Path,
                                                                             halves: dict[int, Path]) -> None:
    good = majors.merge(halves, config(tmp_path), tmp_path / "good").wheel
    with zipfile.ZipFile(good) as zf:
        zf.extractall(tmp_path / "g")
    libs = _libs(tmp_path / "g")
    found = _check(tmp_path / "g", libs)
    assert [c.name for c in found] == ["cuda-major:pkg/_cuda12/_C_cuda.abi3.so",
                                       "cuda-major:pkg/_cuda13/_C_cuda.abi3.so", "cuda-majors"]
    assert all(c.ok for c in found), found
    assert found[0].detail == "CUDA 12: links libcudart.so.12"
    assert all(c.ok for c in wheel_audit.check_needed(libs, 13, ()))
    # The CUDA 13 build in the CUDA 12 folder: its runtime is the wrong major.
    swapped = build_half(tmp_path, 12, "2_35", cudart=13)
    bad = majors.merge({12: swapped, 13: halves[13]}, config(tmp_path), tmp_path / "bad").wheel
    with zipfile.ZipFile(bad) as zf:
        zf.extractall(tmp_path / "b")
    wrong = _check(tmp_path / "b", _libs(tmp_path / "b"))[0]
    assert not wrong.ok and wrong.detail == ("in _cuda12/ but does not link libcudart.so.12; links libcudart.so.13, "
                                             "not of CUDA 12: build it in a CUDA 12 cell")
    needed = {c.name: c for c in wheel_audit.check_needed(_libs(tmp_path / "b"), 13, ())}
    assert not needed["needed:pkg/_cuda12/_C_cuda.abi3.so"].ok
    # A torch requirement that admits a major the wheel lacks (torch 2.10 is PyPI's CUDA 12.8 build).
    only13 = [lib for lib in libs if "_cuda12" not in lib.path]
    (tmp_path / "g" / "pkg" / "_cuda12" / "_C_cuda.abi3.so").unlink()
    lacking = _check(tmp_path / "g", only13)[-1]
    assert not lacking.ok and "torch 2.10.0 (CUDA 12) is admitted by the torch requirement but the wheel has no " \
        "_cuda12/" in lacking.detail


def test_a_single_major_wheel_gets_no_cuda_majors_check(tmp_path: Path, halves: dict[int, Path]) -> None:
    with zipfile.ZipFile(halves[13]) as zf:
        zf.extractall(tmp_path / "one")
    assert _check(tmp_path / "one", _libs(tmp_path / "one")) == []


def test_the_merge_refuses_halves_that_are_not_one_source(tmp_path: Path, halves: dict[int, Path]) -> None:
    with pytest.raises(UsageError, match="two majors or more"):
        majors.merge({13: halves[13]}, config(tmp_path), tmp_path / "x")
    other_py = build_half(tmp_path, 12, "2_35", py="changed")
    with pytest.raises(UsageError, match="a Python file differs between the CUDA 12 and CUDA 13 wheels") as err:
        majors.merge({12: other_py, 13: halves[13]}, config(tmp_path), tmp_path / "x")
    assert err.value.value == "pkg/__init__.py"
    with pytest.raises(UsageError, match="holds no library matching cuda-libraries"):
        majors.merge(halves, config(tmp_path, **{"cuda-libraries": ["pkg/_other.*"]}), tmp_path / "x")
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_the_merge_refuses_halves_of_other_python_or_abi_tags(tmp_path: Path, halves: dict[int, Path]) -> None:
    """One tag cannot say two floors: a cp39-abi3 half beside a cp310-abi3 one (or a cp312-cp312 one) is refused in
    one line naming both, before anything is written."""
    for other in ("cp39-abi3", "cp312-cp312"):
        odd = build_half(tmp_path, 12, "2_35", python_tag=other)
        with pytest.raises(UsageError) as err:
            majors.merge({12: odd, 13: halves[13]}, config(tmp_path), tmp_path / "x")
        assert err.value.line() == (
            f"error: the wheels to merge have different Python or ABI tags ({other} (CUDA 12) / cp310-abi3 (CUDA 13)): "
            "build every major's wheel for one Python floor (the same requires-python and py_limited_api), as "
            "`release pypi-wheel` does from one commit")
    assert not (tmp_path / "x").exists()


def test_the_key_needs_a_stable_abi_project_with_cuda_libraries(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pypi-cuda-majors needs a stable-ABI project"):
        validation.parse({"pypi-cuda-majors": True, "cuda-libraries": ["x/_C.*"]}, root=tmp_path,
                      source=tmp_path / "pyproject.toml", pyproject={"project": {"name": "pkg"}})
    with pytest.raises(ConfigError, match="pypi-cuda-majors needs cuda-libraries"):
        validation.parse({"pypi-cuda-majors": True, "abi": "stable"}, root=tmp_path, source=tmp_path / "pyproject.toml",
                      pyproject={"project": {"name": "pkg"}})
    assert not validation.parse({"abi": "stable"}, root=tmp_path, source=tmp_path / "pyproject.toml",
                             pyproject={"project": {"name": "pkg"}}).pypi_cuda_majors


def test_fusedops_gets_the_majors_of_torch_210_and_211() -> None:
    fusedops = reading.load(ROOT)
    assert fusedops.pypi_cuda_majors
    assert majors.pypi_majors(fusedops) == (12, 13)
    assert {m: t.cell.name for m, t in majors.major_targets(fusedops).items()} == {12: "cu128", 13: "cu130"}


def test_a_project_without_the_key_is_told_what_fits_its_abi(tmp_path: Path) -> None:
    from ci.errors import UsageError

    def refusal(**table: object) -> str:
        cfg = validation.parse(table, root=tmp_path, source=tmp_path / "pyproject.toml",
                            pyproject={"project": {"name": "pkg"}})
        with pytest.raises(UsageError) as raised:
            majors.major_targets(cfg)
        return raised.value.line()

    assert "set pypi-cuda-majors = true" in refusal(abi="stable")
    classic = refusal()  # the key would be refused for a classic project: it is not what the line suggests
    assert "pypi-cuda-majors = true" not in classic and "bound to one torch release" in classic


def test_coverage_counts_the_other_majors_target_as_held_by_the_wheel_across_majors(tmp_path: Path) -> None:
    from ci.release import coverage
    from ci.universe import targets

    chosen = [t for t in targets.platform_targets(reading.load(ROOT), "linux") if t.arch == "x86_64"]
    cu130 = next(t for t in chosen if t.cell.name == "cu130")
    cu128 = next(t for t in chosen if t.cell.name == "cu128")
    name = f"fusedops-0.1.0-{cu130.wheel_tag_prefix}-manylinux_2_31_x86_64.whl"
    (tmp_path / cu130.id).mkdir()
    with zipfile.ZipFile(tmp_path / cu130.id / name, "w") as zf:
        zf.writestr("fusedops-0.1.0.dist-info/cuda-ext-farm.json", json.dumps({"majors": {"12": {}, "13": {}}}))
    found = coverage.read(tmp_path, chosen)
    assert found.present == {cu130.id: f"{name} (CUDA 12, 13)", cu128.id: f"{name} (its CUDA 12 build)"}
    assert coverage.majors_of(tmp_path / "nothing.whl") == ()


def test_the_symbols_of_another_majors_library_are_left_to_its_own_build(tmp_path: Path,
                                                                          halves: dict[int, Path]) -> None:
    """The torch environment searched is the target's (CUDA 13): the CUDA 12 library is not judged against it."""
    wheel = majors.merge(halves, config(tmp_path), tmp_path / "out").wheel
    target = majors.major_targets(config(tmp_path))[13]
    found = {c.name: c for c in wheel_audit.audit_wheel(wheel, target, None, resolutions={}, abi3audit=False).checks}
    assert found["symbols:pkg/_cuda12/_C_cuda.abi3.so"].ok
    assert found["symbols:pkg/_cuda12/_C_cuda.abi3.so"].detail.startswith("not checked here: a CUDA 12 library")
    assert not found["symbols:pkg/_cuda13/_C_cuda.abi3.so"].ok  # judged (here: nothing was resolved)
    assert found["needed:pkg/_cuda12/_C_cuda.abi3.so"].ok and found["cuda-major:pkg/_cuda12/_C_cuda.abi3.so"].ok


def _release(tmp: Path, cfg: project.ProjectConfig, halves: dict[int, Path], out: Path) -> tuple[Path, object]:
    """``release assemble``'s path (ci/commands/release/folder.py) on the two release cells' wheels: pypi_built, plan,
    write_release, verify_release. The CUDA 12 half carries its variant's local label (+cu128), as built."""
    from ci.release import assembly, plan

    chosen = majors.major_targets(config(tmp))
    labelled = tmp / f"lab-{out.name}" / halves[12].name.replace("pkg-1.0-", "pkg-1.0+cu128-")
    labelled.parent.mkdir()
    shutil.copy(halves[12], labelled)
    built = [plan.Built(chosen[12], labelled, {}), plan.Built(chosen[13], halves[13], {})]
    released, merged = majors.pypi_built(cfg, built, tmp / f"merged-{out.name}")
    manifest = plan.plan(cfg, released, None, tag=None, commit=None)
    assembly.write_release(out, manifest, {item.wheel.name: item.wheel for item in released})
    assembly.verify_release(out)
    return out, merged


def test_release_assemble_gives_pypi_the_merged_wheel_only_with_the_key(tmp_path: Path,
                                                                        halves: dict[int, Path]) -> None:
    out, merged = _release(tmp_path, config(tmp_path), halves, tmp_path / "on")
    assert isinstance(merged, majors.Merged)
    pypi = sorted(p.name for p in (out / "pypi").iterdir())
    assert pypi == [merged.wheel.name] == ["pkg-1.0-cp310-abi3-manylinux_2_35_x86_64.whl"]
    with zipfile.ZipFile(out / "pypi" / pypi[0]) as zf:
        assert {"pkg/_cuda12/_C_cuda.abi3.so", "pkg/_cuda13/_C_cuda.abi3.so", "pkg/_C_cuda.py"} <= set(zf.namelist())
    sums = (out / "assets" / "SHA256SUMS").read_text()
    assert pypi[0] in sums and halves[13].name not in sums  # it takes the single-major wheel's place
    assert "pkg-1.0+cu128-cp310-abi3-manylinux_2_35_x86_64.whl" in sums  # the CUDA 12 half stays in its index
    manifest = json.loads((out / "assets" / "release-manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["name"] == pypi[0])
    assert entry["pypi"] and entry["variant"] == "cu130" and entry["target"].startswith("pkg-stable-cu130")
    off = config(tmp_path, **{"pypi-cuda-majors": False})
    out, merged = _release(tmp_path, off, halves, tmp_path / "off")
    assert merged is None
    assert [p.name for p in (out / "pypi").iterdir()] == [halves[13].name]
    assert (out / "pypi" / halves[13].name).read_bytes() == halves[13].read_bytes()


def test_release_assemble_refuses_a_missing_major(tmp_path: Path, halves: dict[int, Path]) -> None:
    from ci.release import plan

    chosen = majors.major_targets(config(tmp_path))
    with pytest.raises(UsageError, match="needs each major's release wheel") as err:
        majors.pypi_built(config(tmp_path), [plan.Built(chosen[13], halves[13], {})], tmp_path / "x")
    assert err.value.value == chosen[12].id


def test_the_dry_run_merges_its_local_halves_and_skips_a_selection_without_one(tmp_path: Path,
                                                                                halves: dict[int, Path]) -> None:
    """``release dry-run`` (``local``): the CUDA 12 half is the cu128 cell's local stand-in (cu124 without NVIDIA's
    repository, as this run builds it); a selection of one release cell only is not an error there."""
    from ci.linux import buildall
    from ci.release import plan

    cfg = config(tmp_path)
    chosen = majors.major_targets(cfg)
    local = dict(zip(chosen, buildall.local_equivalents(tuple(chosen.values())), strict=True))
    only13 = [plan.Built(local[13], halves[13], {})]
    assert majors.pypi_built(cfg, only13, tmp_path / "one", local=True) == (only13, None)
    both = [plan.Built(local[12], halves[12], {}), *only13]
    released, merged = majors.pypi_built(cfg, both, tmp_path / "two", local=True)
    assert merged is not None and merged.majors == (12, 13)
    assert [item.wheel for item in released] == [halves[12], merged.wheel]
