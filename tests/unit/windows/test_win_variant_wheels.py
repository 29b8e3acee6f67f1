"""Windows wheels as PEP 825 variant wheels (ci/release/variants/), from real PE files that hold real fatbins:
nvcc (the farm's PyPI CUDA 13.0 toolkit) writes fatbins, or fusedops' real Linux library gives its ``.nv_fatbin``,
and LLVM links them into a .pyd's ``.nv_fatb`` section. The properties come from the import tables
(``cudart64_13.dll``) and cuobjdump's reading of the section; the Linux path (cuobjdump on the ELF library) and the
Windows path agree on fusedops' real fatbin; variantlib's own parsers and index generator accept a folder of Linux
and Windows variant wheels; the doctor's pick on a recorded Windows machine is a Windows wheel."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pebuild
import pytest

from ci.audit import gpu_code
from ci.doctor import diagnose
from ci.errors import UsageError
from ci.release import variants
from ci.release.variants import binary, validation, writing
from ci.toolchain import toolkit
from ci.universe import matrix, targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
ENVS = ROOT / "tests" / "fixtures" / "doctor"
KERNEL = "__global__ void k{n}(float* x) {{ x[threadIdx.x] *= {n}.0f; }}\n"
#: fatbin -> nvcc's -gencode values (several containers in one section, as MSVC links several .cu objects)
FATBINS = {
    "low": ("arch=compute_75,code=sm_75", "arch=compute_80,code=sm_80", "arch=compute_86,code=sm_86"),
    "high": ("arch=compute_90,code=sm_90", "arch=compute_90a,code=sm_90a", "arch=compute_100,code=sm_100",
             "arch=compute_120,code=sm_120"),
    "ptx86": ("arch=compute_80,code=sm_80", "arch=compute_86,code=[sm_86,compute_86]"),
    "only_90a": ("arch=compute_90a,code=sm_90a",),
}
SYSTEM = {"KERNEL32.dll": ["GetLastError"], "VCRUNTIME140.dll": ["memcpy"]}
C10_CUDA = {"c10_cuda.dll": ["?current_device@cuda@c10@@YACXZ"]}
CUDART13 = {"cudart64_13.dll": ["cudaLaunchKernel"]}
CUDART12 = {"cudart64_12.dll": ["cudaGetLastError"]}


@pytest.fixture(scope="module")
def cuobjdump() -> Path:
    return toolkit.ensure_cuobjdump()


@pytest.fixture(scope="module")
def fatbins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cell = matrix.get_cell("13.0")
    root = toolkit.cached_toolkit(cell)
    if root is None:
        pytest.skip("the pinned CUDA 13.0 toolkit is not in the farm's cache (nox -s build or nox -s toolkit "
                    "installs it); not downloaded by a test")
    nvcc = root / cell.toolkit.home_subdir / "bin" / "nvcc"
    folder = tmp_path_factory.mktemp("fatbins")
    found = {}
    for n, (name, gencodes) in enumerate(FATBINS.items()):
        (folder / f"{name}.cu").write_text(KERNEL.format(n=n + 1))
        # The high one compressed (Zstandard), as the farm's CUDA 13 builds are.
        extra = ["--compress-mode=size"] if name == "high" else []
        subprocess.run([str(nvcc), "-fatbin", "-o", f"{name}.fatbin", f"{name}.cu", *extra,
                        *(f"-gencode={g}" for g in gencodes)], cwd=folder, check=True, capture_output=True)
        found[name] = folder / f"{name}.fatbin"
    return found


def _fusedops_pyd(built_wheel: Path, folder: Path) -> Path:
    """A .pyd whose .nv_fatb holds the ``.nv_fatbin`` section of fusedops' real Linux library (``_C_cuda.abi3.so``)."""
    from elftools.elf.elffile import ELFFile

    with zipfile.ZipFile(built_wheel) as zf:
        zf.extract("fusedops/_C_cuda.abi3.so", folder)
    with (folder / "fusedops" / "_C_cuda.abi3.so").open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".nv_fatbin")
        assert section is not None
        (folder / "fusedops.fatbin").write_bytes(section.data())
    module = pebuild.Module(imports={**SYSTEM, **C10_CUDA, **CUDART13}, fatbin=(folder / "fusedops.fatbin",))
    return pebuild.build(module, folder / "fusedops.pyd", folder / "work")


