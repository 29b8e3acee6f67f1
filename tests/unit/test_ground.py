"""Unit tests of command construction, the process runner, wheel rewriting and atomic files."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from ci import errors, fsutil, proc, toolenv, wheelmeta
from ci.builds import project_source, tail
from ci.linux import develop, host
from ci.toolchain import compiler_cache, toolkit
from ci.universe import matrix, targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def test_nvcc_version_is_parsed() -> None:
    text = "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0"
    assert toolkit.parse_nvcc_version(text) == "13.0.88"
    with pytest.raises(errors.FarmError, match="could not read the nvcc version"):
        toolkit.parse_nvcc_version("gcc (Debian 12.2.0-14) 12.2.0")


def test_install_key_depends_only_on_the_set_of_pins() -> None:
    a = toolkit.install_key(("a==1", "b==2"))
    assert a == toolkit.install_key(("b==2", "a==1"))
    assert a != toolkit.install_key(("a==1", "b==3"))


def test_pip_target_install_is_hash_pinned_binary_only(tmp_path: Path) -> None:
    cmd = toolkit.pip_install_target("toolkit-cu130", tmp_path)
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    assert "--only-binary=:all:" in cmd and "--no-deps" in cmd and "--require-hashes" in cmd
    assert cmd[cmd.index("--target") + 1] == str(tmp_path)
    assert cmd[cmd.index("-r") + 1].endswith("ci/requirements/toolkit-cu130.txt")


def test_cache_root_honours_overrides(tmp_path: Path) -> None:
    assert toolenv.cache_root({"FARM_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert toolenv.cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "cuda-ext-farm"


def test_farm_cuda_home_is_validated_where_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CUDA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(errors.UsageError, match=r"FARM_CUDA_HOME does not point at an existing folder"):
        toolkit.ensure_toolkit(matrix.get_cell("13.0"))
    monkeypatch.setenv("FARM_CUDA_HOME", str(tmp_path))
    with pytest.raises(errors.UsageError, match=r"FARM_CUDA_HOME holds no working nvcc"):
        toolkit.ensure_toolkit(matrix.get_cell("13.0"))


def test_repair_excludes_torch_and_cuda_runtime(tmp_path: Path) -> None:
    cmd = host.repair_command(tmp_path / "x.whl", tmp_path, 13)
    excluded = {cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--exclude"}
    assert {"libc10.so", "libc10_cuda.so", "libtorch_cuda.so", "libcudart.so.13"} <= excluded
    cpu = host.repair_command(tmp_path / "x.whl", tmp_path, None)
    assert "libcudart.so.13" not in cpu


def test_compiler_env_carries_the_project_build_env(tmp_path: Path) -> None:
    target = select(reading.load(ROOT), Selection(cuda="13.0", arch_list="9.0+PTX"))[0]
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    env = host.compiler_env(target, tk, max_jobs=3)
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0+PTX"
    assert env["CUDA_HOME"] == str(tmp_path / "cu13")
    assert env["MAX_JOBS"] == "3" and env["FUSEDOPS_CUDA"] == "1" and env["FUSEDOPS_NVCC_VERSION"] == "13.0.88"
    cpu = host.compiler_env(target, None, cpu=True, max_jobs=1)
    assert cpu == {"FUSEDOPS_CUDA": "0", "MAX_JOBS": "1"}
    classic = targets.targets_for(reading.load(CLASSIC))[0]
    assert host.compiler_env(classic, tk)["FORCE_CUDA"] == "1"


def test_launcher_wraps_both_compilers(tmp_path: Path) -> None:
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    env = compiler_cache.launcher_env("/usr/bin/ccache", tk, tmp_path / "wrap", tmp_path)
    assert env["PYTORCH_NVCC"] == f"/usr/bin/ccache {tmp_path / 'cu13' / 'bin' / 'nvcc'}"
    wrapper = Path(env["CXX"])
    assert wrapper.name == "g++" and "/usr/bin/ccache" in wrapper.read_text()
    assert wrapper.stat().st_mode & 0o111


def test_develop_compiles_for_what_it_is_asked_or_the_newest_arch() -> None:
    target = targets.default_target(reading.load(ROOT))
    assert develop.develop_arch_list(target, "8.6", release=False) == "8.6"  # PTX only where asked
    assert develop.develop_arch_list(target, "8.6+PTX", release=False) == "8.6+PTX"
    assert develop.develop_arch_list(target, None, release=True) == target.cell.arch_list
    if not develop.visible_gpu_archs():
        assert develop.develop_arch_list(target, None, release=False) == f"{target.cell.sass_archs[-1]}+PTX"


def test_logged_command_is_replayable() -> None:
    line = proc.format_command(["nvcc", "-o", "a b.o"], {"FARM_X_UNSET_VAR": "1 2"}, Path("/tmp"))
    assert line == "cd /tmp && FARM_X_UNSET_VAR='1 2' nvcc -o 'a b.o'"


def test_failed_command_raises_one_line_with_status() -> None:
    with pytest.raises(errors.CommandFailed, match=r"\(exit status 3\)") as info:
        proc.run([sys.executable, "-c", "raise SystemExit(3)"], what="the thing failed", hint="do this")
    assert info.value.line() == "error: the thing failed (exit status 3): do this"
    assert info.value.exit_code == errors.EXIT_COMMAND


def test_missing_program_is_a_missing_requirement() -> None:
    with pytest.raises(errors.MissingRequirement, match=r"program not found \(no-such-program-x\)"):
        proc.run(["no-such-program-x"])


def test_children_run_in_their_own_process_group() -> None:
    out = proc.run([sys.executable, "-c", "import os; print(os.getpgid(0), os.getpid())"], capture=True)
    pgid, pid = out.stdout.split()
    assert pgid == pid and int(pgid) != os.getpgid(0)


def test_streamed_lines_reach_the_callback() -> None:
    seen: list[str] = []
    proc.stream([sys.executable, "-c", "print('[1/2] a'); print('[2/2] b')"], seen.append, echo=False)
    assert [line.strip() for line in seen] == ["[1/2] a", "[2/2] b"]


# --- wheels ------------------------------------------------------------------------------------


def make_wheel(folder: Path, name: str = "demo_ext-1.0-cp312-cp312-manylinux_2_28_x86_64.whl",
               requires: tuple[str, ...] = ("torch", "numpy>=1")) -> Path:
    path = folder / name
    dist = "demo_ext-1.0.dist-info"
    meta = "Metadata-Version: 2.1\nName: demo-ext\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires) + "\nlong description\n"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("demo_ext/__init__.py", "x = 1\n")
        zf.writestr("demo_ext/_C.cpython-312-x86_64-linux-gnu.so", b"\x7fELF fake")
        zf.writestr(f"{dist}/METADATA", meta)
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nTag: cp312-cp312-manylinux_2_28_x86_64\n")
        zf.writestr(f"{dist}/RECORD", "")
    return path


def test_classic_wheel_gets_its_torch_pin_and_local_version(tmp_path: Path) -> None:
    out = wheelmeta.rewrite(make_wheel(tmp_path), tmp_path / "out", local_version="pt211cu130",
                            torch_pin="torch==2.11.*")
    assert out.name == "demo_ext-1.0+pt211cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    meta = wheelmeta.read_metadata(out)
    assert meta["Version"] == ["1.0+pt211cu130"]
    assert meta["Requires-Dist"] == ["torch==2.11.*", "numpy>=1"]
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        assert names[-1] == "demo_ext-1.0+pt211cu130.dist-info/RECORD"
        record = zf.read(names[-1]).decode().splitlines()
        for line in record[:-1]:
            name, digest, size = line.split(",")
            data = zf.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)


def test_missing_torch_requirement_is_added(tmp_path: Path) -> None:
    out = wheelmeta.rewrite(make_wheel(tmp_path, requires=("numpy",)), tmp_path / "out", local_version="pt213cu130",
                            torch_pin="torch==2.13.*")
    assert "torch==2.13.*" in wheelmeta.read_metadata(out)["Requires-Dist"]


def test_rewritten_wheels_are_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first = wheelmeta.rewrite(make_wheel(tmp_path), tmp_path / "a")
    time.sleep(1.1)
    second = wheelmeta.rewrite(make_wheel(tmp_path), tmp_path / "b")
    assert wheelmeta.sha256_file(first) == wheelmeta.sha256_file(second)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(errors.UsageError, match=r"SOURCE_DATE_EPOCH is not a whole number"):
        wheelmeta.rewrite(make_wheel(tmp_path), tmp_path / "c")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing-1.0-py3-none-any.whl", None, "wheel file does not exist"),
        ("empty-1.0-py3-none-any.whl", b"", "wheel file is empty"),
        ("notzip-1.0-py3-none-any.whl", b"garbage", "wheel file is not a zip archive"),
        ("not-a-wheel-name.whl", b"x", "not a wheel file name"),
    ],
)
def test_bad_wheel_files_are_one_line_errors(tmp_path: Path, name: str, content: bytes | None, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(wheelmeta.WheelError, match=message):
        wheelmeta.open_wheel(path)


# --- files -------------------------------------------------------------------------------------


def test_publish_works_across_file_systems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "a.whl"
    src.write_bytes(b"wheel")
    real_replace = os.replace

    def cross_device(a: str | Path, b: str | Path) -> None:
        if Path(a) == src:
            raise OSError(18, "Invalid cross-device link")
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", cross_device)
    dest = fsutil.publish_file(src, tmp_path / "out" / "a.whl")
    assert dest.read_bytes() == b"wheel" and not src.exists()
    assert [p.name for p in dest.parent.iterdir()] == ["a.whl"]


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_files_the_farm_writes_get_the_mode_the_umask_gives(tmp_path: Path, umask: int) -> None:
    """As open() would make them (tempfile.mkstemp's 0600 is not kept), also a file published from another file
    system (/dev/shm, a tmpfs, where the machine has one): it keeps its source's mode, as a rename does."""
    old = os.umask(umask)
    try:
        written = [fsutil.atomic_write_text(tmp_path / "a.txt", "a"), fsutil.atomic_write_json(tmp_path / "b.json", 1)]
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK) and shm.stat().st_dev != tmp_path.stat().st_dev:
            src = shm / f"farm-test-{os.getpid()}.whl"
            src.write_bytes(b"wheel")
            written.append(fsutil.publish_file(src, tmp_path / "out" / "c.whl"))
            assert not src.exists()
    finally:
        os.umask(old)
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {
        p.name: oct(0o666 & ~umask) for p in written}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json", *(["out"] if len(written) > 2 else [])]


