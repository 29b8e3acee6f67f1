"""project-arch-flags on a project in the exact shape of a popular family (tests/fixtures/gencode_family: nine
``-gencode`` pairs appended as ``cc_flag``, a prebuilt download unless ``..._FORCE_BUILD == "TRUE"``), built with
configuration only, by the installed command from the project's folder:

* ``refuse`` (the default): stopped at its first nvcc, the key named first;
* ``replace`` on the host: the wheel holds exactly the farm's SASS (sm_90 for ``--arch-list 9.0``), and the
  project's own ``NVCC_APPEND_FLAGS`` reaches nvcc beside the farm's deterministic and compression flags;
* the extended runs: ``keep`` on the host (the project's nine architectures, the audit holding the wheel to them),
  ``replace`` twice in one build folder (the same bytes), and ``replace`` and ``keep`` in the CUDA 13.0 cell's
  container (tests/integration/test_containers.py builds its image), the project's ``NVCC_APPEND_FLAGS`` again beside
  the farm's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_fixture_projects import copy_fixture, farm
from test_real_shapes import developers_words

from ci.linux import images
from tests.integration import engine

pytestmark = pytest.mark.slow

#: The fixture's own list (setup.py's cc_flag with the CUDA 13.0 toolkit).
OWN_SASS = ["sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_110", "sm_120"]
FORCE_BUILD = 'GENCODE_FAMILY_FORCE_BUILD = "TRUE"'


def configured(tmp_path: Path, table: str) -> Path:
    folder = copy_fixture("gencode_family", tmp_path)
    pyproject = folder / "pyproject.toml"
    text = pyproject.read_text().replace('python = ["3.11"]\n', f'python = ["3.11"]\n{table}')
    pyproject.write_text(text)
    return folder


def build(farm_command: list[str], folder: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return farm(farm_command, folder, *(args or ("build",)), "--arch-list", "9.0", "--wheelhouse",
                str(out / "wheelhouse"), "--build-dir", str(out / "build"))


def report_of(out: Path) -> dict[str, object]:
    (report,) = (out / "wheelhouse").glob("*/report.json")
    data: dict[str, object] = json.loads(report.read_text())
    return data


def sha256(out: Path) -> str:
    (wheel,) = (out / "wheelhouse").glob("*/*.whl")
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def assert_project_flags_beside_the_farms(output: str) -> list[str]:
    """Each nvcc compile's line (the wrapper's, one per compile): the project's build-env ``NVCC_APPEND_FLAGS``
    first, then the farm's deterministic flags and its fatbin compression. Returns the flags part of each line."""
    compiled = [line for line in output.splitlines() if line.startswith("cuda-ext-farm nvcc: ")]
    assert compiled, output[-3000:]
    flags = []
    for line in compiled:
        own, _, appended = line.partition("; NVCC_APPEND_FLAGS: ")
        assert appended.startswith("-DPROJECT_OWN -objtemp --threads 0 -frandom-seed="), line
        assert appended.endswith(" --compress-mode=size"), line
        flags.append(own)
    return flags


def test_refuse_is_the_default_and_names_the_key_first(farm_command: list[str], tmp_path: Path) -> None:
    folder = configured(tmp_path, f"build-env = {{ {FORCE_BUILD} }}\n")
    result = build(farm_command, folder, tmp_path)
    assert result.returncode == 2, result.stdout[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert "(-gencode=arch=compute_75,code=sm_75 and 8 more): set project-arch-flags = \"replace\"" in last
    assert last.index("project-arch-flags") < last.index("setup.py")  # the key first, the source edit last


def test_replace_builds_the_farms_list_with_the_projects_own_nvcc_flags(farm_command: list[str],
                                                                         tmp_path: Path) -> None:
    folder = configured(tmp_path, f'project-arch-flags = "replace"\n'
                                  f'build-env = {{ {FORCE_BUILD}, NVCC_APPEND_FLAGS = "-DPROJECT_OWN" }}\n')
    result = build(farm_command, folder, tmp_path)
    assert result.returncode == 0, result.stdout[-4000:]
    report = report_of(tmp_path)
    assert (report["sass"], report["ptx"]) == (["sm_90"], [])
    for line in assert_project_flags_beside_the_farms(result.stdout):
        assert line.endswith(": -gencode=arch=compute_90,code=sm_90"), line  # the farm's list, the project's gone
    assert not developers_words(result.stdout)  # no nox session, no farm file in the farm's own lines


@pytest.mark.extended
def test_replace_builds_the_same_bytes_again(farm_command: list[str], tmp_path: Path) -> None:
    """Two clean builds in the same build folder give the same wheel. (From two folders they do not: the fixture's
    own -lineinfo writes the .cu file's path into the device code's line table, which no compiler flag maps; the
    farm's -ffile-prefix-map covers the host code only. docs/reproducible-builds.md says so.)"""
    folder = configured(tmp_path, f'project-arch-flags = "replace"\n'
                                  f'build-env = {{ {FORCE_BUILD}, NVCC_APPEND_FLAGS = "-DPROJECT_OWN" }}\n')
    digests = []
    for _run in ("one", "two"):
        shutil.rmtree(tmp_path / "build", ignore_errors=True)
        shutil.rmtree(tmp_path / "wheelhouse", ignore_errors=True)
        result = build(farm_command, folder, tmp_path)
        assert result.returncode == 0, result.stdout[-4000:]
        digests.append(sha256(tmp_path))
    assert digests[0] == digests[1]


@pytest.mark.extended
def test_keep_builds_and_audits_the_projects_own_list(farm_command: list[str], tmp_path: Path) -> None:
    folder = configured(tmp_path, f'project-arch-flags = "keep"\nbuild-env = {{ {FORCE_BUILD} }}\n')
    result = build(farm_command, folder, tmp_path)
    assert result.returncode == 0, result.stdout[-4000:]
    report = report_of(tmp_path)
    assert (report["sass"], report["archs_from"]) == (OWN_SASS, "the project's own (setup.py)")
    assert "the project's own (setup.py) list" in result.stdout


@pytest.mark.docker
@pytest.mark.parametrize(("mode", "sass"), [("replace", ["sm_90"]), ("keep", OWN_SASS)])
def test_the_container_build_takes_the_same_configuration(farm_command: list[str], tmp_path: Path, mode: str,
                                                          sass: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    engine.skip_without(base=engine.BOOKWORM)
    monkeypatch.setenv("FARM_BASE_IMAGE", images.BASE_REPO)  # no registry here: the bootstrapped Debian base
    base = farm(farm_command, tmp_path, "base-image")
    assert base.returncode == 0, base.stdout[-3000:]
    folder = configured(tmp_path, f'project-arch-flags = "{mode}"\n'
                                  f'build-env = {{ {FORCE_BUILD}, NVCC_APPEND_FLAGS = "-DPROJECT_OWN" }}\n')
    result = build(farm_command, folder, tmp_path, "build-cuda", "--cuda", "13.0", "--torch", "2.11")
    assert result.returncode == 0, result.stdout[-4000:]
    assert report_of(tmp_path)["sass"] == sass
    assert_project_flags_beside_the_farms(result.stdout)
