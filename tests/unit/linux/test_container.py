"""Unit tests of image specs, tags and the docker/cibuildwheel command lines (no engine needed)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from ci import errors
from ci.builds import tail
from ci.linux import container as wheels
from ci.linux import debian, images, shell
from ci.universe import matrix, targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

CELL = matrix.get_cell("13.0")
BASE = f"{images.BASE_REPO}:bookworm"
ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def test_tag_is_stable_and_changes_with_the_cell() -> None:
    a = images.spec_for(CELL, BASE)
    assert a.tag == images.spec_for(CELL, BASE).tag
    other = dataclasses.replace(CELL, torch="2.12.0")
    assert images.spec_for(other, BASE).tag != a.tag
    assert a.tag.startswith(f"{images.IMAGE_REPO}:cu130-")


def test_each_cell_gets_its_own_debian_suite() -> None:
    assert images.spec_for(matrix.get_cell("12.4"), BASE).base_image == f"{images.BASE_REPO}:trixie"
    assert images.base_image_for(CELL, {"FARM_BASE_IMAGE": images.BASE_REPO}) == BASE
    assert images.base_image_for(CELL, {}) == CELL.base_image


def test_debian_toolkit_cell_refuses_a_manylinux_base() -> None:
    with pytest.raises(images.UsageError, match="Debian packages"):
        images.spec_for(matrix.get_cell("12.4"), matrix.MANYLINUX_2_28)


def test_the_cuda_12_release_cell_installs_nvidias_rpms_on_the_manylinux_base_of_its_architecture() -> None:
    cu128 = matrix.get_cell("12")
    assert (cu128.name, cu128.toolkit.kind, cu128.release) == ("cu128", "nvidia-repo", True)
    assert cu128.sass_archs[-2:] == ("10.0", "12.0") and cu128.ptx_arch == "12.0"
    x86 = images.spec_for(cu128, arch="x86_64")
    args = dict(x86.build_args)
    assert (x86.base_image, args["OS_FAMILY"], args["TOOLKIT_KIND"]) == (matrix.MANYLINUX_2_28, "manylinux",
                                                                        "nvidia-repo")
    assert args["TOOLKIT_REPO"] == "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo"
    assert "cuda-nvcc-12-8-12.8.93-1" in args["TOOLKIT_PACKAGES"].split()
    assert args["OS_PACKAGES"].split()[0] == "gcc-toolset-13-gcc-c++"
    arm = images.spec_for(cu128, arch="aarch64")
    assert arm.base_image == matrix.MANYLINUX_2_28_AARCH64
    assert dict(arm.build_args)["TOOLKIT_REPO"].endswith("/rhel8/sbsa/cuda-rhel8.repo")
    assert arm.tag.startswith(f"{images.IMAGE_REPO}:cu128-aarch64-") and arm.tag != x86.tag
    # The stand-in: Debian's 12.4, no release cell, named by the release cell's errors.
    stand_in = matrix.stand_in_of(cu128)
    assert stand_in is not None and stand_in.name == "cu124" and not stand_in.release
    dockerfile = images.DOCKERFILE.read_text()
    branch = dockerfile[dockerfile.index('"${TOOLKIT_KIND}" = nvidia-repo'):]
    branch = branch[:branch.index("else")]
    # The CA bundle reaches curl and dnf only as the build secret.
    assert "--cacert /run/secrets/cacert" in branch and "sslcacert=/run/secrets/cacert" in branch
    assert "gpgcheck=1" in branch and "${TOOLKIT_PACKAGES}" in branch and "COPY" not in branch


def test_an_unreachable_nvidia_repository_stops_with_one_line_naming_the_stand_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = images.spec_for(matrix.get_cell("12"), arch="x86_64")
    with pytest.raises(images.ImageError) as info:
        images.check_toolkit_source(spec, probe=lambda url: "Name or service not known")
    assert info.value.line() == ("error: cell cu128 takes CUDA 12.8 from NVIDIA's repository, which this machine "
                                 "cannot reach (Name or service not known): build its local stand-in with --cuda 12.4")
    images.check_toolkit_source(spec, probe=lambda url: "")  # reachable: nothing to say
    images.check_toolkit_source(images.spec_for(CELL, BASE), probe=lambda url: "unreachable")  # PyPI cell: not asked
    # ensure_image asks before pulling the base or building: no docker build error, one line.
    monkeypatch.setattr(images, "require_engine", lambda: None)
    monkeypatch.setattr(images, "image_exists", lambda tag: False)
    monkeypatch.setattr(images, "probe_url", lambda url, ca=None, timeout=15.0: "timed out")
    monkeypatch.setattr(images, "ensure_base", lambda base: pytest.fail("the base was pulled"))
    with pytest.raises(images.ImageError, match=r"cannot reach \(timed out\): build its local stand-in with "
                                                r"--cuda 12\.4$"):
        images.ensure_image(spec)
    # On the Debian base (the air-gapped path) the release cell cannot be built at all: the same fix.
    with pytest.raises(images.UsageError) as debian:
        images.spec_for(matrix.get_cell("12"), BASE)
    assert "\n" not in debian.value.line() and "build its local stand-in with --cuda 12.4" in debian.value.line()


def test_build_command_passes_the_ca_as_a_secret(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("SECRET-CA")
    cmd = images.build_command(images.spec_for(CELL, BASE), ca)
    assert f"id=cacert,src={ca}" in cmd
    assert not any("SECRET-CA" in part for part in cmd)
    assert f"BASE_IMAGE={BASE}" in cmd


def test_build_args_pin_the_toolkit_and_compiler() -> None:
    spec = images.spec_for(CELL, BASE)
    args = dict(spec.build_args)
    assert "nvidia-cuda-nvcc==13.0.88" in args["TOOLKIT_PACKAGES"]
    files = spec.context_files()
    assert "nvidia-cuda-nvcc==13.0.88" in files["toolkit.txt"].read_text()
    assert "--hash=sha256:" in files["image.txt"].read_text() and "headers.txt" in files
    assert "g++-12=12.2.0-14+deb12u1" in args["OS_PACKAGES"]
    assert args["PYTHON_TAG"] == "cp311-cp311" and args["OS_FAMILY"] == "debian"


def job_for(target: targets.Target, tmp_path: Path) -> wheels.ContainerBuild:
    spec = images.spec_for(target.cell, BASE)
    outputs = tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "build")
    return wheels.ContainerBuild(target=target, spec=spec, image=spec.tag, outputs=outputs, job="job1")


def test_cibuildwheel_environment_of_a_stable_target(tmp_path: Path) -> None:
    target = targets.default_target(reading.load(ROOT))
    job = job_for(target, tmp_path)
    python = wheels.build_python(target, job.spec)
    assert python == "3.11"  # the Debian base's Python builds the cp310-abi3 wheel
    volume = wheels.torch_volume(target, python)
    env = wheels.cibuildwheel_env(job, python, volume, tmp_path / "ca.crt")
    assert env["CIBW_BUILD"] == "cp311-manylinux_x86_64"
    assert env["CIBW_MANYLINUX_X86_64_IMAGE"] == job.spec.tag
    assert "--exclude libcudart.so.13" in env["CIBW_REPAIR_WHEEL_COMMAND"]
    assert "--exclude libc10_cuda.so" in env["CIBW_REPAIR_WHEEL_COMMAND"]
    assert f"{tmp_path / 'ca.crt'}:{wheels.CONTAINER_CA}:ro" in env["CIBW_CONTAINER_ENGINE"]
    assert f"--volume={volume}:{wheels.TORCH_MOUNT}:ro" in env["CIBW_CONTAINER_ENGINE"]
    assert "--label=farm.job=job1" in env["CIBW_CONTAINER_ENGINE"]
    assert 'TORCH_CUDA_ARCH_LIST="7.5;8.0;8.6;9.0;10.0;12.0"' in env["CIBW_ENVIRONMENT"]
    # The project's own build-env reaches the build, placeholders filled from the cell.
    assert 'FUSEDOPS_CUDA="1"' in env["CIBW_ENVIRONMENT"]
    assert 'FUSEDOPS_NVCC_VERSION="13.0.88"' in env["CIBW_ENVIRONMENT"]
    # torch is never installed by pip in the build or the test venv: both see the read-only volume; the build
    # tools are in the image already.
    assert "pip install" not in env["CIBW_BEFORE_BUILD"]
    assert "_farm_torch.pth" in env["CIBW_BEFORE_BUILD"] and "_farm_torch.pth" in env["CIBW_BEFORE_TEST"]
    assert "CIBW_TEST_REQUIRES" not in env
    # In cibuildwheel's empty test folder: the smoke command names its script by {project}, then the origin check.
    assert env["CIBW_TEST_COMMAND"].startswith(
        "pip check && python '{project}/package/tests/smoke_import.py' && python -c ")
    assert "cd " not in env["CIBW_TEST_COMMAND"] and env["CIBW_TEST_COMMAND"].endswith(" fusedops")
    assert "-frandom-seed=fusedops-stable-cu130-cp310abi3-linux_x86_64" in env["CIBW_ENVIRONMENT"]
    no_ca = wheels.cibuildwheel_env(job, python, volume, None)
    assert "PIP_CERT" not in no_ca["CIBW_ENVIRONMENT"] and ":ro" not in no_ca["CIBW_CONTAINER_ENGINE"].replace(
        f"{wheels.TORCH_MOUNT}:ro", "").replace(f"{wheels.NVCC_TOOLS_MOUNT}:ro", "").replace(
        f"{wheels.BUILDSITE_MOUNT}:ro", "")


def test_the_container_build_alone_sees_cuda_available(tmp_path: Path) -> None:
    """ci/buildsite is mounted read-only and first on the build's PYTHONPATH (CIBW_ENVIRONMENT); cibuildwheel
    hands that environment to its repair and test steps too, and there PYTHONPATH is empty. With the project's
    cuda-available-in-build = false: no mount, no PYTHONPATH anywhere."""
    from cibuildwheel.environment import parse_environment

    target = select(reading.load(CLASSIC), Selection(cuda="13.0", python="3.11"))[0]
    job = job_for(target, tmp_path)
    python = wheels.build_python(target, job.spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)
    mount = f"--volume={ROOT / 'ci' / 'buildsite'}:{wheels.BUILDSITE_MOUNT}:ro"
    assert env["CIBW_CONTAINER_ENGINE"].count(mount) == 1
    container = {"PATH": "/usr/bin:/bin"}  # the image's own environment: no PYTHONPATH
    build = parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary(container)
    assert build["PYTHONPATH"] == wheels.BUILDSITE_MOUNT and build["FORCE_CUDA"] == "1"
    tests = parse_environment(env["CIBW_TEST_ENVIRONMENT"]).as_dictionary(build)
    assert tests["PYTHONPATH"] == ""
    assert " && PYTHONPATH= auditwheel repair " in env["CIBW_REPAIR_WHEEL_COMMAND"]
    # The project's own PYTHONPATH (build-env) follows the farm's folder.
    own = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, "PYTHONPATH": "/project/tools"}))
    own_env = wheels.cibuildwheel_env(job_for(own, tmp_path), python, wheels.torch_volume(own, python), None)
    assert parse_environment(own_env["CIBW_ENVIRONMENT"]).as_dictionary(container)["PYTHONPATH"] == \
        f"{wheels.BUILDSITE_MOUNT}:/project/tools"
    off = dataclasses.replace(target, project=dataclasses.replace(target.project, cuda_available_in_build=False))
    off_env = wheels.cibuildwheel_env(job_for(off, tmp_path), python, wheels.torch_volume(off, python), None)
    assert "buildsite" not in off_env["CIBW_CONTAINER_ENGINE"]
    assert "PYTHONPATH" not in " ".join((off_env["CIBW_ENVIRONMENT"], off_env["CIBW_TEST_ENVIRONMENT"],
                                         off_env["CIBW_REPAIR_WHEEL_COMMAND"]))


def test_nvcc_without_random_seed_runs_through_the_module_anchor(tmp_path: Path) -> None:
    """CUDA 12.4's nvcc has no -frandom-seed: its builds go through ci/nvcc/nvcc-module-anchor, mounted read-only;
    cells whose nvcc has the flag keep calling the ccache wrapper directly, behind the farm's nvcc wrapper."""
    config = reading.load(ROOT)
    old = select(config, Selection(cuda="12.4"))[0]
    new = targets.default_target(config)
    envs = {}
    for target in (old, new):
        job = job_for(target, tmp_path)
        python = wheels.build_python(target, job.spec)
        envs[target.cell.cuda] = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)
    anchored = envs["12.4"]
    mount = f"{ROOT / 'ci' / 'nvcc'}:{wheels.NVCC_TOOLS_MOUNT}:ro"
    assert anchored["CIBW_CONTAINER_ENGINE"].count(mount) == 1
    # the wrapper -> nvcc-module-anchor -> the ccache wrapper -> nvcc
    assert f'PYTORCH_NVCC="python -I {wheels.NVCC_TOOLS_MOUNT}/wrapper.py"' in anchored["CIBW_ENVIRONMENT"]
    assert f'FARM_NVCC_NEXT="{wheels.NVCC_TOOLS_MOUNT}/nvcc-module-anchor"' in anchored["CIBW_ENVIRONMENT"]
    assert 'FARM_NVCC="/usr/local/bin/nvcc-ccache"' in anchored["CIBW_ENVIRONMENT"]
    assert "-frandom-seed" not in anchored["CIBW_ENVIRONMENT"]
    seeded = envs[new.cell.cuda]
    assert seeded["CIBW_CONTAINER_ENGINE"].count(mount) == 1 and "FARM_NVCC=" not in seeded["CIBW_ENVIRONMENT"]
    assert f'PYTORCH_NVCC="python -I {wheels.NVCC_TOOLS_MOUNT}/wrapper.py"' in seeded["CIBW_ENVIRONMENT"]
    assert 'FARM_NVCC_NEXT="/usr/local/bin/nvcc-ccache"' in seeded["CIBW_ENVIRONMENT"]
    assert (ROOT / "ci" / "nvcc" / "nvcc-module-anchor").stat().st_mode & 0o111  # executable in the container