def test_unwritable_folder_names_the_option_and_variable(tmp_path: Path) -> None:
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(errors.MissingRequirement, match=r"--build-dir DIR or FARM_BUILD_DIR=DIR"):
            fsutil.writable_dir(locked / "build", "build folder", "--build-dir", "FARM_BUILD_DIR")
    finally:
        locked.chmod(0o700)


def test_lock_serialises_and_says_what_it_waits_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    order: list[str] = []
    lock = tmp_path / "t.lock"

    def hold() -> None:
        with fsutil.locked(lock, "the build of t"):
            order.append("first in")
            time.sleep(1.0)
            order.append("first out")

    thread = threading.Thread(target=hold)
    thread.start()
    time.sleep(0.3)
    with fsutil.locked(lock, "the build of t"):
        order.append("second in")
    thread.join()
    assert order == ["first in", "first out", "second in"]


def test_outputs_cascade_option_then_variable_then_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FARM_WHEELHOUSE", raising=False)
    monkeypatch.delenv("FARM_BUILD_DIR", raising=False)
    assert tail.Outputs.resolve(tmp_path).wheelhouse == tmp_path / "wheelhouse"
    monkeypatch.setenv("FARM_WHEELHOUSE", str(tmp_path / "env"))
    assert tail.Outputs.resolve(tmp_path).wheelhouse == tmp_path / "env"
    assert tail.Outputs.resolve(tmp_path, wheelhouse=str(tmp_path / "opt")).wheelhouse == tmp_path / "opt"


