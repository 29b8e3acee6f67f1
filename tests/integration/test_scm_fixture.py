"""tests/fixtures/two_modules_scm: one package, two extension modules (``_cpu_ops`` C++ only, ``_cuda_ops``
CUDA) and pure-Python code, its version from git tags (setuptools-scm), built by the farm from its own folder.

The fixture is copied into pytest's tmp_path and made a git repository tagged ``v1.4.0``. The farm copies
what git lists into its work folder (no ``.git`` there), so it asks setuptools-scm in the project's folder and
passes the version on (ci/linux/host.py scm_version_env); it then merges its local label with the project's own
local part (ci/wheelmeta.py merge_local): ``1.4.0+pt2.11.cu130`` on the tag, ``1.4.1.dev1+pt2.11.cu130.g<hash>``
one commit later.

Real toolchain, as in tests/integration/test_fixture_projects.py: the pinned CUDA 13.0 toolkit, torch 2.11 for CPython
3.11, one architecture (sm_90). The project's [build-system] requires setuptools-scm, so its build
environment is torch 2.11 plus setuptools-scm (a build environment of its own, kept in the farm's cache).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci import wheelmeta
from ci.builds import report
from tests.integration.test_fixture_projects import Built, farm

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "two_modules_scm"
TORCH = "2.11"
PYTHON = "3.11"
LABEL = "pt2.11.cu130"

# Two full builds of a two-module project: nox -s tests-extended; the version logic is unit-tested
# (tests/unit/test_wheelmeta.py: the merged local label).
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def git(folder: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "farm", "GIT_AUTHOR_EMAIL": "farm@example.invalid",
           "GIT_COMMITTER_NAME": "farm", "GIT_COMMITTER_EMAIL": "farm@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE": "2026-01-02T03:04:05Z"}
    return subprocess.run(["git", *args], cwd=folder, env=env, check=True, text=True,
                          stdout=subprocess.PIPE).stdout.strip()


def build(command: list[str], folder: Path, wheelhouse: Path, build_dir: Path) -> Built:
    result = farm(command, folder, "build", "--arch-list", "9.0", "--torch", TORCH, "--python", PYTHON,
                  "--wheelhouse", str(wheelhouse), "--build-dir", str(build_dir))
    return Built(folder, wheelhouse, result)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scm") / "two_modules_scm"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    git(folder, "init", "--quiet")
    git(folder, "add", "--all")
    git(folder, "commit", "--quiet", "--message", "two modules")
    git(folder, "tag", "v1.4.0")
    return folder


@pytest.fixture(scope="module")
def tagged(farm_command: list[str], project: Path) -> Built:
    return build(farm_command, project, project.parent / "wheelhouse-tag", project.parent / "build")


@pytest.fixture(scope="module")
def after_tag(farm_command: list[str], project: Path, tagged: Built) -> Built:
    """One commit after the tag, built in the same build folder (the objects of the tagged build are reused)."""
    assert tagged.result.returncode == 0, tagged.result.stdout[-5000:]
    (project / "CHANGES.md").write_text("# after v1.4.0\n")
    git(project, "add", "CHANGES.md")
    git(project, "commit", "--quiet", "--message", "after the tag")
    return build(farm_command, project, project.parent / "wheelhouse-dev", project.parent / "build")


def checks_of(wheel: Path) -> dict[str, dict[str, object]]:
    rep = report.read_report(wheel.parent)
    assert rep is not None and rep["sha256"] == wheelmeta.sha256_file(wheel)
    failed = [c for c in rep["checks"] if not c["ok"]]
    assert not failed, failed
    return {c["name"]: c for c in rep["checks"]}


def test_the_tag_gives_the_version_and_the_farm_its_label(tagged: Built) -> None:
    wheel = tagged.wheel
    assert wheel.name.startswith(f"two_modules_scm-1.4.0+{LABEL}-cp311-cp311-manylinux_"), wheel.name
    meta = wheelmeta.read_metadata(wheel)
    assert meta["Version"] == [f"1.4.0+{LABEL}"]
    assert f"torch=={TORCH}.*" in meta["Requires-Dist"]
    assert f"version 1.4.0 (setuptools-scm, in {tagged.project})" in tagged.result.stdout


def test_both_modules_and_the_python_code_are_in_the_wheel(tagged: Built) -> None:
    with zipfile.ZipFile(tagged.wheel) as zf:
        names = zf.namelist()
    for module in ("_cpu_ops", "_cuda_ops"):
        assert f"two_modules_scm/{module}.cpython-311-x86_64-linux-gnu.so" in names, names
    assert "two_modules_scm/utils.py" in names and "two_modules_scm/__init__.py" in names


def test_the_audit_holds_each_module_to_its_role(tagged: Built) -> None:
    checks = checks_of(tagged.wheel)
    cuda = "two_modules_scm/_cuda_ops.cpython-311-x86_64-linux-gnu.so"
    cpu = "two_modules_scm/_cpu_ops.cpython-311-x86_64-linux-gnu.so"
    assert f"cuda-code:{cuda}" in checks and f"cuda-runtime:{cuda}" in checks, sorted(checks)
    assert f"cpu-only:{cpu}" in checks and f"cuda-code:{cpu}" not in checks, sorted(checks)
    assert f"1.4.0+{LABEL}" in str(checks["metadata"]["detail"])


def test_the_checkout_is_left_as_it_was(tagged: Built) -> None:
    assert tagged.result.returncode == 0, tagged.result.stdout[-3000:]
    assert git(tagged.project, "status", "--porcelain", "--ignored") == ""


def test_the_farm_test_command_imports_both_modules(tagged: Built, farm_command: list[str]) -> None:
    assert tagged.result.returncode == 0, tagged.result.stdout[-3000:]
    result = farm(farm_command, tagged.project, "test", "--torch", TORCH, "--python", PYTHON,
                  "--wheelhouse", str(tagged.wheelhouse))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "3 passed" in result.stdout, result.stdout[-3000:]


def test_a_commit_after_the_tag_merges_the_local_parts(after_tag: Built) -> None:
    """setuptools-scm's own local part (g<hash>) follows the farm's label: neither is dropped or doubled."""
    wheel = after_tag.wheel
    short = git(after_tag.project, "rev-parse", "HEAD")
    version = wheelmeta.parse_name(wheel).version
    assert version.public == "1.4.1.dev1", version
    m = re.fullmatch(rf"{LABEL}\.g([0-9a-f]{{7,}})", version.local or "")
    assert m and short.startswith(m.group(1)), (version, short)
    assert wheelmeta.read_metadata(wheel)["Version"] == [str(version)]
    assert wheel.name.startswith(f"two_modules_scm-{version}-cp311-cp311-manylinux_"), wheel.name
    assert str(version) in str(checks_of(wheel)["metadata"]["detail"])