def test_the_nvcc_wrapper_holds_the_build_to_the_list_torch_compiles_for(tmp_path: Path) -> None:
    """The wrapper gets the cell's list and the project's mode; a project that sets TORCH_CUDA_ARCH_LIST in
    build-env is held to that list instead; a CPU build has no wrapper."""
    target = targets.with_arch_list(targets.default_target(reading.load(ROOT)), "8.0;9.0+PTX")
    job = job_for(target, tmp_path)
    python = wheels.build_python(target, job.spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)["CIBW_ENVIRONMENT"]
    assert 'FARM_NVCC_ARCH_LIST="8.0;9.0+PTX"' in env and 'FARM_NVCC_ARCH_MODE="refuse"' in env
    own = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, "TORCH_CUDA_ARCH_LIST": "8.6"}, arch_flags="keep"))
    job = job_for(own, tmp_path)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(own, python), None)["CIBW_ENVIRONMENT"]
    assert 'FARM_NVCC_ARCH_LIST="8.6"' in env and 'FARM_NVCC_ARCH_MODE="keep"' in env
    assert 'TORCH_CUDA_ARCH_LIST="8.6"' in env


def test_ccache_counts_come_from_this_builds_stats_log(tmp_path: Path) -> None:
    """build-all's cache column counts one build's compiles from its own stats log, not the shared volume's
    counters (which two builds running at once would mix)."""
    target = targets.default_target(reading.load(ROOT))
    job = job_for(target, tmp_path)
    python = wheels.build_python(target, job.spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)
    assert f'CCACHE_STATSLOG="{wheels.CCACHE_STATS_LOG}"' in env["CIBW_ENVIRONMENT"]
    before = env["CIBW_BEFORE_BUILD"]
    assert f"rm -f {wheels.CCACHE_STATS_LOG}" in before and "zero-stats" not in before
    assert env["CIBW_REPAIR_WHEEL_COMMAND"].startswith(wheels.CCACHE_STATS)
    log = tmp_path / "stats.log"
    command = wheels.CCACHE_STATS.replace(wheels.CCACHE_STATS_LOG, str(log))

    def count() -> str:
        return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout.strip()

    assert count() == "farm-ccache-stats: hits=0 misses=0"  # no log: nothing compiled through the cache
    # ccache's format: a "# <source>" line, then one line per counter the compile touched.
    log.write_text("# /project/csrc/direct_cache_hit.cu\ncache_miss\ndirect_cache_miss\nlocal_storage_write\n"
                   "# /project/csrc/b.cu\ndirect_cache_hit\nlocal_storage_hit\n"
                   "# /project/csrc/c.cu\npreprocessed_cache_hit\ndirect_cache_miss\n")
    assert count() == "farm-ccache-stats: hits=2 misses=1"