@pytest.fixture(scope="module")
def modules(pe_tools: None, fatbins: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cuda = {**SYSTEM, **C10_CUDA, **CUDART13}
    real = (fatbins["low"], fatbins["high"])
    built = {
        "cpu": pebuild.Module(imports={**SYSTEM, "c10.dll": ["?GetCPUAllocator@c10@@YAPEAUAllocator@1@XZ"],
                                       "python3.dll": ["PyModule_Create2"]}),
        "nvcc": pebuild.Module(imports=cuda, fatbin=real),
        "ptx86": pebuild.Module(imports=cuda, fatbin=(fatbins["ptx86"],)),
        "cuda12": pebuild.Module(imports={**SYSTEM, **CUDART12}, fatbin=real),
        "two_runtimes": pebuild.Module(imports={**SYSTEM, **CUDART12, **CUDART13}, fatbin=real),
        "no_cudart": pebuild.Module(imports={**SYSTEM, **C10_CUDA}, fatbin=real),
        "delay_cudart": pebuild.Module(imports={**SYSTEM, **C10_CUDA}, delay=CUDART13, fatbin=real),
        "no_fatbin": pebuild.Module(imports=cuda),
        "only_90a": pebuild.Module(imports=cuda, fatbin=(fatbins["only_90a"],)),
    }
    root = tmp_path_factory.mktemp("pe")
    # Zeros before, between and after the containers (alignment, or a section larger than its data): cuobjdump
    # finds nothing in a fatbin file that starts with padding, so the release gives it the containers alone.
    padded = root / "padded.fatbin"
    padded.write_bytes(b"\0" * 64 + fatbins["low"].read_bytes() + b"\0" * 40 + fatbins["high"].read_bytes()
                       + b"\0" * 512)
    built["padded"] = pebuild.Module(imports=cuda, fatbin=(padded,))
    return pebuild.build_all(built, root / "out", root / "work")


def _wheel(folder: Path, modules: dict[str, Path], cuda_module: str | Path | None) -> Path:
    """fusedops' Windows wheel as the farm lays it out: _C.pyd (CPU) and, in a CUDA build, _C_cuda.pyd (one of
    ``modules`` or a file)."""
    files = {"fusedops/__init__.py": b"", "fusedops/_C.pyd": modules["cpu"].read_bytes()}
    if cuda_module is not None:
        pyd = cuda_module if isinstance(cuda_module, Path) else modules[cuda_module]
        files["fusedops/_C_cuda.pyd"] = pyd.read_bytes()
    return pebuild.make_wheel(folder, "fusedops", "0.1.0", "cp310-abi3-win_amd64", files)


def _target(os: str, cpu: bool = False) -> targets.Target:
    found = next(t for t in targets.platform_targets(reading.load(ROOT), os) if t.cell.name == "cu130"
                 and t.arch in ("x86_64", "amd64"))
    return dataclasses.replace(found, cpu=cpu)


def _listed(source: str, what: str) -> list[str]:
    """The SASS or PTX architectures a variant's source line names."""
    part = next(p for p in source.split("; ") if p.startswith(what + " "))
    return [] if part.endswith(" none") else part.split()[1:]


def test_the_windows_path_reads_fusedops_real_fatbin_as_the_linux_path_does(
        built_wheel: Path, modules: dict[str, Path], cuobjdump: Path, tmp_path: Path) -> None:
    """The same fatbin, once in fusedops' real ELF library (cuobjdump on the .so) and once in a PE file's .nv_fatb
    section (the Windows path): the same SASS and PTX, the same properties."""
    linux = binary.variant_of(built_wheel, _target("linux"), cuobjdump)
    pyd = _fusedops_pyd(built_wheel, tmp_path)
    windows = binary.variant_of(_wheel(tmp_path / "win", modules, pyd), _target("windows"), cuobjdump)
    assert windows.label == linux.label == "cuda13.0"
    assert windows.properties == linux.properties
    assert linux.properties[variants.SM_ARCH] == ("75_real", "80_real", "86_real", "90_real", "100_real", "120_real")
    for what in ("SASS", "PTX"):
        assert set(_listed(windows.source, what)) == set(_listed(linux.source, what))
    assert set(_listed(linux.source, "SASS")) == {"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"}
    assert windows.source.startswith("links cudart64_13.dll, cell cu130")
    assert linux.source.startswith("links libcudart.so.13, cell cu130")


def test_nvcc_fatbins_in_a_pe_file(modules: dict[str, Path], fatbins: dict[str, Path], cuobjdump: Path,
                                   tmp_path: Path) -> None:
    """Two containers (one Zstandard-compressed) in one .nv_fatb: every architecture cuobjdump lists in nvcc's own
    files, sm_90a left out of the values."""
    variant = binary.variant_of(_wheel(tmp_path, modules, "nvcc"), _target("windows"), cuobjdump)
    sass, ptx = gpu_code.list_archs(cuobjdump, [fatbins["low"], fatbins["high"]])
    # Sets: cuobjdump's lists are parsed into a set, and sm_90/sm_90a tie in gpu_code's order.
    assert set(sass) == {"sm_75", "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_120"} and ptx == ()
    assert set(_listed(variant.source, "SASS")) == set(sass) and _listed(variant.source, "PTX") == []
    assert variant.properties == {variants.LOWER_BOUND: ("13.0",), variants.SM_ARCH: (
        "75_real", "80_real", "86_real", "90_real", "100_real", "120_real")}
    padded = binary.variant_of(_wheel(tmp_path / "p", modules, "padded"), _target("windows"), cuobjdump)
    assert padded.properties == variant.properties
    ptx86 = binary.variant_of(_wheel(tmp_path / "b", modules, "ptx86"), _target("windows"), cuobjdump)
    assert ptx86.properties[variants.SM_ARCH] == ("80_real", "86_real", "86_virtual")
    # A delay-loaded cudart64_13.dll is linked as well.
    delayed = binary.variant_of(_wheel(tmp_path / "c", modules, "delay_cudart"), _target("windows"), cuobjdump)
    assert delayed.properties[variants.LOWER_BOUND] == ("13.0",)


@pytest.mark.parametrize(("module", "message"), [
    ("cuda12", r"not its cell's single major \(fusedops-0.1.0-cp310-abi3-win_amd64.whl: links cudart64_\*.dll "
               r"\[12\], cell cu130\)"),
    ("two_runtimes", r"not its cell's single major .*links cudart64_\*.dll \[12, 13\]"),
    ("no_cudart", r"not its cell's single major .*links cudart64_\*.dll none"),
    ("no_fatbin", "holds no CUDA code, so it has no variant"),
    ("only_90a", r"has no sm_arch value \(fusedops-0.1.0-cp310-abi3-win_amd64.whl: SASS sm_90a, PTX none\)"),
])
def test_a_windows_wheel_the_rules_give_no_single_answer_is_refused(
        module: str, message: str, modules: dict[str, Path], cuobjdump: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=message) as refused:
        binary.variant_of(_wheel(tmp_path, modules, module), _target("windows"), cuobjdump)
    assert "\n" not in str(refused.value)


def _same_as_generated(wheels: Sequence[Path], index_file: Path, folder: Path) -> bool:
    """variantlib's own index generator, run on the wheels alone, writes the variants of ``index_file`` (compared as
    variantlib reads them: it writes each feature's values in its own order)."""
    from variantlib.commands.generate_index_json import generate_index_json
    from variantlib.variants_json import VariantsJson

    folder.mkdir()
    for wheel in wheels:
        shutil.copy(wheel, folder)
    generate_index_json(["-d", str(folder)])
    theirs = VariantsJson(json.loads(next(folder.glob("*-variants.json")).read_text()))
    ours = VariantsJson(json.loads(index_file.read_text()))
    return bool(theirs.variants == ours.variants and theirs.providers == ours.providers)


def _pick(folder: Path, env: str) -> tuple[str, list[str]]:
    pick, labels = diagnose.doctor(folder, diagnose.load_env(ENVS / f"{env}.json")).variant_picks["fusedops"]
    assert pick is not None
    return pick.wheel.file, labels


def test_linux_and_windows_wheels_of_a_cell_share_its_label(
        built_wheel: Path, modules: dict[str, Path], cuobjdump: Path, tmp_path: Path) -> None:
    windows = _wheel(tmp_path / "win", modules, _fusedops_pyd(built_wheel, tmp_path))
    windows_cpu = _wheel(tmp_path / "win-cpu", modules, None)
    built = [(built_wheel, _target("linux")), (windows, _target("windows")),
             (windows_cpu, _target("windows", cpu=True))]
    items = writing.release_items(built, _target("linux").torch, cuobjdump)
    assert [(w.name, v.label) for w, v in items] == [
        ("fusedops-0.1.0-cp310-abi3-manylinux_2_31_x86_64.whl", "cuda13.0"),
        ("fusedops-0.1.0-cp310-abi3-win_amd64.whl", "cuda13.0"),
        ("fusedops-0.1.0-cp310-abi3-win_amd64.whl", "null")]
    written = writing.write_folder(tmp_path / "a", items, "fusedops")
    assert [w.name for w in written.wheels] == ["fusedops-0.1.0-cp310-abi3-manylinux_2_31_x86_64-cuda13.0.whl",
                                                "fusedops-0.1.0-cp310-abi3-win_amd64-cuda13.0.whl",
                                                "fusedops-0.1.0-cp310-abi3-win_amd64-null.whl"]
    assert validation.validate(written.folder).startswith("variantlib accepts 3 variant wheels (cuda13.0, null)")
    ours = json.loads(written.index_file.read_text())["variants"]
    assert _same_as_generated(written.wheels, written.index_file, tmp_path / "theirs")
    assert sorted(ours) == ["cuda13.0", "null"]
    again = writing.write_folder(tmp_path / "b", items, "fusedops")
    assert [p.read_bytes() for p in again.wheels] == [p.read_bytes() for p in written.wheels]
    # The doctor: a Windows machine gets the Windows wheel of the label, a Linux machine the Linux one.
    assert _pick(written.folder, "windows_rtx4090")[0] == "fusedops-0.1.0-cp310-abi3-win_amd64-cuda13.0.whl"
    assert _pick(written.folder, "h100_cu130")[0] == "fusedops-0.1.0-cp310-abi3-manylinux_2_31_x86_64-cuda13.0.whl"


def test_windows_wheels_with_other_properties_get_their_own_label(
        built_wheel: Path, modules: dict[str, Path], cuobjdump: Path, tmp_path: Path) -> None:
    """One label names one set of properties: the Windows wheel that holds other architectures than the Linux wheel
    of its cell is ``cuda13.0.win``; on a Windows machine whose GPU ranks the Linux label first, the doctor (as an
    installer filters by platform first) still picks the Windows wheel."""
    windows = _wheel(tmp_path / "win", modules, "ptx86")
    items = writing.release_items([(built_wheel, _target("linux")), (windows, _target("windows"))],
                                   _target("linux").torch, cuobjdump)
    assert [v.label for _, v in items] == ["cuda13.0", "cuda13.0.win"]
    assert items[1][1].properties[variants.SM_ARCH] == ("80_real", "86_real", "86_virtual")
    assert items[1][1].source.endswith("the label's other wheels hold other properties")
    written = writing.write_folder(tmp_path / "a", items, "fusedops")
    assert "(cuda13.0, cuda13.0.win)" in validation.validate(written.folder)
    assert _same_as_generated(written.wheels, written.index_file, tmp_path / "theirs")
    # RTX 4090 (8.9): both labels' best sm_arch is 86_real; the tie goes to the label, cuda13.0 (Linux only).
    wheel, labels = _pick(written.folder, "windows_rtx4090")
    assert labels == ["cuda13.0", "cuda13.0.win", "null"]
    assert wheel == "fusedops-0.1.0-cp310-abi3-win_amd64-cuda13.0.win.whl"
