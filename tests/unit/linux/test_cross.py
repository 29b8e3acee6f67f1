"""linux_aarch64 targets: which exist, how they are selected, what the cross build is given (ci/linux/cross.py).

The cross build and the qemu import of a real project run in tests/integration/test_cross_build.py (extended: they
install torch's aarch64 build, GBs); here the target model, the refusals and the pieces that need no torch.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci.errors import MissingRequirement, TargetError, UsageError
from ci.linux import cross, routes
from ci.universe import matrix, targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def write_project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "my-ext"\nversion = "1.0"\n\n' + table)
    (tmp_path / "setup.py").write_text("")
    return tmp_path


def test_stable_projects_get_an_aarch64_target_per_cuda13_cell() -> None:
    config = reading.load(ROOT)
    arm = targets.targets_for(config, "linux", "aarch64")
    assert [t.cell.name for t in arm if t.abi3] == [c.name for c in matrix.CELLS if c.aarch64]
    assert {t.python for t in arm if not t.abi3} == {"3.13t", "3.14t"}  # abi3 does not cover them
    assert all(t.cell.cuda_major == 13 and t.platform == "linux_aarch64" and t.cross for t in arm)
    assert "fusedops-stable-cu130-cp310abi3-linux_aarch64" in {t.id for t in arm}
    every = targets.platform_targets(config, "linux")
    assert {t.id for t in every} == {t.id for t in (*targets.targets_for(config, "linux"), *arm)}
    assert len({t.id for t in every}) == len(every)


def test_classic_aarch64_targets_are_only_torch_releases_with_aarch64_cuda_builds(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\ntorch = ["2.10", "2.11"]\n'))
    arm = targets.targets_for(config, "linux", "aarch64")
    assert arm and all(matrix.get_torch(t.torch).aarch64 and t.cell.aarch64 for t in arm)
    assert {t.torch_minor for t in arm} == {"2.11"}
    assert {t.torch_minor for t in targets.targets_for(config, "linux")} == {"2.10", "2.11"}
    only_cuda12 = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\ntorch = ["2.10"]\n'))
    assert targets.archs_of(only_cuda12, "linux") == ("x86_64",)


def test_archs_opts_a_project_out_and_is_checked(tmp_path: Path) -> None:
    config = reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\nabi = "stable"\narchs = ["x86_64"]\n'))
    assert targets.archs_of(config, "linux") == ("x86_64",)
    assert all(not t.cross for t in targets.platform_targets(config, "linux"))
    with pytest.raises(TargetError, match=r"not built for aarch64 \(x86_64\)"):
        targets.targets_for(config, "linux", "aarch64")
    with pytest.raises(UsageError, match=r"archs names an architecture the farm does not build \(arm64\)"):
        reading.load(write_project(tmp_path, '[tool.cuda-ext-farm]\narchs = ["arm64"]\n'))


def test_arch_selection_and_its_refusals() -> None:
    config = reading.load(ROOT)
    chosen, *threaded = select(config, Selection(cuda="13.2", arch="aarch64"))
    assert [t.python for t in threaded] == ["3.13t", "3.14t"]
    assert chosen.id == "fusedops-stable-cu132-cp310abi3-linux_aarch64"
    by_id = select(config, Selection(target_ids=(chosen.id,)))
    assert by_id == (chosen,)
    with pytest.raises(TargetError, match=r"cell cu124 has no aarch64 toolkit"):
        select(config, Selection(cuda="12.4", arch="aarch64"))
    with pytest.raises(TargetError, match=r"no windows wheels for this architecture \(aarch64\)"):
        targets.targets_for(config, "windows", "aarch64")


def test_missing_cross_compiler_is_one_line_naming_the_package() -> None:
    with pytest.raises(MissingRequirement) as info:
        cross.find_compiler({"FARM_AARCH64_CXX": "no-such-aarch64-g++"})
    line = info.value.line()
    assert "no aarch64 cross compiler" in line and "g++-aarch64-linux-gnu" in line and "\n" not in line


def test_a_compiler_for_another_machine_is_refused(tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++")
    with pytest.raises(MissingRequirement, match="does not target aarch64"):
        cross.find_compiler({"FARM_AARCH64_CXX": gxx})


def test_cross_build_environment() -> None:
    stable = select(reading.load(ROOT), Selection(cuda="13.0", arch="aarch64"))[0]
    classic = next(t for t in targets.targets_for(reading.load(CLASSIC), "linux", "aarch64") if t.python == "3.12")
    compiler = cross.CrossCompiler("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "12.2.0")
    for target, suffix in ((stable, None), (classic, ".cpython-312-aarch64-linux-gnu.so")):
        env = cross.build_env(target, compiler, Path("/rt"), Path("/site"), Path(__file__).parent)
        assert env["_PYTHON_HOST_PLATFORM"] == "linux-aarch64" and env["CC"] == compiler.cc
        assert env["LDFLAGS"].startswith('"-L/site/torch/lib" "-L/rt/lib"')
        assert env.get("SETUPTOOLS_EXT_SUFFIX") == suffix
        Path(env["CMAKE_TOOLCHAIN_FILE"]).unlink()
    newer = cross.CrossCompiler("c", "x", f"{matrix.MAX_GCC['13.0'] + 1}.1")
    with pytest.raises(MissingRequirement, match=r"newer than CUDA 13\.0 accepts"):
        cross.check_compiler(stable.cell, newer)


def test_torch_requirements_evaluate_markers_for_aarch64_and_apply_overrides(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.11.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torch-2.11.0.dist-info/METADATA", "\n".join([
            "Metadata-Version: 2.1", "Name: torch", "Version: 2.11.0",
            "Requires-Dist: filelock",
            'Requires-Dist: nvidia-nccl-cu13==2.28.9; platform_system == "Linux"',
            'Requires-Dist: pywin32; platform_system == "Windows"',
            'Requires-Dist: only-x86==1; platform_machine == "x86_64"',
            'Requires-Dist: optree>=0.13.0; extra == "optree"',
        ]) + "\n")
    assert cross.torch_requirements(wheel, "3.11") == ["filelock", "nvidia-nccl-cu13==2.32.3"]


def test_routes_name_the_floor_and_the_github_runner() -> None:
    config = reading.load(ROOT)
    arm = select(config, Selection(cuda="13.0", arch="aarch64"))[0]
    x86 = targets.default_target(config)
    assert "ubuntu-24.04-arm" in routes.route(arm).github and "cross" in routes.route(arm).local
    assert routes.route(x86).release_floor == "manylinux_2_28"
    assert routes.route(x86).local_glibc == routes.host_glibc()


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None, reason="no aarch64 cross compiler")
def test_cross_glibc_is_read_from_the_sysroot() -> None:
    found = routes.cross_glibc()
    assert found.count(".") == 1 and found.split(".")[0] == "2"
    libc = subprocess.run(["aarch64-linux-gnu-gcc", "-print-file-name=libc.so.6"], capture_output=True, text=True)
    assert found.encode() in Path(libc.stdout.strip()).resolve().read_bytes()


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None or shutil.which("gcc") is None,
                    reason="needs gcc and the aarch64 cross gcc")
def test_the_audit_names_a_library_built_for_another_machine(tmp_path: Path) -> None:
    from ci.audit import wheel_audit

    source = tmp_path / "op.c"
    source.write_text("int op(int x) { return x + 1; }\n")
    built = {}
    for arch, cc in (("x86_64", "gcc"), ("aarch64", "aarch64-linux-gnu-gcc")):
        built[arch] = tmp_path / f"op-{arch}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(built[arch]), str(source)], check=True)
    ok = wheel_audit.check_machine([built["aarch64"]], tmp_path, "aarch64")
    assert ok.ok and "EM_AARCH64" in ok.detail
    bad = wheel_audit.check_machine([built["aarch64"], built["x86_64"]], tmp_path, "aarch64")
    assert not bad.ok and "op-x86_64.so (EM_X86_64)" in bad.detail
    assert wheel_audit.check_machine([built["x86_64"]], tmp_path, "x86_64").ok


def test_a_stand_in_is_selectable_by_its_id_and_replaces_its_release_cell() -> None:
    config = reading.load(ROOT)
    release = next(t for t in targets.platform_targets(config, "linux") if t.cell.name == "cu128")
    local = targets.stand_in(release)
    assert local is not None and local.cell.name == "cu124" and local.cell.stand_in_for == "cu128"
    assert local.id == "fusedops-stable-cu124-cp310abi3-linux_x86_64"
    assert "cu124" not in {t.cell.name for t in targets.platform_targets(config, "linux")}
    assert select(config, Selection(target_ids=(local.id,))) == (local,)
    assert targets.stand_in(targets.default_target(config)) is None


def test_the_dry_run_says_why_it_imports_an_aarch64_wheel_under_qemu() -> None:
    import platform

    from ci.release import install_checks
    from ci.release.manifest import ReleaseFile

    if platform.machine() != "x86_64":
        pytest.skip("an x86_64 machine's view")

    def wheel(tag: str) -> ReleaseFile:
        return ReleaseFile(name="w.whl", sha256="", size=1, kind="wheel", pypi=False, pypi_reason="", os="linux",
                           python="3.10", tags=(tag,))

    reason = install_checks.host_can_run(wheel("cp310-abi3-manylinux_2_31_aarch64"), "3.11")
    assert reason is not None and "aarch64 wheel" in reason and "import-qemu" in reason
    assert install_checks.host_can_run(wheel("cp310-abi3-manylinux_2_31_x86_64"), "3.11") is None


def test_a_debian_toolkit_cell_keeps_its_base_glibc_and_others_get_the_sysroot() -> None:
    from ci.linux import container

    debian, pypi = matrix.get_cell("12.4"), matrix.get_cell("13.0")
    assert not container.uses_sysroot(debian) and container.uses_sysroot(pypi)
    assert routes.container_glibc(debian).startswith(routes.DEBIAN_GLIBC["trixie"])
    config = reading.load(ROOT)
    release12 = next(t for t in targets.platform_targets(config, "linux") if t.cell.name == "cu128")
    assert "stand-in cu124" in routes.route(release12).local and "manylinux_2_28" in routes.route(release12).github


def test_the_cross_build_is_composed_like_every_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The aarch64 build's environment (ci/linux/host.py _build_env): the caller's LDFLAGS after the cross build's
    -L folders, the project's NVCC_APPEND_FLAGS before the farm's, and the nvcc wrapper with the project's
    project-arch-flags in front of the x86_64 nvcc that cross-compiles the device code."""
    from ci.builds import arch_flags
    from ci.linux import host
    from ci.toolchain import envs, toolkit

    monkeypatch.setenv("LDFLAGS", "-L/caller/lib")
    target = select(reading.load(ROOT), Selection(cuda="13.0", arch="aarch64"))[0]
    target = dataclasses.replace(target, project=dataclasses.replace(
        target.project, arch_flags="replace", build_env={**target.project.build_env, "NVCC_APPEND_FLAGS": "-DOWN"}))
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    (tk.cuda_home / "bin").mkdir(parents=True)
    setup = cross.CrossSetup(cross.CrossCompiler("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "12.2.0"),
                             Path("/rt"), Path("/site"))
    env = host._build_env(target, tk, envs.PythonEnv(tmp_path / "env"), tmp_path / "src", tmp_path, setup, None,
                          "1700000000", 2)
    assert env["LDFLAGS"] == '"-L/site/torch/lib" "-L/rt/lib" -L/caller/lib'
    assert env["NVCC_APPEND_FLAGS"].startswith(f"-DOWN -objtemp --threads 0 -frandom-seed={target.id}")
    assert env["PYTORCH_NVCC"].endswith(f"-I {arch_flags.WRAPPER}")
    assert env["FARM_NVCC_NEXT"].endswith("/cu13/bin/nvcc") and env["FARM_NVCC_ARCH_MODE"] == "replace"
    assert env["CC"] == "aarch64-linux-gnu-gcc" and env["SOURCE_DATE_EPOCH"] == "1700000000"
    # setuptools' own compile (use_ninja=False) runs CUDA_HOME/bin/nvcc: the wrapper there too (ci/nvcc/shim.py)
    assert env["CUDA_HOME"] == str(tmp_path / host.NVCC_SHIM) and env["CUDA_PATH"] == str(tk.cuda_home)
    assert f"-I {arch_flags.WRAPPER}" in (tmp_path / host.NVCC_SHIM / "bin" / "nvcc").read_text()