def test_per_python_target_needs_its_python_in_the_image(tmp_path: Path) -> None:
    config = reading.load(CLASSIC)
    ok = select(config, Selection(torch="2.11", python="3.11"))[0]
    assert wheels.build_python(ok, job_for(ok, tmp_path).spec) == "3.11"
    other = select(config, Selection(torch="2.11", python="3.12"))[0]
    with pytest.raises(wheels.UsageError, match=r"has only Python 3.11, the target needs \(3.12\)"):
        wheels.build_python(other, job_for(other, tmp_path).spec)
    manylinux = images.spec_for(CELL, matrix.MANYLINUX_2_28)
    assert wheels.build_python(other, manylinux) == "3.12"


def test_torch_volume_is_keyed_by_python_and_torch_pin() -> None:
    config = reading.load(CLASSIC)
    a, b = select(config, Selection(python="3.11"))
    assert wheels.torch_volume(a, "3.11") != wheels.torch_volume(b, "3.11")
    assert wheels.torch_volume(a, "3.11") != wheels.torch_volume(a, "3.12")
    assert wheels.torch_volume(a, "3.11") == wheels.torch_volume(a, "3.11")


def test_shell_runs_as_the_caller_and_adds_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "docker_cli", lambda: "docker")
    cmd = shell.shell_command("img", tmp_path, ["id"], interactive=False, gpus=True, ca_bundle=None, uid=1000, gid=1000)
    assert cmd[cmd.index("--user") + 1] == "1000:1000" and "HOME=/home/build" in cmd
    assert "--gpus" in cmd and cmd[-2:] == ["img", "id"] and "-t" not in cmd
    cmd = shell.shell_command("img", tmp_path, [], interactive=True, gpus=False, ca_bundle=None, uid=1234, gid=99)
    assert cmd[cmd.index("--user") + 1] == "1234:99" and cmd[-1] == "bash" and "--gpus" not in cmd
    assert "HOME=/tmp/farm-home" in cmd and f"{tmp_path}:/project" in cmd
    assert f"{wheels.CCACHE_VOLUME}-uid1234:/home/build/.cache/ccache" in cmd


