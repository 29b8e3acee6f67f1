"""Container integration: a real Docker engine, a bootstrapped base, the builder
image of the CUDA 13.0 release cell and a cibuildwheel build inside it.

Skipped (with the reason) when no Docker engine is reachable. `.ci/run`
installs and starts one, so CI runs these.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.builds import arch_flags
from ci.linux import images
from ci.universe import matrix
from tests.integration import engine

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


REASON = engine.missing(base=engine.BOOKWORM)
pytestmark = engine.marks(base=engine.BOOKWORM)

CELL = matrix.get_cell("13.0")


def run_ci(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, text=True,
                          env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT), **(env or {})},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def base() -> str:
    result = run_ci("base-image")
    assert result.returncode == 0, result.stdout[-3000:]
    return images.BASE_REPO


MARKER = "FARM-TEST-CA-MARKER-7f3a"


def marker_bundle(folder: Path) -> Path:
    """The host's CA bundle (so pip still works) with a marker line that must never reach an image."""
    host_ca = images.host_ca_bundle()
    bundle = folder / "ca.crt"
    bundle.write_text((host_ca.read_text() if host_ca else "") + f"\n# {MARKER}\n")
    return bundle


BUILT_WITH_MARKER: list[str] = []


@pytest.fixture(scope="module")
def image(base: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The CUDA 13.0 cell's image; built here (a fresh machine), it gets the marker bundle as its CA secret."""
    spec = images.spec_for(CELL, base)
    if not images.image_exists(spec.tag):
        saved = os.environ.get("FARM_CA_BUNDLE")
        os.environ["FARM_CA_BUNDLE"] = str(marker_bundle(tmp_path_factory.mktemp("ca")))
        try:
            images.ensure_image(spec)
        finally:
            if saved is None:
                del os.environ["FARM_CA_BUNDLE"]
            else:
                os.environ["FARM_CA_BUNDLE"] = saved
        BUILT_WITH_MARKER.append(spec.tag)
    return images.ensure_image(spec)


def test_image_is_labelled_and_runs_as_non_root(image: str) -> None:
    labels = json.loads(subprocess.run([images.docker_cli(), "image", "inspect", "--format",
                                        "{{json .Config.Labels}}", image], capture_output=True, text=True,
                                       check=True).stdout)
    assert labels["farm.cuda"] == "13.0" and labels["farm.torch"] == CELL.torch
    assert labels["farm.compiler"] == CELL.host_compiler
    out = subprocess.run([images.docker_cli(), "run", "--rm", image, "sh", "-c", "id -u; nvcc --version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] != "0"
    assert "release 13.0" in out


def test_unchanged_cell_reuses_its_image(image: str) -> None:
    assert images.spec_for(CELL, images.BASE_REPO).tag == image
    result = run_ci("images", CELL.cuda, env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 0 and "reusing" in result.stdout


def test_ca_bundle_never_lands_in_the_image(tmp_path: Path, base: str, image: str) -> None:
    marker = MARKER
    if image in BUILT_WITH_MARKER:
        tag = image  # this session built the cell's image with the marker bundle as its CA secret
    else:  # the image existed: build a copy from scratch with the marker bundle
        spec = images.spec_for(CELL, base)
        tag = spec.tag + "-catest"
        context = images.write_context(spec, tmp_path)
        cmd = images.build_command(spec, marker_bundle(tmp_path), context)
        cmd[cmd.index("--tag") + 1] = tag
        subprocess.run([*cmd[:2], "--no-cache", *cmd[2:]], check=True, env={**os.environ, "DOCKER_BUILDKIT": "1"},
                       capture_output=True)
    try:
        history = subprocess.run([images.docker_cli(), "history", "--no-trunc", tag],
                                 capture_output=True, text=True, check=True).stdout
        # The RUN lines name the secret's mount point; its content must appear nowhere.
        assert marker not in history and "BEGIN CERTIFICATE" not in history
        found = subprocess.run([images.docker_cli(), "run", "--rm", "--user", "0", tag, "sh", "-c",
                                f"grep -rls {marker} /etc /opt /home /root /usr/local /run /tmp; "
                                "test ! -e /run/secrets/cacert"],
                               capture_output=True, text=True)
        assert found.stdout.strip() == "" and found.returncode == 0
    finally:
        if tag != image:
            subprocess.run([images.docker_cli(), "rmi", "-f", tag], capture_output=True)


def test_module_anchor_makes_anonymous_namespace_names_reproducible(image: str) -> None:
    """Without -frandom-seed (CUDA 12.4's nvcc has none; 13.0 shows the same fallback), cudafe++ names the
    anonymous namespace of a file with no external definition after its time and process id; through
    ci/nvcc/nvcc-module-anchor two compiles give the same object, and the anchor stays out of .dynsym."""
    script = r"""
        set -e; cd /tmp; cp /opt/fixture/anonymous.cu k.cu
        build() { "$@" -objtemp -Xcompiler -fPIC -c k.cu -o k.o; }
        build /opt/farm/nvcc/nvcc-module-anchor; mv k.o anchored1.o; touch k.cu
        build /opt/farm/nvcc/nvcc-module-anchor; mv k.o anchored2.o
        build nvcc; mv k.o plain1.o; touch k.cu; build nvcc; mv k.o plain2.o
        cmp -s anchored1.o anchored2.o && echo anchored=same || echo anchored=differ
        cmp -s plain1.o plain2.o && echo plain=same || echo plain=differ
        nm anchored1.o | grep -c farm_module_anchor_
        nvcc -shared anchored1.o -o k.so && (nm -D k.so | grep -c farm_module_anchor_ || true)
    """
    result = subprocess.run([images.docker_cli(), "run", "--rm", "--env", "CCACHE_DISABLE=1",
                             "--env", "FARM_NVCC=/usr/local/bin/nvcc-ccache",
                             f"--volume={ROOT / 'ci' / 'nvcc'}:/opt/farm/nvcc:ro",
                             f"--volume={ROOT / 'tests' / 'fixtures' / 'nvcc_module_id'}:/opt/fixture:ro",
                             image, "sh", "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.split()
    assert lines[:2] == ["anchored=same", "plain=differ"], result.stdout
    assert int(lines[2]) >= 1 and lines[3] == "0"  # defined in the object, hidden in the library


def test_shell_runs_one_command_as_the_caller(image: str) -> None:
    result = run_ci("shell", "--cuda", CELL.cuda, "id", env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 0, result.stdout[-2000:]
    assert f"uid={os.getuid()}" in result.stdout


def test_cibuildwheel_builds_an_audited_wheel_in_the_image(image: str, tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    # --python: the abi3 wheel alone, built with the Debian base's Python (the cell's free-threaded targets have
    # their own test: test_free_threaded_build.py).
    result = run_ci("build-cuda", CELL.cuda, "--python", images.image_python(f"{images.BASE_REPO}:bookworm", CELL),
                    "--arch-list", "9.0+PTX", "--wheelhouse", str(wheelhouse), "--build-dir", str(tmp_path / "build"),
                    env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 0, result.stdout[-5000:]
    assert "import test ok" in result.stdout and "No broken requirements found" in result.stdout
    folder = wheelhouse / "fusedops-stable-cu130-cp310abi3-linux_x86_64"
    built = list(folder.glob("fusedops-*-cp310-abi3-manylinux_*.whl"))
    assert len(built) == 1
    report = json.loads((folder / "report.json").read_text())
    assert report["sass"] == ["sm_90"] and report["ptx"] == ["sm_90"] and report["mode"] == "container"
    assert report["image"] == image and all(c["ok"] for c in report["checks"])
    assert any(c["name"].startswith("symbols:") for c in report["checks"])


def test_classic_project_builds_per_torch_in_the_container(image: str, tmp_path: Path) -> None:
    """The classic fixture, configured only in its own pyproject.toml, for two torch releases in the CUDA 13
    release cell; torch comes from a read-only volume per torch pin, installed once."""
    wheelhouse = tmp_path / "wheelhouse"
    for torch in ("2.11", "2.13"):
        result = run_ci("build-cuda", "13", "--project", str(CLASSIC), "--torch", torch, "--python", "3.11",
                        "--arch-list", "9.0", "--wheelhouse", str(wheelhouse), "--build-dir", str(tmp_path / "build"),
                        env={"FARM_BASE_IMAGE": images.BASE_REPO})
        assert result.returncode == 0, result.stdout[-5000:]
        folder = wheelhouse / f"classic_ext-torch{torch}-cu130-cp311-linux_x86_64"
        assert len(list(folder.glob(f"classic_ext-0.3.0+pt{torch}.cu130-cp311-cp311-manylinux_*.whl"))) == 1
        report = json.loads((folder / "report.json").read_text())
        checks = {c["name"].split(":")[0]: c for c in report["checks"]}
        assert all(c["ok"] for c in report["checks"]), [c for c in report["checks"] if not c["ok"]]
        assert {"symbols", "c10_cuda", "cuda-code", "metadata"} <= set(checks)
        assert f"'torch': '{torch}.0'" in result.stdout  # the smoke command ran in the clean test venv
    volumes = subprocess.run([images.docker_cli(), "volume", "ls", "-q"], capture_output=True, text=True).stdout
    assert "cuda-ext-farm-torch-py3.11-torch2.13.0-cu13-" in volumes


def test_cuda_only_if_a_gpu_is_visible_builds_with_cuda_code_in_the_container(image: str, tmp_path: Path) -> None:
    """The cuda_if_available fixture's setup.py, unchanged, in the CUDA 13.0 cell's image: the build sees
    torch.cuda.is_available() True (ci/buildsite mounted read-only, first on the build's PYTHONPATH), so its library
    holds CUDA code; cibuildwheel's test step, which inherits the build's environment, does not (the smoke command
    fails if it did)."""
    project = tmp_path / "cuda_if_available"
    shutil.copytree(ROOT / "tests" / "fixtures" / "cuda_if_available", project)
    config = tmp_path / "farm.toml"
    config.write_text('torch = ["2.11"]\npython = ["3.11"]\n\n[commands]\nsmoke = "python -c \'import torch, '
                      'cuda_if_available; assert not torch.cuda.is_available(), 1\'"\n')
    wheelhouse = tmp_path / "wheelhouse"
    result = run_ci("build-cuda", CELL.cuda, "--project", str(project), "--config", str(config), "--arch-list", "9.0",
                    "--wheelhouse", str(wheelhouse), "--build-dir", str(tmp_path / "build"),
                    env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 0, result.stdout[-5000:]
    assert "torch.cuda.is_available() is True in this build" in result.stdout
    (folder,) = wheelhouse.glob("cuda_if_available-torch2.11-cu130-cp311-linux_x86_64")
    report = json.loads((folder / "report.json").read_text())
    assert all(c["ok"] for c in report["checks"]), [c for c in report["checks"] if not c["ok"]]
    assert "cuda-code:cuda_if_available/_C" in {c["name"].split(".")[0] for c in report["checks"]}


def test_failed_compile_in_container_reaches_the_user_and_leaves_no_wheel(image: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT, project, ignore=shutil.ignore_patterns(".git", ".nox", "build", "wheelhouse", "fixtures",
                                                                  "*.so", "__pycache__"))
    kernel = project / "csrc" / "cuda" / "round_ste.cu"
    kernel.write_text(kernel.read_text() + "\nstatic int broken = container_undefined_symbol;\n")
    wheelhouse = tmp_path / "wheelhouse"
    result = run_ci("build-cuda", CELL.cuda, "--project", str(project), "--arch-list", "9.0+PTX", "--wheelhouse",
                    str(wheelhouse), env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 1
    assert "container_undefined_symbol" in result.stdout and "round_ste.cu" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("error: the container build of fusedops-stable-cu130")
    assert not list(wheelhouse.rglob("*.whl"))
    leftover = subprocess.run([images.docker_cli(), "ps", "-aq", "--filter", "label=farm.job"], capture_output=True,
                              text=True).stdout.split()
    assert leftover == []


OWN_FLAGS_LINE = (
    "error: the project passes its own CUDA architecture flags to nvcc, so torch ignores TORCH_CUDA_ARCH_LIST "
    "(the farm's architectures) (-gencode=arch=compute_80,code=sm_80 and 1 more): set project-arch-flags = "
    "\"replace\" in [tool.cuda-ext-farm] to build the farm's list (9.0 here: cuda-archs or --arch-list choose it) "
    "in their place, or project-arch-flags = \"keep\" to build the project's own list; or drop the flags from "
    "the extension's extra_compile_args (setup.py). The build was stopped at its first nvcc")


def test_hard_coded_gencode_flags_stop_the_container_build_at_its_first_nvcc(image: str, tmp_path: Path) -> None:
    """Fixture j (tests/integration/test_real_shapes.py has its host build) in the CUDA 13.0 cell's image:
    ci/nvcc/wrapper.py refuses the first nvcc compile, before nvcc runs; the last line is the host's."""
    project = tmp_path / "hardcoded_gencode"
    shutil.copytree(ROOT / "tests" / "fixtures" / "hardcoded_gencode", project)
    wheelhouse = tmp_path / "wheelhouse"
    before = set(farm_containers())
    result = run_ci("build-cuda", CELL.cuda, "--project", str(project), "--arch-list", "9.0", "--torch", "2.11",
                    "--python", "3.11", "--wheelhouse", str(wheelhouse), "--build-dir", str(tmp_path / "build"),
                    env={"FARM_BASE_IMAGE": images.BASE_REPO})
    assert result.returncode == 2, result.stdout[-5000:]
    assert result.stdout.strip().splitlines()[-1] == OWN_FLAGS_LINE
    # The wrapper's line came from the compile of scale.cu, and no object was made: ninja prints "[k/n] <command>"
    # for each edge it ran, then "FAILED: <object>" for each refused one; nvcc itself never ran.
    assert "cuda-ext-farm nvcc: own architecture flags: -gencode=arch=compute_80,code=sm_80" in result.stdout
    ran = re.findall(r"^\[\d+/\d+\] .* -o (\S+\.o)\b", result.stdout, re.MULTILINE)
    failed = re.findall(r"^FAILED: (?:\[code=\d+\] )?(\S+\.o)\b", result.stdout, re.MULTILINE)
    assert ran and set(ran) <= set(failed), result.stdout[-3000:]
    assert not list(wheelhouse.rglob("*.whl"))
    assert set(farm_containers()) - before == set()  # the stopped build's container was removed (others may run)


def farm_containers() -> list[str]:
    return subprocess.run([images.docker_cli(), "ps", "-aq", "--filter", "label=farm.job"], capture_output=True,
                          text=True).stdout.split()


WRAPPER_NINJA = r"""
    set -e; mkdir -p /tmp/b && cd /tmp/b
    printf '__global__ void scale(float* x, float f, int n) { int i = threadIdx.x; if (i < n) x[i] *= f; }\n' > k.cu
    cp k.cu j.cu
    # torch's rule: $nvcc is PYTORCH_NVCC, written verbatim; two edges, as a project with two kernels
    write() {
      printf 'nvcc = %s\nflags = %s\nrule cuda_compile\n' "$1" "$2" > build.ninja
      printf '  command = $nvcc -objtemp -frandom-seed=t -c $in -o $out $flags\n' >> build.ninja
      printf 'build k.o: cuda_compile k.cu\nbuild j.o: cuda_compile j.cu\n' >> build.ninja
    }
    wrapper="python -I /opt/farm/nvcc/wrapper.py"
    write "$wrapper" "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86"
    ninja -v -j 2 > own.log 2>&1 && echo own=built || echo own=refused; cat own.log; ls *.o 2>/dev/null | wc -l
    write "$wrapper" "-gencode=arch=compute_90,code=sm_90"; ninja -v -j 2 > ok.log 2>&1 && echo cell=built
    mv k.o wrapped.o; rm -f j.o
    FARM_NVCC_ARCH_MODE=replace; export FARM_NVCC_ARCH_MODE
    write "$wrapper" "-gencode=arch=compute_80,code=sm_80"; ninja -v k.o > replaced.log 2>&1 && echo replaced=built
    mv k.o replaced.o; unset FARM_NVCC_ARCH_MODE
    write /usr/local/bin/nvcc-ccache "-gencode=arch=compute_90,code=sm_90"; ninja -v k.o > plain.log 2>&1
    cmp -s wrapped.o k.o && echo bytes=same || echo bytes=differ
    cmp -s replaced.o k.o && echo replaced=same || echo replaced=differ
"""


def test_the_nvcc_wrapper_refuses_or_replaces_own_flags_in_the_image_and_changes_no_bytes(image: str) -> None:
    """ci/nvcc/wrapper.py in the cell's image, in front of its ccache wrapper and nvcc as the container build chains
    them, under ninja as torch drives it: an edge with flags of the project's own fails at once (no object, nvcc
    never ran) with the line the farm reads; the cell's own flags compile, to the bytes nvcc alone makes; in
    ``replace`` the project's flags give way to the cell's, and the object is the same again."""
    result = subprocess.run([images.docker_cli(), "run", "--rm", "--env", "CCACHE_DISABLE=1",
                             f"--volume={ROOT / 'ci' / 'nvcc'}:/opt/farm/nvcc:ro",
                             "--env", "FARM_NVCC_NEXT=/usr/local/bin/nvcc-ccache", "--env", "FARM_NVCC_ARCH_LIST=9.0",
                             "--env", "PATH=/opt/python/cp311-cp311/bin:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:"
                             "/bin", image, "sh", "-c", WRAPPER_NINJA], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    lines = out.splitlines()
    assert lines[0] == "own=refused" and lines[lines.index("cell=built") - 1] == "0"  # no object at all
    assert "FAILED: " in out
    errors = [e for e in map(arch_flags.refusal, lines) if e is not None]
    assert errors and errors[0].value == "-gencode=arch=compute_80,code=sm_80 and 1 more"
    assert {"bytes=same", "replaced=built", "replaced=same"} <= set(lines)
