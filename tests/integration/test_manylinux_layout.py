"""The builder image's layout scripts on a base laid out like manylinux_2_28, built here without a registry.

manylinux keeps the cell's compiler under /opt/rh/gcc-toolset-<major>/root/usr/bin (no ``gcc-12`` on PATH, ccache
links for unversioned names only, another toolset's ``g++`` first on PATH) and links /opt/python/<tag> into
/opt/_internal. A small image FROM the bootstrapped Debian base reproduces those quirks, runs the real
docker/detect-toolchain.sh and docker/own-python.sh as docker/Dockerfile runs them, and the build user then does
what cibuildwheel does there: writes the torch volume's .pth into site-packages and compiles with the CC/CXX
that ci/linux/container.py hands cibuildwheel. Before these scripts, the image ran ``chown -R build /opt/python/<tag>``
(the link only) and the farm assumed ``gcc-12``: every test below failed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ci.builds import tail
from ci.linux import container as wheels
from ci.linux import image_contents, images
from ci.universe import targets
from ci.universe.project import reading
from tests.integration import engine

ROOT = Path(__file__).resolve().parents[2]
BASE = f"{images.BASE_REPO}:bookworm"
TAG = "cuda-ext-farm/layout-test:manylinux"
TOOLSET = "/opt/rh/gcc-toolset-12/root/usr/bin"
LIBEXEC = "/usr/local/libexec/farm"
# The two steps exactly as docker/Dockerfile runs them (test_the_dockerfile_runs_the_same_steps checks it).
OWN_PYTHON = f"sh {LIBEXEC}/own-python.sh build"
DETECT = f'sh {LIBEXEC}/detect-toolchain.sh "${{HOST_COMPILER}}" {images.TOOLCHAIN_ENV}'

DOCKERFILE = f"""\
FROM {BASE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update && apt-get install -y --no-install-recommends gcc-12 g++-12 ccache python3.11-venv \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 build
COPY {' '.join(images.LAYOUT_SCRIPTS)} {LIBEXEC}/
ARG HOST_COMPILER=gcc-12
# The Debian layout first, as the farm's Debian bases have it.
RUN sh {LIBEXEC}/detect-toolchain.sh "${{HOST_COMPILER}}" /etc/farm/debian.env
# manylinux's compiler: only under the toolset's folder (links to Debian's gcc 12 stand in for the toolset);
# no gcc-12 on PATH, ccache links for unversioned names only, another toolset's g++ first on PATH.
RUN mkdir -p {TOOLSET} \\
 && ln -s /usr/bin/x86_64-linux-gnu-gcc-12 {TOOLSET}/gcc && ln -s /usr/bin/x86_64-linux-gnu-g++-12 {TOOLSET}/g++ \\
 && rm /usr/bin/gcc-12 /usr/bin/g++-12 && rm -r /usr/lib/ccache \\
 && mkdir -p /usr/lib64/ccache && ln -s /usr/bin/ccache /usr/lib64/ccache/g++ \\
 && printf '#!/bin/sh\\necho "the g++ of another gcc-toolset" >&2; exit 97\\n' > /usr/local/bin/g++ \\
 && chmod 755 /usr/local/bin/g++
# manylinux's Pythons: /opt/python/<tag> links into /opt/_internal, root's.
RUN python3.11 -m venv /opt/_internal/cpython-3.11 && mkdir -p /opt/python \\
 && ln -s /opt/_internal/cpython-3.11 /opt/python/cp311-cp311 && ln -s /opt/python/cp311-cp311 /opt/python/cp39-cp39
RUN {OWN_PYTHON}
RUN {DETECT}
USER build
WORKDIR /home/build
"""


pytestmark = engine.marks(base=BASE)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    images.bootstrap_base("bookworm")  # reused when present
    context = tmp_path_factory.mktemp("layout-context")
    (context / "Dockerfile").write_text(DOCKERFILE)
    for name in images.LAYOUT_SCRIPTS:
        shutil.copyfile(ROOT / "docker" / name, context / name)  # the real scripts, not copies of their logic
    docker = images.docker_cli()
    built = subprocess.run([docker, "build", "--tag", TAG, str(context)], env={**os.environ, "DOCKER_BUILDKIT": "1"},
                           capture_output=True, text=True)
    try:
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        image_contents.image_toolchain.cache_clear()
        yield TAG
    finally:
        # Disk is scarce on CI machines: the image goes (BuildKit's cache of its steps is left to its own GC).
        subprocess.run([docker, "rmi", "--force", TAG], capture_output=True)


def run_as_build(image: str, script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``script`` in a throw-away container as the image's user (the build user, as cibuildwheel runs)."""
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    return subprocess.run([images.docker_cli(), "run", "--rm", *flags, image, "sh", "-c", script],
                          capture_output=True, text=True)


def test_the_dockerfile_runs_the_same_steps() -> None:
    text = images.DOCKERFILE.read_text()
    assert OWN_PYTHON in text and DETECT in text
    assert f"COPY {' '.join(images.LAYOUT_SCRIPTS)} {LIBEXEC}/" in text
    assert "chown -R build:build /opt/python" not in text  # the link-only chown is gone


def test_the_toolsets_compiler_is_detected(image: str) -> None:
    found = image_contents.image_toolchain(image)
    assert (found.cc, found.cxx_real) == (f"{TOOLSET}/gcc", f"{TOOLSET}/g++")
    assert found.version.startswith("12.")
    # Not the unversioned ccache link: ccache would run the first g++ on PATH, another toolset's.
    assert found.cxx not in ("/usr/lib64/ccache/g++", "/usr/lib/ccache/g++-12")


def test_the_debian_layout_is_recorded_as_the_farm_assumes_it(image: str) -> None:
    out = run_as_build(image, "cat /etc/farm/debian.env")
    found = image_contents.parse_toolchain(out.stdout, "debian.env")
    assert dataclasses.replace(found, version="") == image_contents.debian_toolchain(12)


def test_the_build_user_writes_site_packages_behind_the_link(image: str) -> None:
    # What CIBW_BEFORE_BUILD runs first, with cibuildwheel's PATH (the target's Python first).
    line = wheels._pth_command(f"{wheels.TORCH_MOUNT}/site")
    out = run_as_build(image, f'set -e; export PATH=/opt/python/cp311-cp311/bin:$PATH; {line}; '
                              'site=$(python -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])"); '
                              'echo "$site"; readlink -f "$site"; cat "$site/_farm_torch.pth"; '
                              'touch /opt/python/cp311-cp311/bin/farm-probe')
    assert out.returncode == 0, out.stderr
    site, real, pth = out.stdout.splitlines()[:3]
    assert site.startswith("/opt/python/cp311-cp311/"), site  # as cibuildwheel's Python names it
    assert real.startswith("/opt/_internal/cpython-3.11/"), real  # the quirk is really there
    assert pth == f"{wheels.TORCH_MOUNT}/site"


def test_cibuildwheel_gets_the_recorded_compilers_and_they_compile(image: str, tmp_path: Path) -> None:
    target = targets.default_target(reading.load(ROOT))
    spec = images.spec_for(target.cell, BASE)
    outputs = tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "build")
    job = wheels.ContainerBuild(target=target, spec=spec, image=image, outputs=outputs, job="layout",
                                toolchain=image_contents.image_toolchain(image))
    env = wheels.cibuildwheel_env(job, "3.11", "volume", None)["CIBW_ENVIRONMENT"]
    compilers = job.compilers()
    assert f'CC="{compilers.cc}"' in env and f'CXX="{compilers.cxx}"' in env
    out = run_as_build(image, 'set -e; printf "int main(void){return 0;}\\n" | "$CC" -x c - -o /tmp/c && /tmp/c; '
                              'printf "#include <vector>\\nint main(){return std::vector<int>(3).size()-3;}\\n" '
                              '> /tmp/v.cpp && "$CXX" -c /tmp/v.cpp -o /tmp/v.o && "$CXX" /tmp/v.o -o /tmp/v; '
                              '/tmp/v; ccache --print-stats',
                       env={"CC": compilers.cc, "CXX": compilers.cxx, "CCACHE_DIR": "/tmp/ccache"})
    assert out.returncode == 0, out.stderr
    assert "another gcc-toolset" not in out.stderr
    assert "cache_miss\t1" in out.stdout.splitlines()  # the C++ compile went through ccache
