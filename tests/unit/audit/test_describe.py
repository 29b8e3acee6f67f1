"""What a wheel says about itself (ci/audit/describe.py): the torch floor read from real binaries, the requirement the
farm writes, the audit's torch-range / coverage-file / sass-torch checks, and the architecture defaults that follow
torch's own builds."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from ci import errors, wheelmeta
from ci.audit import describe, wheel_audit
from ci.linux import routes
from ci.toolchain import toolkit
from ci.universe import archs, matrix, project, targets
from ci.universe.project import reading
from ci.universe.tomlvalues import ConfigError

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "windows"))


# --- the requirement ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("declared", "expected"), [
    (None, "torch>=2.10"),                      # no torch requirement at all
    ("", "torch>=2.10"),                        # unbounded `torch`
    (">=2.9", "torch>=2.10"),                   # wider: replaced
    (">=2.8,<3", "torch<3,>=2.10"),             # wider, its upper bound kept
    (">=2.10", "torch>=2.10"),                  # the same: kept
    (">=2.12", "torch>=2.12"),                  # narrower: the project's business, kept
    ("==2.11.*", "torch==2.11.*"),              # narrower
    ("!=2.9.1,>=2.9", "torch>=2.10"),           # wider; an exclusion below the floor is moot
])
def test_the_stable_requirement_never_admits_a_torch_below_the_floor(declared: str | None, expected: str) -> None:
    spec = None if declared is None else SpecifierSet(declared)
    requirement, why = describe.stable_requirement(spec, "2.10")
    assert requirement == expected, why
    assert describe.below_floor(SpecifierSet(requirement.removeprefix("torch")), "2.10") is None


def test_below_floor_names_a_real_release() -> None:
    assert describe.below_floor(SpecifierSet(">=2.9"), "2.10") == "2.9.1"
    assert describe.below_floor(SpecifierSet(""), "2.10") == "2.9.1"
    assert describe.below_floor(SpecifierSet(">=2.10"), "2.10") is None


# --- the floor from real binaries --------------------------------------------------------------------------------

C_SOURCE = """
extern int {a}(void); extern int {b}(void); extern int puts(const char*);
int entry(void) {{ puts("x"); return {a}() + {b}(); }}
"""


def _shared_library(compiler: str, tmp: Path, a: str, b: str, name: str) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(C_SOURCE.format(a=a, b=b))
    out = tmp / f"{name}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


@pytest.mark.parametrize("compiler", ["gcc", "aarch64-linux-gnu-gcc"])
def test_the_floor_of_an_elf_library_is_its_newest_shim(compiler: str, tmp_path: Path) -> None:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    lib_2_10 = _shared_library(compiler, tmp_path, "torch_library_impl", "aoti_torch_empty_strided", "a")
    lib_2_12 = _shared_library(compiler, tmp_path, "aoti_torch_cpu_rand_like", "aoti_torch_empty_strided", "b")
    assert set(describe.imported_names(lib_2_10)) >= {"torch_library_impl", "aoti_torch_empty_strided", "puts"}
    floor = describe.binary_floor([("pkg/a.so", lib_2_10), ("pkg/b.so", lib_2_12)])
    assert (floor.version, floor.symbols, floor.library) == ("2.12", ("aoti_torch_cpu_rand_like",), "pkg/b.so")
    only_baseline = _shared_library(compiler, tmp_path, "aoti_torch_empty_strided", "aoti_torch_get_sizes", "c")
    assert describe.binary_floor([("c.so", only_baseline)]).version == "2.9"
    no_shim = _shared_library(compiler, tmp_path, "getpid", "getppid", "d")
    assert describe.binary_floor([("d.so", no_shim)]).version is None


def test_a_shim_newer_than_the_table_fails_the_range(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    lib = _shared_library("gcc", tmp_path, "torch_library_impl", "torch_shim_of_the_future", "e")
    floor = describe.binary_floor([("e.so", lib)])
    assert floor.unknown == ("torch_shim_of_the_future",)
    check = describe.check_torch_range(["torch>=2.10"], floor, None)
    assert not check.ok and "torch_shim_of_the_future" in check.detail


def test_the_floor_of_a_pe_module(tmp_path: Path) -> None:
    from tests.unit.windows import pebuild

    if pebuild.missing_tools():
        pytest.skip(f"LLVM tools missing: {', '.join(pebuild.missing_tools())}")
    module = pebuild.Module(imports={"KERNEL32.dll": ["GetLastError"],
                                     "torch_cpu.dll": ["torch_library_impl", "aoti_torch_empty_strided"]})
    pyd = pebuild.build(module, tmp_path / "out" / "_C.pyd", tmp_path / "work")
    assert "torch_library_impl" in describe.imported_names(pyd)
    floor = describe.binary_floor([("fusedops/_C.pyd", pyd)])
    assert (floor.version, floor.symbols) == ("2.10", ("torch_library_impl",))


# --- the audit's checks ---------------------------------------------------------------------------------------

def test_torch_range_check() -> None:
    floor = describe.TorchFloor("2.10", ("torch_library_impl",), "fusedops/_C.abi3.so")
    assert describe.check_torch_range(["torch>=2.10", "numpy; extra == 'test'"], floor, None).ok
    wide = describe.check_torch_range(["torch>=2.9"], floor, None)
    assert not wide.ok and "admits torch 2.9.1" in wide.detail and "torch_library_impl" in wide.detail
    none = describe.check_torch_range(["numpy"], floor, None)
    assert not none.ok and "declares no torch requirement" in none.detail
    assert describe.check_torch_range(["torch==2.11.*"], describe.TorchFloor(None), "torch==2.11.*").ok
    assert not describe.check_torch_range(["torch>=2.11"], describe.TorchFloor(None), "torch==2.11.*").ok


def test_coverage_file_check() -> None:
    floor = describe.TorchFloor("2.10", ("torch_library_impl",), "x.so")
    doc = describe.coverage_document("t", "13.0", ("sm_90", "sm_100a"), (), "torch>=2.10", floor, None)
    data = json.loads(doc)
    assert data["sass"] == ["9.0", "10.0a"] and data["torch_floor_source"] == "binary"
    assert describe.check_coverage_file(doc, ("sm_90", "sm_100a"), (), ["torch>=2.10"]).ok
    bad = describe.check_coverage_file(doc, ("sm_90",), ("sm_90",), ["torch>=2.9"])
    assert not bad.ok and "sass, ptx, torch_requirement" in bad.detail


def test_sass_no_torch_runs_beside_is_a_warning() -> None:
    torch_sass = matrix.get_torch("2.11").archs_for("x86_64")
    fine = describe.check_torch_archs(("sm_86", "sm_89", "sm_90", "sm_120"), torch_sass, "2.11.0", "x86_64")
    assert fine.ok and not fine.warn
    idle = describe.check_torch_archs(("sm_70", "sm_90", "sm_110"), torch_sass, "2.11.0", "x86_64")
    assert idle.ok and idle.warn and "sm_70, sm_110" in idle.detail
    aarch64 = matrix.get_torch("2.11").archs_for("aarch64")
    assert not describe.check_torch_archs(("sm_110",), aarch64, "2.11.0", "aarch64").warn


# --- architectures that follow torch ----------------------------------------------------------------------------

def test_runs_on() -> None:
    assert archs.runs_on("8.9", ("8.6",)) and archs.runs_on("12.1", ("12.0",))
    assert not archs.runs_on("8.9", ("9.0",)) and not archs.runs_on("9.0", ("8.6",))
    assert archs.runs_on("9.0", ("9.0a",)) and not archs.runs_on("10.0", ("9.0a",))
    assert archs.runs_on("10.3", ("10.0f",)) and not archs.runs_on("12.0", ("10.0f",))
    assert not archs.runs_on("10.0", (), ptx=("9.0a",))
    assert archs.runs_on("10.0", ("8.0",), ptx=("9.0",)) and not archs.runs_on("8.6", (), ptx=("9.0",))


def test_default_architectures_are_the_target_torchs() -> None:
    config = reading.load(ROOT)
    by_id = {t.id: t for os_name in ("linux", "windows") for t in targets.platform_targets(config, os_name)}
    cu130 = by_id["fusedops-stable-cu130-cp310abi3-linux_x86_64"].cell
    assert (cu130.sass_archs, cu130.ptx_arch) == (matrix.get_torch("2.11").sass, "")
    arm = by_id["fusedops-stable-cu130-cp310abi3-linux_aarch64"].cell
    assert arm.sass_archs == ("8.0", "9.0", "10.0", "11.0", "12.0")
    # fusedops' PyPI wheel spans CUDA 12 and 13 (pypi-cuda-majors): its CUDA 12 builds (the Linux x86_64 one is the
    # merged wheel's half; Windows gets the same list) carry one SASS per GPU generation of torch 2.10's list, which
    # still has Volta, and PTX for Blackwell, new in CUDA 12.8.
    cu128 = by_id["fusedops-stable-cu128-cp310abi3-linux_x86_64"]
    assert (cu128.cell.sass_archs, cu128.cell.ptx_arch) == (("7.0", "8.0", "9.0"), "9.0")
    assert routes.archs_source(cu128) == ("torch 2.10's less 7.5 8.6: one SASS per GPU generation (older-majors-sass): "
                                          "7.5 runs the 7.0 build, 8.6 the 8.0 one: its scheduling, and the paths the "
                                          "toolkit's and torch's headers gate above it; less 10.0 12.0: GPUs new in "
                                          "CUDA 12.8, whose drivers JIT, PTX 9.0 for those")
    windows = by_id["fusedops-stable-cu128-cp310abi3-win_amd64"].cell
    assert (windows.sass_archs, windows.ptx_arch) == (cu128.cell.sass_archs, cu128.cell.ptx_arch)
    # The stand-in's CUDA 12.4 cannot compile Blackwell: torch's list less 10.0 and 12.0, PTX 9.0 for those GPUs.
    stand_in = targets.stand_in(cu128)
    assert stand_in is not None
    assert (stand_in.cell.sass_archs, stand_in.cell.ptx_arch) == (("7.0", "8.0", "9.0"), "9.0")
    assert "less 10.0 12.0: beyond CUDA 12.4, PTX 9.0" in routes.archs_source(stand_in)


def test_older_majors_sass_torch_keeps_torchs_list(tmp_path: Path) -> None:
    def cu128_of(extra: str) -> targets.Target:
        (tmp_path / "pyproject.toml").write_text(
            '[project]\nname = "p"\nversion = "1"\n[tool.cuda-ext-farm]\nabi = "stable"\n'
            f'cuda-libraries = ["p/_C_cuda.*"]\n{extra}\n')
        config = reading.load(tmp_path)
        return next(t for t in targets.platform_targets(config, "linux") if t.cell.name == "cu128")

    assert cu128_of("").cell.sass_archs == matrix.get_torch("2.10").sass  # no merge: torch's list
    assert cu128_of("pypi-cuda-majors = true").cell.sass_archs == ("7.0", "8.0", "9.0")
    kept = cu128_of('pypi-cuda-majors = true\nolder-majors-sass = "torch"')
    assert kept.cell.sass_archs == matrix.get_torch("2.10").sass and routes.archs_source(kept) == "torch 2.10's"
    with pytest.raises(ConfigError, match="older-majors-sass"):
        cu128_of('pypi-cuda-majors = true\nolder-majors-sass = "some"')
    # The newest major keeps torch's list: it is what later torch releases and GPUs use.
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "1"\n[tool.cuda-ext-farm]\nabi = "stable"\n'
        'cuda-libraries = ["p/_C_cuda.*"]\npypi-cuda-majors = true\n')
    cu130 = next(t for t in targets.platform_targets(reading.load(tmp_path), "linux") if t.cell.name == "cu130")
    assert cu130.cell.sass_archs == matrix.get_torch("2.11").sass


def test_per_generation_keeps_the_oldest_of_each_major_and_the_variants() -> None:
    cell = archs.with_arch_list(matrix.get_cell("cu130"), "7.5;8.0;8.6;8.9;9.0;9.0a;10.0;10.3;12.0;12.1+PTX")
    kept = archs.per_generation(cell)
    assert kept.sass_archs == ("7.5", "8.0", "9.0", "9.0a", "10.0", "12.0") and kept.ptx_arch == "12.1"
    # Every GPU the full list runs on, the kept one runs on too.
    for gpu in ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"):
        assert archs.runs_on(gpu, kept.sass_archs) == archs.runs_on(gpu, cell.sass_archs), gpu
    # CUDA 12.8: Blackwell is new in it (its GPUs need a 12.8 driver, which JITs the build's PTX); the older
    # generations keep SASS, for drivers older than the toolkit, which cannot JIT.
    assert archs.new_in("12.8") == ("10.0", "10.1", "12.0") and archs.new_in("12.4") == ()
    torch_210 = archs.with_torch_archs(matrix.get_cell("cu128"), matrix.get_torch("2.10").sass)
    half = archs.per_generation(torch_210)
    assert (half.sass_archs, half.ptx_arch) == (("7.0", "8.0", "9.0"), "9.0")
    for gpu in ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"):
        assert archs.runs_on(gpu, half.sass_archs, (half.ptx_arch,)), gpu
        assert archs.runs_on(gpu, half.sass_archs) == (gpu not in ("10.0", "12.0")), gpu  # SASS: all but Blackwell


def test_a_projects_own_and_extra_architectures(tmp_path: Path) -> None:
    def config(extra: str) -> project.ProjectConfig:
        (tmp_path / "pyproject.toml").write_text(
            f'[project]\nname = "p"\nversion = "1"\n[tool.cuda-ext-farm]\nabi = "stable"\n{extra}\n')
        return reading.load(tmp_path)

    extra = targets.default_target(config('extra-cuda-archs = "8.9;12.0+PTX"'))
    assert extra.cell.arch_list == "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"
    assert routes.archs_source(extra) == "torch 2.11's + the project's 8.9"
    own = targets.default_target(config('cuda-archs = "9.0"'))
    assert own.cell.arch_list == "9.0" and routes.archs_source(own) == "the project's cuda-archs"
    with pytest.raises(errors.MatrixError, match=r"5\.2"):
        targets.default_target(config('extra-cuda-archs = "5.2"'))


# --- the published wheel --------------------------------------------------------------------------------------

def _document(wheel: Path) -> dict[str, object]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(f".dist-info/{describe.FILE}")]
        return dict(json.loads(zf.read(name)))


@pytest.mark.wheel
def test_the_release_wheel_says_what_its_binary_needs(built_wheel: Path, tmp_path: Path) -> None:
    doc = _document(built_wheel)
    # The release target, with the architectures of this wheel (FARM_TEST_WHEEL may be a --arch-list build).
    release = targets.default_target(reading.load(ROOT))
    ptx = doc["ptx"][-1] if doc["ptx"] else ""  # type: ignore[index]
    target = dataclasses.replace(release, cell=dataclasses.replace(
        release.cell, sass_archs=tuple(doc["sass"]), ptx_arch=ptx))  # type: ignore[arg-type]
    assert (doc["torch_requirement"], doc["torch_floor"], doc["torch_floor_source"]) == ("torch>=2.10", "2.10",
                                                                                          "binary")
    assert "torch_library_impl" in doc["torch_floor_symbols"]  # type: ignore[operator]
    assert "torch>=2.10" in wheelmeta.read_metadata(built_wheel)["Requires-Dist"]
    # A project that declared an unbounded torch gets the same bound, from the binary.
    unbounded = wheelmeta.rewrite(built_wheel, tmp_path / "unbounded", torch_pin="torch")
    described = describe.describe_wheel(unbounded, target, toolkit.ensure_cuobjdump())
    assert described.requirement == "torch>=2.10" and "an unbounded torch" in described.note
    assert json.loads(described.document)["sass"] == doc["sass"]
    # A hand-edited wider range fails the wheel_audit, naming the release it would let in.
    wider = wheelmeta.rewrite(built_wheel, tmp_path / "wider", torch_pin="torch>=2.9")
    result = wheel_audit.audit_wheel(wider, target, toolkit.ensure_cuobjdump(), abi3audit=False)
    failed = {c.name: c.detail for c in result.failures()}
    assert set(failed) == {"torch-range", "coverage-file"}, failed
    assert "admits torch 2.9.1" in failed["torch-range"]
    # A coverage file that claims an architecture the binary lacks fails too.
    claimed = json.dumps({**doc, "sass": [*doc["sass"], "12.1"]}).encode()  # type: ignore[list-item]
    forged = wheelmeta.rewrite(built_wheel, tmp_path / "forged", torch_pin="torch>=2.10",
                               dist_info_files={describe.FILE: claimed})
    result = wheel_audit.audit_wheel(forged, target, toolkit.ensure_cuobjdump(), abi3audit=False)
    assert [c.name for c in result.failures()] == ["coverage-file"]