def test_stale_staging_of_dead_processes_is_found(tmp_path: Path) -> None:
    (tmp_path / "t-pid999999999").mkdir()
    (tmp_path / f"t-pid{os.getpid()}").mkdir()
    assert [p.name for p in fsutil.stale_staging(tmp_path)] == ["t-pid999999999"]


def test_sources_are_synced_incrementally_without_build_outputs(tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "csrc").mkdir(parents=True)
    (src / "csrc" / "a.cpp").write_text("int a;")
    (src / "setup.py").write_text("")
    (src / "build" / "farm").mkdir(parents=True)
    (src / "build" / "farm" / "junk.o").write_text("x")
    dest = tmp_path / "copy"
    assert project_source.sync_source(src, dest, (src / "build" / "farm",)) == 2
    assert not (dest / "build").exists()
    assert project_source.sync_source(src, dest) == 0
    (src / "csrc" / "a.cpp").unlink()
    project_source.sync_source(src, dest)
    assert not (dest / "csrc" / "a.cpp").exists()


def test_the_target_of_a_wheel_is_read_from_its_name() -> None:
    from ci import options

    sel = options.selection_from_wheel("classic_ext-0.3.0+pt2.11.cu130-cp312-cp312-manylinux_2_34_x86_64.whl", None)
    assert (sel.torch, sel.cuda, sel.python) == ("2.11", "cu130", "3.12")
    for older in ("0.3.0+pt211cu130", "0.3.1.dev1+pt2.11.cu130.g1a2b3c4"):  # the older label; setuptools-scm's part
        sel = options.selection_from_wheel(f"classic_ext-{older}-cp312-cp312-manylinux_2_34_x86_64.whl", None)
        assert (sel.torch, sel.cuda, sel.python) == ("2.11", "cu130", "3.12"), older
    target = select(reading.load(CLASSIC), sel)[0]
    assert target.id == "classic_ext-torch2.11-cu130-cp312-linux_x86_64"
    stable = options.selection_from_wheel("fusedops-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl", None)
    assert stable.empty
    cu124 = options.selection_from_wheel("fusedops-0.1.0+cu124-cp310-abi3-manylinux_2_34_x86_64.whl", None)
    assert cu124.cuda == "cu124"