def test_host_debian_mirror_is_read_from_apt_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n")
    assert debian.host_debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert debian.host_debian_mirror(tmp_path) == "http://other.example/debian"


def test_host_compiler_outside_the_cuda_range_is_refused() -> None:
    with pytest.raises(errors.MatrixError, match=r"outside CUDA 12.4's supported range gcc-6 to gcc-13 \(gcc-14\)"):
        matrix.validate(dataclasses.replace(matrix.get_cell("12.4"), host_compiler="gcc-14"))


def test_bootstrap_command() -> None:
    cmd = images.bootstrap_command("trixie", Path("/tmp/r"), "http://m/debian")
    assert cmd == ["debootstrap", "--variant=minbase", "--include=ca-certificates", "trixie", "/tmp/r", "http://m/debian"]


def test_every_value_reaches_the_container_build_as_composed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A double quote, a dollar sign, a backquote, a backslash in a project's build-env value or the caller's flags
    reach the build unchanged, as cibuildwheel's own parser reads CIBW_ENVIRONMENT (the landed option wrapped each
    value in bare double quotes: a quote ended it, $NAME and $(...) were expanded). A PATH the project names goes
    in front of the container's own, which it cannot replace."""
    from cibuildwheel.environment import parse_environment

    monkeypatch.setenv("NVCC_APPEND_FLAGS", '-DCALLER="a b" -DCOST=$HOME')
    target = targets.default_target(reading.load(ROOT))
    odd = {"ODD_DEFINE": '-DNAME=\\"x\\" $(id) `id` <(no) C:\\back\\', "PATH": "/opt/tools/bin"}
    target = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_env={**target.project.build_env, **odd}))
    job = job_for(target, tmp_path)
    python = wheels.build_python(target, job.spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)
    container = {"PATH": "/project/venv/bin:/usr/bin", "HOME": "/home/build"}
    build = parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary(container)
    assert build["ODD_DEFINE"] == odd["ODD_DEFINE"]
    assert build["NVCC_APPEND_FLAGS"].startswith('-DCALLER="a b" -DCOST=$HOME -objtemp ')
    assert build["PATH"] == "/opt/tools/bin:/project/venv/bin:/usr/bin"


