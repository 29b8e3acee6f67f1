"""The PE audit and delvewheel repair on real PE files (built on Linux with LLVM: tests/unit/windows/pebuild.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import zipfile
from pathlib import Path

import pebuild
import pytest

from ci.audit.checks import AuditResult
from ci.audit.wheel_audit import raise_for_failures
from ci.builds import tail
from ci.errors import AuditFailed, CommandFailed
from ci.universe.targets import Target
from windows import audit, dlls, pe, repair


def _stable_target(targets: tuple[Target, ...]) -> Target:
    return next(t for t in targets if t.cell.cuda == "13.0")


def _fusedops_wheel(folder: Path, pe_files: dict[str, Path], cuda_module: str = "cuda",
                    cpu_module: str = "cpu", tag: str = "cp310-abi3-win_amd64", extra: dict[str, bytes] | None = None,
                    names: tuple[str, str] = ("_C.pyd", "_C_cuda.pyd")) -> Path:
    files = {f"fusedops/{names[0]}": pe_files[cpu_module].read_bytes(),
             f"fusedops/{names[1]}": pe_files[cuda_module].read_bytes(),
             "fusedops/__init__.py": b"", **(extra or {})}
    return pebuild.make_wheel(folder, "fusedops", "0.1.0", tag, files, requires=["torch>=2.10"])


def _failed(result: AuditResult) -> dict[str, str]:
    return {c.name: c.detail for c in result.failures()}


def test_reading_pe_files(pe_files: dict[str, Path]) -> None:
    info = pe.read(pe_files["cuda"])
    assert info.machine == pe.AMD64
    assert {"c10_cuda.dll", "torch_cuda.dll", "cudart64_13.dll", "KERNEL32.dll"} <= set(info.dlls)
    assert info.has_cuda_code and ".nv_fatb" in info.sections
    assert info.exports == ("PyInit__C",)
    assert info.importing(pe.C10_CUDA) == {"c10_cuda.dll": ("?current_device@cuda@c10@@YACXZ",
                                                             "?getCurrentCUDAStream@cuda@c10@@YA?AVCUDAStream@12@C@Z")}
    delayed = pe.read(pe_files["delay_torch_cuda"])
    assert delayed.delay_dlls == ("torch_cuda.dll",) and "torch_cuda.dll" not in delayed.dlls
    assert delayed.imported_from("TORCH_CUDA.DLL") == ("?warp_size@cuda@at@@YAHXZ",)
    assert not pe.read(pe_files["cpu"]).has_cuda_code


def test_not_a_pe_file(tmp_path: Path) -> None:
    bogus = tmp_path / "x.pyd"
    bogus.write_bytes(b"\x7fELF" + bytes(60))
    with pytest.raises(pe.NotPe, match="not a Windows PE file"):
        pe.read(bogus)


def test_readable_names() -> None:
    assert pe.readable("?current_device@cuda@c10@@YACXZ") == "c10::cuda::current_device"
    assert pe.readable("?getCurrentCUDAStream@cuda@c10@@YA?AVCUDAStream@12@C@Z") == "c10::cuda::getCurrentCUDAStream"
    assert pe.readable("cudaLaunchKernel") == "cudaLaunchKernel"
    assert pe.readable("??0CUDAStream@cuda@c10@@QEAA@XZ") == "??0CUDAStream@cuda@c10@@QEAA@XZ"


def test_good_stable_wheel_passes(tmp_path: Path, pe_files: dict[str, Path], torch_site: Path,
                                  fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files)
    result = audit.audit_wheel(wheel, _stable_target(fusedops_targets), torch=audit.TorchDlls.scan(torch_site))
    assert result.ok, _failed(result)
    names = {c.name for c in result.checks}
    assert {"wheel-tag", "win-platform", "metadata", "module-suffix", "bundled", "imports:fusedops/_C_cuda.pyd",
            "cpu-only:fusedops/_C.pyd", "cuda-code:fusedops/_C_cuda.pyd", "cuda-runtime:fusedops/_C_cuda.pyd",
            "c10-cuda:fusedops/_C_cuda.pyd", "torch-cuda:fusedops/_C_cuda.pyd", "python:fusedops/_C.pyd",
            "exports:fusedops/_C_cuda.pyd"} <= names
    raise_for_failures(result)
    # Without the target's torch the DLL names are checked against the farm's lists.
    assert audit.audit_wheel(wheel, _stable_target(fusedops_targets)).ok


def test_missing_c10_cuda_fails_with_a_clear_message(tmp_path: Path, pe_files: dict[str, Path], torch_site: Path,
                                                     fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cuda_module="no_c10_cuda")
    result = audit.audit_wheel(wheel, _stable_target(fusedops_targets), torch=audit.TorchDlls.scan(torch_site))
    failed = _failed(result)
    detail = failed["c10-cuda:fusedops/_C_cuda.pyd"]
    assert "uses c10::cuda symbols (c10::cuda::current_device) imported from torch_cuda.dll, not c10_cuda.dll" in detail
    assert "link c10_cuda.lib" in detail
    # With the user's torch at hand the import is also shown not to resolve, and where the symbol really is.
    assert "c10::cuda::current_device from torch_cuda.dll, which c10_cuda.dll exports" in \
        failed["exports:fusedops/_C_cuda.pyd"]
    with pytest.raises(AuditFailed) as err:
        raise_for_failures(result)
    assert err.value.exit_code == 4 and "c10-cuda:fusedops/_C_cuda.pyd" in err.value.details


def test_a_dll_nobody_ships_fails(tmp_path: Path, pe_files: dict[str, Path], torch_site: Path,
                                  fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cuda_module="mystery")
    for torch in (audit.TorchDlls.scan(torch_site), None):
        failed = _failed(audit.audit_wheel(wheel, _stable_target(fusedops_targets), torch=torch))
        assert list(failed) == ["imports:fusedops/_C_cuda.pyd"]
        assert "unexpected: libfoo.dll (neither Windows, the VC++ runtime, CPython, the user's torch nor this wheel " \
               "provides it" in failed["imports:fusedops/_C_cuda.pyd"]


def test_cuda_runtime_of_another_major(tmp_path: Path, pe_files: dict[str, Path],
                                       fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cuda_module="cuda12")
    failed = _failed(audit.audit_wheel(wheel, _stable_target(fusedops_targets)))
    assert "cudart64_12.dll (not a CUDA 13 DLL" in failed["imports:fusedops/_C_cuda.pyd"]
    assert "does not import cudart64_13.dll" in failed["cuda-runtime:fusedops/_C_cuda.pyd"]


def test_cuda_library_without_cuda_code(tmp_path: Path, pe_files: dict[str, Path],
                                        fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cuda_module="no_fatbin")
    failed = _failed(audit.audit_wheel(wheel, _stable_target(fusedops_targets)))
    assert "holds no CUDA code (no .nv_fatb section)" in failed["cuda-code:fusedops/_C_cuda.pyd"]
    assert "FUSEDOPS_CUDA=1" in failed["cuda-code:fusedops/_C_cuda.pyd"]


def test_the_cuda_code_advice_names_the_globs_that_pass_on_the_wheel(tmp_path: Path, pe_files: dict[str, Path],
                                                                     fusedops_targets: tuple[Target, ...]) -> None:
    """A project that pairs ``*_cpu`` and ``*_cuda`` libraries (no cuda-libraries set): the failed ``cuda-code``
    check names the cuda-libraries that pass, as the Linux audit does; applied, every cuda-code check passes and
    each library with CUDA code is still checked."""
    stable = _stable_target(fusedops_targets)
    target = dataclasses.replace(stable, project=dataclasses.replace(stable.project, cuda_libraries=("*",),
                                                                     cpu_libraries=()))
    files = {f"pkg/{name}_{kind}.pyd": pe_files[kind].read_bytes() for name in ("ops", "image")
             for kind in ("cpu", "cuda")}
    wheel = pebuild.make_wheel(tmp_path, "pkg", "1.0", "cp310-abi3-win_amd64", files, requires=["torch>=2.10"])
    failed = {k: v for k, v in _failed(audit.audit_wheel(wheel, target)).items() if k.startswith("cuda-code:")}
    assert sorted(failed) == ["cuda-code:pkg/image_cpu.pyd", "cuda-code:pkg/ops_cpu.pyd"]
    table = re.search(r"cuda-libraries = (\[[^]]*\])", failed["cuda-code:pkg/ops_cpu.pyd"])
    assert table is not None, failed
    globs = json.loads(table.group(1))  # a TOML array of basic strings, as the user pastes it
    applied = dataclasses.replace(target, project=dataclasses.replace(target.project, cuda_libraries=tuple(globs)))
    checked = {c.name: c.ok for c in audit.audit_wheel(wheel, applied).checks if c.name.startswith("cuda-code:")}
    assert checked == {"cuda-code:pkg/image_cuda.pyd": True, "cuda-code:pkg/ops_cuda.pyd": True}


def test_torch_cuda_must_be_loaded_with_the_module(tmp_path: Path, pe_files: dict[str, Path],
                                                   fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cuda_module="delay_torch_cuda")
    failed = _failed(audit.audit_wheel(wheel, _stable_target(fusedops_targets)))
    assert "delay-loads torch_cuda.dll" in failed["torch-cuda:fusedops/_C_cuda.pyd"]
    assert "/INCLUDE:?warp_size@cuda@at@@YAHXZ" in failed["torch-cuda:fusedops/_C_cuda.pyd"]


def test_cpu_library_may_delay_load_cuda(tmp_path: Path, pe_files: dict[str, Path],
                                         fusedops_targets: tuple[Target, ...]) -> None:
    """A CPU library that delay-loads c10_cuda.dll still loads under a CPU-only torch."""
    wheel = _fusedops_wheel(tmp_path, pe_files, cpu_module="delay_cuda_in_cpu")
    result = audit.audit_wheel(wheel, _stable_target(fusedops_targets))
    assert result.ok, _failed(result)
    eager = _fusedops_wheel(tmp_path / "eager", pe_files, cpu_module="cuda")
    failed = _failed(audit.audit_wheel(eager, _stable_target(fusedops_targets)))
    assert "it would not load under a CPU-only torch" in failed["cpu-only:fusedops/_C.pyd"]


def test_abi3_module_must_not_tie_itself_to_one_python(tmp_path: Path, pe_files: dict[str, Path],
                                                       fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cpu_module="python312")
    failed = _failed(audit.audit_wheel(wheel, _stable_target(fusedops_targets)))
    assert failed["python:fusedops/_C.pyd"].startswith("imports python312.dll; an abi3 module must import python3.dll")


def test_wheel_tag_and_suffix_must_match_the_abi(tmp_path: Path, pe_files: dict[str, Path],
                                                 fusedops_targets: tuple[Target, ...]) -> None:
    target = _stable_target(fusedops_targets)
    wrong_tag = _fusedops_wheel(tmp_path / "a", pe_files, tag="cp312-cp312-win_amd64")
    assert "expected cp310-abi3" in _failed(audit.audit_wheel(wrong_tag, target))["wheel-tag"]
    linux = _fusedops_wheel(tmp_path / "b", pe_files, tag="cp310-abi3-linux_x86_64")
    assert "expected win_amd64" in _failed(audit.audit_wheel(linux, target))["win-platform"]
    tagged = _fusedops_wheel(tmp_path / "c", pe_files, names=("_C.cp310-win_amd64.pyd", "_C_cuda.pyd"))
    assert "an abi3 module is NAME.pyd" in _failed(audit.audit_wheel(tagged, target))["module-suffix"]


def test_classic_per_python_wheel(tmp_path: Path, pe_files: dict[str, Path], torch_site: Path,
                                  classic_targets: tuple[Target, ...]) -> None:
    target = next(t for t in classic_targets if t.python == "3.12" and t.torch.startswith("2.11"))
    files = {"classic_ext/_C.cp312-win_amd64.pyd": pe_files["classic312"].read_bytes(),
             "classic_ext/__init__.py": b""}
    wheel = pebuild.make_wheel(tmp_path, "classic_ext", "0.3.0+pt2.11.cu130", "cp312-cp312-win_amd64", files,
                               requires=["torch==2.11.*"])
    result = audit.audit_wheel(wheel, target, torch=audit.TorchDlls.scan(torch_site))
    assert result.ok, _failed(result)
    other = dataclasses.replace(target, python="3.11")
    failed = _failed(audit.audit_wheel(wheel, other))
    assert "python:classic_ext/_C.cp312-win_amd64.pyd" in failed and "module-suffix" in failed


def test_torch_dll_that_the_users_torch_lacks(tmp_path: Path, pe_files: dict[str, Path], torch_site: Path,
                                              fusedops_targets: tuple[Target, ...]) -> None:
    lean = tmp_path / "site"
    (lean / "torch" / "lib").mkdir(parents=True)
    for dll in (torch_site / "torch" / "lib").glob("*.dll"):
        if dll.name != "torch_cuda.dll":
            (lean / "torch" / "lib" / dll.name).write_bytes(dll.read_bytes())
    wheel = _fusedops_wheel(tmp_path, pe_files)
    failed = _failed(audit.audit_wheel(wheel, _stable_target(fusedops_targets), torch=audit.TorchDlls.scan(lean)))
    assert "torch_cuda.dll (not a CUDA 13 DLL" not in failed["imports:fusedops/_C_cuda.pyd"]
    assert "torch_cuda.dll (the target's torch has no such DLL)" in failed["imports:fusedops/_C_cuda.pyd"]


def test_bundled_torch_or_cuda_dll_fails(tmp_path: Path, pe_files: dict[str, Path],
                                         fusedops_targets: tuple[Target, ...]) -> None:
    vendored = {"fusedops.libs/cudart64_13-0123456789abcdef0123456789abcdef.dll": pe_files["helper.dll"].read_bytes()}
    wheel = _fusedops_wheel(tmp_path, pe_files, extra=vendored)
    failed = _failed(audit.audit_wheel(wheel, _stable_target(fusedops_targets)))
    assert "torch/CUDA DLLs must come from the user's torch" in failed["bundled"]


def test_a_dll_shipped_next_to_the_module_counts(tmp_path: Path, pe_files: dict[str, Path],
                                                  fusedops_targets: tuple[Target, ...]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cuda_module="uses_helper",
                            extra={"fusedops/helper.dll": pe_files["helper.dll"].read_bytes()})
    result = audit.audit_wheel(wheel, _stable_target(fusedops_targets))
    assert result.ok, _failed(result)
    copy = {"fusedops/c10_cuda.dll": pe_files["helper.dll"].read_bytes()}
    torch_copy = _fusedops_wheel(tmp_path / "t", pe_files, extra=copy)
    assert "c10_cuda.dll" in _failed(audit.audit_wheel(torch_copy, _stable_target(fusedops_targets)))["bundled"]


def test_dll_classification() -> None:
    assert audit.classify("KERNEL32.dll", 13, None, []) == "system"
    assert audit.classify("api-ms-win-crt-heap-l1-1-0.dll", 13, None, []) == "system"
    assert audit.classify("MSVCP140.dll", 13, None, []) == "vc-runtime"
    assert audit.classify("python3.dll", 13, None, []) == "python"
    assert audit.classify("c10_cuda.dll", 13, None, []) == "torch"
    assert audit.classify("cublas64_13.dll", 13, None, []) == "cuda"
    assert audit.classify("cublas64_12.dll", 13, None, []) is None
    assert audit.classify("nvcuda.dll", 13, None, []) == "cuda"
    assert audit.classify("cudart64_13.dll", None, None, []) is None  # CPU-only build
    assert audit.classify("helper-0123456789abcdef0123456789abcdef.dll", 13, None,
                          ["helper-0123456789abcdef0123456789abcdef.dll"]) == "bundled"
    assert dlls.unmangled("helper-0123456789abcdef0123456789abcdef.dll") == "helper.dll"


# --- delvewheel repair, on a wheel of real PE files -----------------------------------------------


def test_delvewheel_vendors_everything_but_torch_and_cuda(tmp_path: Path, pe_files: dict[str, Path],
                                                          fusedops_targets: tuple[Target, ...]) -> None:
    dll_dir = tmp_path / "dlls"
    dll_dir.mkdir()
    (dll_dir / "helper.dll").write_bytes(pe_files["helper.dll"].read_bytes())
    wheel = _fusedops_wheel(tmp_path / "built", pe_files, cuda_module="uses_helper")
    repaired = repair.delvewheel_repair([dll_dir])(wheel, tmp_path / "repaired")
    with zipfile.ZipFile(repaired) as zf:
        names = zf.namelist()
    vendored = [n for n in names if n.startswith("fusedops.libs/") and not n.endswith("/")]
    assert len(vendored) == 1 and dlls.unmangled(Path(vendored[0]).name) == "helper.dll"
    assert not any(dlls.is_torch(dlls.unmangled(Path(n).name)) or dlls.is_cuda(dlls.unmangled(Path(n).name))
                   for n in vendored)
    # The module now imports the renamed copy; torch's and CUDA's DLLs keep their names.
    extracted = tmp_path / "x"
    with zipfile.ZipFile(repaired) as zf:
        zf.extractall(extracted)
    info = pe.read(extracted / "fusedops" / "_C_cuda.pyd")
    assert Path(vendored[0]).name in info.dlls
    assert {"c10_cuda.dll", "cudart64_13.dll"} <= set(info.dlls)
    # And the repaired wheel passes the audit (the vendored DLL counts as bundled).
    result = audit.audit_wheel(repaired, _stable_target(fusedops_targets))
    assert result.ok, _failed(result)


def test_repair_and_audit_through_the_shared_publish_tail(tmp_path: Path, pe_files: dict[str, Path],
                                                          torch_site: Path,
                                                          fusedops_targets: tuple[Target, ...]) -> None:
    target = _stable_target(fusedops_targets)
    outputs = tail.Outputs(wheelhouse=tmp_path / "wheelhouse", build_root=tmp_path / "build")
    wheel = _fusedops_wheel(tmp_path / "built", pe_files)
    torch = audit.TorchDlls.scan(torch_site)
    with tail.staging(outputs, target) as stage:
        rep = tail.publish(target, wheel, stage, outputs, repair=repair.delvewheel_repair(),
                              audit=lambda w, t: audit.audit_wheel(w, t, torch=torch), mode="windows",
                              nvcc="13.0.88", started=0.0)
    assert rep.mode == "windows" and rep.wheel == "fusedops-0.1.0-cp310-abi3-win_amd64.whl"
    assert (outputs.target_dir(target) / rep.wheel).is_file()
    bad = _fusedops_wheel(tmp_path / "bad", pe_files, cuda_module="no_c10_cuda")
    with tail.staging(outputs, target) as stage, pytest.raises(AuditFailed):
        tail.publish(target, bad, stage, outputs, repair=repair.delvewheel_repair(),
                        audit=lambda w, t: audit.audit_wheel(w, t, torch=torch), mode="windows", nvcc=None,
                        started=0.0)


def test_delvewheel_stops_on_a_dll_it_cannot_find(tmp_path: Path, pe_files: dict[str, Path]) -> None:
    wheel = _fusedops_wheel(tmp_path, pe_files, cuda_module="mystery")
    with pytest.raises(CommandFailed, match="delvewheel could not repair the wheel"):
        repair.delvewheel_repair()(wheel, tmp_path / "out")
