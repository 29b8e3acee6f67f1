"""The builder image's free-threaded CPython (docker/Dockerfile's free-threaded stage, docker/free-threaded-python.sh):
built from the source, patches and flags ci/toolchain/free_threaded.py uses on a host, in a stage no cell's argument
reaches (every cell of one base reuses it from the build cache), copied into the image as one layer. The docker
test runs the script in the Debian base as the stage does (about 10 minutes on 2 cores) and the interpreter it made
in a plain base with python3's libraries."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ci.linux import images
from ci.toolchain import free_threaded
from ci.universe import matrix

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _stage(text: str) -> str:
    return text.split(" AS free-threaded\n", 1)[1].split("\nFROM ", 1)[0]


def test_the_stage_gets_the_hosts_source_patches_and_flags() -> None:
    spec = images.spec_for(matrix.get_cell("13.0"), base_image=f"{images.BASE_REPO}:bookworm", arch="x86_64")
    args = dict(spec.build_args)
    assert args["FREE_THREADED_SOURCE"] == "python3.13 trixie 3.13.5"
    assert args["FREE_THREADED_SKIPPED_PATCHES"].split() == list(free_threaded.SKIPPED_PATCHES)
    assert args["FREE_THREADED_FLAGS"].split() == list(free_threaded.CONFIGURE_FLAGS)
    assert spec.context_files()["free-threaded-python.sh"] == ROOT / "docker" / "free-threaded-python.sh"


def test_no_cell_argument_reaches_the_stage_and_the_image_copies_its_output() -> None:
    text = DOCKERFILE.read_text()
    stage = _stage(text)
    assert set(re.findall(r"\$\{(\w+)\}", stage)) == {"FREE_THREADED_SOURCE", "FREE_THREADED_SKIPPED_PATCHES",
                                                      "FREE_THREADED_FLAGS"}
    final = text.split(" AS free-threaded\n", 1)[1].split("\nFROM ${BASE_IMAGE}\n", 1)[1]
    copy = final.index("COPY --from=free-threaded /farm-free-threaded/ /opt/python/")
    # After the OS packages (python3 brings the interpreter's libraries), before own-python.sh gives it to the user.
    assert final.index("apt-get install") < copy < final.index("own-python.sh build")


@pytest.mark.docker
@pytest.mark.extended
def test_the_script_builds_a_free_threaded_cpython_in_the_debian_base(tmp_path: Path) -> None:
    try:
        images.require_engine()
    except images.ImageError as exc:
        pytest.skip(str(exc))
    base = f"{images.BASE_REPO}:bookworm"
    if not images.image_exists(base):
        pytest.skip(f"no {base} image (python -m ci images bootstraps it)")
    args = images.free_threaded_args()
    out = tmp_path / "out"
    out.mkdir()
    script = ROOT / "docker" / "free-threaded-python.sh"
    subprocess.run(["docker", "run", "--rm", "-v", f"{script}:/s.sh:ro", "-v", f"{out}:/out", base, "sh", "/s.sh",
                    "/out", args["FREE_THREADED_SOURCE"], args["FREE_THREADED_SKIPPED_PATCHES"],
                    args["FREE_THREADED_FLAGS"]], check=True, timeout=3600)
    assert (out / "cp313-cp313t" / "bin" / "python").is_symlink()
    assert (out / "cp313-cp313t" / "bin" / "pip").is_symlink()  # cibuildwheel requires `which pip` to be its own
    assert not (out / "cp313-cp313t" / "lib" / "python3.13t" / "test").exists()
    check = ("import sys, sysconfig, ssl, ctypes, pip; "
             "print(sysconfig.get_config_var('Py_GIL_DISABLED'), int(sys._is_gil_enabled()), sys.prefix)")
    # The image copies the folder to /opt/python/ of a base whose python3 (python3.11-venv, -dev) brings libssl,
    # libffi, ...: here the library package they pull.
    run = ("apt-get update -qq && apt-get install -y -qq --no-install-recommends libpython3.11-stdlib >/dev/null && "
           f"/opt/python/cp313-cp313t/bin/python -c \"{check}\"")
    done = subprocess.run(["docker", "run", "--rm", "-v", f"{out / 'cp313-cp313t'}:/opt/python/cp313-cp313t:ro", base,
                           "sh", "-c", run], capture_output=True, text=True, check=True, timeout=600)
    assert done.stdout.split() == ["1", "0", "/opt/python/cp313-cp313t"]