def test_sccaches_storage_and_scheduler_reach_the_container_by_name(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """GitHub's cache service (FARM_CCACHE_REMOTE=gha) and an sccache-dist scheduler: the runner's token and the
    scheduler's go into the container by name (docker create --env NAME), so no cibuildwheel option holds them;
    the scheduler's client configuration is written in the container before the build, and the repair step prints
    sccache's figures (the landed route passed SCCACHE_GHA_ENABLED alone and ignored the scheduler)."""
    from cibuildwheel.environment import parse_environment

    from ci.toolchain.compiler_cache import in_container

    secrets = {"ACTIONS_RUNTIME_TOKEN": "runner-s3cret", "FARM_SCCACHE_TOKEN": "dist-s3cret"}
    for name, value in {**secrets, "ACTIONS_RESULTS_URL": "https://results.example/", "FARM_CCACHE_REMOTE": "gha",
                        "FARM_SCCACHE_SCHEDULER": "http://10.1.2.3:10600"}.items():
        monkeypatch.setenv(name, value)
    target = targets.default_target(reading.load(ROOT))
    job = job_for(target, tmp_path)
    python = wheels.build_python(target, job.spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)
    assert not [k for k, v in env.items() if any(s in v for s in secrets.values())]
    create = env["CIBW_CONTAINER_ENGINE"].split("; ")[1].split()
    assert {"--env=ACTIONS_RUNTIME_TOKEN", "--env=ACTIONS_RESULTS_URL", "--env=FARM_SCCACHE_TOKEN"} <= set(create)
    build = parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary({})
    assert build["SCCACHE_GHA_ENABLED"] == "on" and build["SCCACHE_CONF"] == f"{in_container.PRIVATE}/client.conf"
    assert build["FARM_NVCC_NEXT"] == f"{in_container.CONTAINER_TOOLS}/fronts/nvcc"  # behind the nvcc wrapper
    assert "-objtemp" not in build["NVCC_APPEND_FLAGS"].split()  # sccache loses such objects (compiler_cache)
    assert "sccache-dist-client.py" in env["CIBW_BEFORE_BUILD"]
    assert in_container.STATS_LINE in env["CIBW_REPAIR_WHEEL_COMMAND"]


def test_setuptools_own_compile_in_the_container_runs_the_nvcc_wrapper(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_HOME names the folder of ci/nvcc/shim.py, made before the build from the image's toolkit: a project
    that builds without ninja (torch then runs CUDA_HOME/bin/nvcc) gets the wrapper too. The command runs here
    against a stand-in toolkit, as the container runs it; not for CMake builds or a project's own CUDA_HOME."""
    import json
    import sys

    from cibuildwheel.environment import parse_environment

    target = targets.default_target(reading.load(ROOT))
    job = job_for(target, tmp_path)
    python = wheels.build_python(target, job.spec)
    env = wheels.cibuildwheel_env(job, python, wheels.torch_volume(target, python), None)
    assert parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary({})["CUDA_HOME"] == wheels.NVCC_FRONT
    assert "shim.make_shim" in env["CIBW_BEFORE_BUILD"]
    # The command, with this machine's paths for the container's.
    real = tmp_path / "cuda"
    (real / "bin").mkdir(parents=True)
    (real / "include").mkdir()
    (real / "bin" / "nvcc").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (real / "bin" / "nvcc").chmod(0o755)
    monkeypatch.setattr(wheels, "NVCC_TOOLS_MOUNT", str(ROOT / "ci" / "nvcc"))
    monkeypatch.setattr(wheels, "IMAGE_CUDA_HOME", str(real))
    monkeypatch.setattr(wheels, "NVCC_FRONT", str(tmp_path / "front"))
    front, command = wheels.nvcc_front(target, {})
    subprocess.run(["sh", "-c", command], check=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    nvcc = Path(front["CUDA_HOME"]) / "bin" / "nvcc"
    assert (Path(front["CUDA_HOME"]) / "include").resolve() == (real / "include").resolve()
    done = subprocess.run([str(nvcc), "-c", "k.cu", "-o", "k.o", "-gencode=arch=compute_90,code=sm_90"],
                          capture_output=True, text=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin",
                                                               "FARM_NVCC_NEXT": str(real / "bin" / "nvcc"),
                                                               "FARM_NVCC_ARCH_LIST": "9.0"})
    assert json.loads(done.stdout) == ["-c", "k.cu", "-o", "k.o", "-gencode=arch=compute_90,code=sm_90"]
    assert done.stderr.startswith("cuda-ext-farm nvcc: k.cu: -gencode=arch=compute_90,code=sm_90;")
    cmake = dataclasses.replace(target, project=dataclasses.replace(
        target.project, build_requires=(*target.project.build_requires, "cmake>=3.26")))
    # a CMake build keeps the image's CUDA_HOME; CMake's compiler: tests/unit/linux/test_container_cmake.py
    assert "CUDA_HOME" not in wheels.nvcc_front(cmake, {})[0]
    own = wheels.nvcc_front(target, {"CUDA_HOME": "/opt/own-cuda"})
    assert "CUDA_HOME" not in own[0] and own[1] == ""


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client (apt-get install docker.io)")
def test_no_engine_is_one_line_naming_the_socket_the_client_could_not_reach(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The real client against a socket nobody listens on: docker's own reason, not a template error."""
    socket = tmp_path / "nobody.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket}")
    with pytest.raises(images.ImageError) as refused:
        images.require_engine()
    line = refused.value.line()
    assert "\n" not in line and "no Docker engine is reachable" in line
    assert str(socket) in line and "template" not in line, line
