"""The audit's view of a wheel's libraries by name, on wheels of real ELF libraries (gcc, and the cell's nvcc for
one with CUDA code): the ``module-suffix`` check holds a Python suffix only where an importer finds the module by
it, and a ``cuda-code`` failure in a wheel that pairs CPU and CUDA libraries names the ``cuda-libraries`` globs
that pass."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ci.audit import gpu_code, wheel_audit
from ci.audit.checks import Check
from ci.universe import targets
from ci.universe.project import reading
from tests.unit.audit import cudabuild

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def classic_target() -> targets.Target:
    """classic_ext's first target: torch 2.11, CUDA 13.0, CPython 3.11, x86_64; every library must hold CUDA code
    (cuda-libraries = ["*"], the default)."""
    return targets.targets_for(reading.load(CLASSIC))[0]


def abi3_target() -> targets.Target:
    return targets.default_target(reading.load(ROOT))


def audited(tmp_path: Path, target: targets.Target, names: list[str]) -> dict[str, Check]:
    """The audit (as a CPU build) of a wheel for ``target`` holding a real host library at each of ``names``: its
    checks by name."""
    files = {name: cudabuild.host_library(tmp_path / "lib" / name) for name in names}
    wheel = cudabuild.wheel(tmp_path, f"pkg-1.0-{target.wheel_tag_prefix}-manylinux_2_28_x86_64.whl", files)
    result = wheel_audit.audit_wheel(wheel, target, None, cuda=False, abi3audit=False)
    return {c.name: c for c in result.checks}


def test_a_classic_wheel_of_libraries_without_a_python_suffix_passes(tmp_path: Path) -> None:
    """BuildExtension.with_options(no_python_abi_suffix=True): libraries for torch.ops.load_library (and modules
    CPython imports as NAME.so): nothing to fix, no key to set."""
    checks = audited(tmp_path, classic_target(), ["pkg/_ops.so", "pkg/_image_ops.so", "pkg/_C.so"])
    suffix = checks["module-suffix"]
    assert suffix.ok, suffix
    assert suffix.detail == "3 extension libraries (3 without a Python suffix: imported as NAME.so, or loaded by path)"
    # The target's own suffix, and the stable ABI's (CPython 3.11 imports both), pass beside them.
    mixed = audited(tmp_path / "mixed", classic_target(),
                    ["pkg/_ops.so", "pkg/_C.cpython-311-x86_64-linux-gnu.so", "pkg/_D.abi3.so"])
    assert mixed["module-suffix"].ok, mixed["module-suffix"]


def test_a_classic_wheel_refuses_only_a_suffix_its_cpython_does_not_import(tmp_path: Path) -> None:
    checks = audited(tmp_path, classic_target(), ["pkg/_ops.so", "pkg/_C.cpython-310-x86_64-linux-gnu.so",
                                                   "pkg/_D.cpython-311-aarch64-linux-gnu.so"])
    suffix = checks["module-suffix"]
    assert not suffix.ok
    assert suffix.detail == (
        "not named for cp311-cp311: pkg/_C.cpython-310-x86_64-linux-gnu.so is named for CPython 3.10 "
        "(x86_64-linux-gnu), so CPython 3.11 (x86_64) does not import it; pkg/_D.cpython-311-aarch64-linux-gnu.so "
        "is named for CPython 3.11 (aarch64-linux-gnu), so CPython 3.11 (x86_64) does not import it: build it with "
        "CPython 3.11 for x86_64, as the target says")
    assert audited(tmp_path / "ok", classic_target(), ["pkg/_ops.abi3.so"])["module-suffix"].ok


def test_an_abi3_wheel_takes_the_stable_suffix_or_none_and_refuses_one_cpythons(tmp_path: Path) -> None:
    target = abi3_target()
    assert audited(tmp_path, target, ["pkg/_C.abi3.so", "pkg/_ops.so"])["module-suffix"].ok
    one = audited(tmp_path / "one", target, ["pkg/_C.abi3.so", "pkg/_ops.cpython-312-x86_64-linux-gnu.so"])
    suffix = one["module-suffix"]
    assert not suffix.ok
    assert suffix.detail == (
        f"not named for {target.wheel_tag_prefix}: pkg/_ops.cpython-312-x86_64-linux-gnu.so is named for CPython "
        "3.12 (x86_64-linux-gnu) alone, while the wheel installs on every CPython from its floor: build the "
        "extension with py_limited_api=True (setuptools names it .abi3.so), or without a suffix "
        "(BuildExtension.with_options(no_python_abi_suffix=True))")


# --- cuda-code: the cuda-libraries that pass ------------------------------------------------------------------

@pytest.mark.parametrize(("libraries", "globs"), [
    ([("p/_C_cpu.so", False), ("p/_C_cuda.so", True), ("p/ops_cpu.so", False), ("p/ops_cuda.so", True)],
     ("*_cuda.*",)),
    ([("p/cpu_ops.so", False), ("p/cuda_ops.so", True), ("p/cuda_image.so", True)], ("*cuda_*",)),
    ([("p/_C.abi3.so", True), ("p/_ops.abi3.so", False)], ("_C.*",)),  # no shared part: the names
    ([("a/_C.so", True), ("b/_C.so", False)], ("a/_C.*",)),  # one name in two folders: the paths
    ([("p/_C.so", False), ("p/_ops.so", False)], None),  # none holds CUDA code: the build is the cause
    ([("p/_C.so", True)], None),  # none lacks it: nothing to advise
])
def test_the_globs_match_exactly_the_libraries_that_hold_cuda_code(libraries: list[tuple[str, bool]],
                                                                 globs: tuple[str, ...] | None) -> None:
    project = classic_target().project
    assert gpu_code.cuda_library_globs(libraries, project) == globs
    listed = dataclasses.replace(project, cpu_libraries=("b/*",))  # a cpu-libraries entry is never checked
    assert gpu_code.cuda_library_globs([("a/_C.so", True), ("b/_C.so", False)], listed) is None


def test_the_cuda_code_advice_names_the_globs_and_they_pass_on_the_wheel(tmp_path: Path) -> None:
    """A project that pairs ``*_cpu`` and ``*_cuda`` libraries, loaded by path: the failed ``cuda-code`` check
    names the cuda-libraries that pass; applied to [tool.cuda-ext-farm], the audit's cuda-code checks pass and
    still check every library with CUDA code."""
    target = classic_target()
    files = {f"pkg/{name}_cpu.so": cudabuild.host_library(tmp_path / "lib" / f"{name}_cpu.so")
             for name in ("ops", "image")}
    files |= {f"pkg/{name}_cuda.so": cudabuild.shared_library(tmp_path / "lib" / f"{name}_cuda.so", target.cell)
              for name in ("ops", "image")}
    wheel = cudabuild.wheel(tmp_path, f"pkg-1.0-{target.wheel_tag_prefix}-manylinux_2_28_x86_64.whl", files)
    first = wheel_audit.audit_wheel(wheel, target, None, abi3audit=False)
    failed = {c.name: c.detail for c in first.failures() if c.name.startswith("cuda-code:")}
    assert sorted(failed) == ["cuda-code:pkg/image_cpu.so", "cuda-code:pkg/ops_cpu.so"]
    advice = failed["cuda-code:pkg/ops_cpu.so"]
    assert advice.startswith("holds no CUDA code although this is a CUDA build (cu130), and other libraries of the "
                             "wheel do. If this one is meant to be CPU-only, set cuda-libraries = ")
    table = re.search(r"cuda-libraries = (\[[^]]*\])", advice)
    assert table is not None, advice
    globs = json.loads(table.group(1))  # a TOML array of basic strings, as the user pastes it
    applied = dataclasses.replace(target, project=dataclasses.replace(target.project, cuda_libraries=tuple(globs)))
    second = wheel_audit.audit_wheel(wheel, applied, None, abi3audit=False)
    cuda_code = {c.name: c.ok for c in second.checks if c.name.startswith("cuda-code:")}
    assert cuda_code == {"cuda-code:pkg/image_cuda.so": True, "cuda-code:pkg/ops_cuda.so": True}
    assert all(c.ok for c in second.checks if c.name.startswith(("cuda-runtime:", "module-suffix")))
