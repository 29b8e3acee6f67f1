"""The documented install lines, run with real pip against a release folder of real (tiny) wheels of the classic
fixture's shape, with PyPI for torch (resolved from metadata: nothing large is downloaded).

The old scheme: one index per CUDA variant holding every torch's build, labels ``+pt29cu124``/``+pt210cu124``:
pip takes the highest label, which PEP 440 compares as a string, and trades a torch 2.10 user's torch for 2.9.
The new one: one index per torch release x variant, labels ``+pt2.10.cu124`` (numeric minor), and lines that
pin the installed torch.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from ci import wheelmeta
from ci.errors import UsageError
from ci.release import assembly, install_lines, plan, pypi_view
from ci.release.install_lines import pip_check
from ci.release.manifest import Manifest, ReleaseFile, index_name

PROJECT = "farm-probe-classic"
DIST = "farm_probe_classic"
VERSION = "0.3.0"
TAG = "cp311-cp311-manylinux_2_28_x86_64"
TORCH_ENV = Path(os.environ.get("FARM_TEST_TORCH_ENV", "/tmp/testv"))  # torch 2.13.0+cpu, really installed


def make_wheel(folder: Path, version: str, torch_pin: str) -> Path:
    """A real, installable wheel: one module, METADATA pinning torch, WHEEL, RECORD."""
    info = f"{DIST}-{version}.dist-info"
    files = {
        f"{DIST}/__init__.py": b"BUILT = %r\n" % version.encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: {version}\n"
                             f"Requires-Python: >=3.10\nRequires-Dist: {torch_pin}\n").encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode(),
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{DIST}-{version}-{TAG}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in [*files.items(), (f"{info}/RECORD", record.encode())]:
            zf.writestr(name, data)
    return path


def release(out: Path, builds: list[tuple[str, str, str]], *, per_torch: bool) -> Manifest:
    """A release folder of classic wheels (torch, variant, CUDA) with the old or the new scheme."""
    files, sources = [], {}
    for torch, variant, cuda in builds:
        minor = ".".join(torch.split(".")[:2])
        label = wheelmeta.classic_label(minor, variant) if per_torch else f"pt{minor.replace('.', '')}{variant}"
        wheel = make_wheel(out.parent / "built", f"{VERSION}+{label}", f"torch=={minor}.*")
        sources[wheel.name] = wheel
        files.append(ReleaseFile(
            name=wheel.name, sha256=wheelmeta.sha256_file(wheel), size=wheel.stat().st_size, kind="wheel",
            pypi=False, pypi_reason="local version", target=f"x-torch{minor}-{variant}", os="linux",
            variant=variant, cuda=cuda, torch=torch, python="3.11", tags=(TAG,), requires_python=">=3.10",
            index=index_name("classic", variant, torch) if per_torch else variant, abi="classic"))
    manifest = Manifest(PROJECT, VERSION, f"v{VERSION}", None, "cu130", tuple(sorted(files, key=lambda f: f.name)))
    assembly.write_release(out, manifest, sources)
    return manifest


def test_pep440_sorts_the_old_label_by_string_and_the_new_one_by_number() -> None:
    assert Version("0.3.0+pt29cu124") > Version("0.3.0+pt210cu124")          # the bug: 2.9 above 2.10
    assert Version("0.3.0+pt2.10.cu124") > Version("0.3.0+pt2.9.cu124")      # the fix
    assert wheelmeta.classic_label("2.10", "cu124") == "pt2.10.cu124"
    assert wheelmeta.merge_local("pt2.10.cu124", "pt2.10.cu124.g1a2b3c4") == "pt2.10.cu124.g1a2b3c4"
    assert wheelmeta.local_matches("pt2.10.cu124.g1a2b3c4", "pt2.10.cu124")
    assert not wheelmeta.local_matches("pt2.10.cu124", "") and not wheelmeta.local_matches("pt2.9.cu124",
                                                                                           "pt2.10.cu124")


def test_the_plan_refuses_labels_that_sort_against_their_torch(tmp_path: Path) -> None:
    old = release(tmp_path / "old", [("2.9.1", "cu124", "12.4"), ("2.10.0", "cu124", "12.4")], per_torch=False)
    with pytest.raises(UsageError, match=r"\+pt29cu124 \(torch 2.9.1\) sorts above \+pt210cu124"):
        plan.check_label_order(old.files)
    new = release(tmp_path / "new", [("2.9.1", "cu124", "12.4"), ("2.10.0", "cu124", "12.4")], per_torch=True)
    plan.check_label_order(new.files)
    assert sorted(new.variants()) == ["torch2.10-cu124", "torch2.9-cu124"]


def test_lines_of_a_stable_project_name_a_cuda_12_torch_for_the_cuda_12_variant() -> None:
    def wheel(variant: str, cuda: str, torch: str, pypi: bool) -> ReleaseFile:
        local = "" if pypi else f"+{variant}"
        return ReleaseFile(name=f"fusedops-0.1.0{local}-cp310-abi3-manylinux_2_28_x86_64.whl", sha256="0", size=1,
                           kind="wheel", pypi=pypi, pypi_reason="", variant=variant, cuda=cuda, torch=torch,
                           python="3.10", tags=("cp310-abi3-manylinux_2_28_x86_64",), index=variant, abi="stable")

    manifest = Manifest("fusedops", "0.1.0", "v0.1.0", None, "cu130", (
        wheel("cu128", "12.8", "2.10.0", False), wheel("cu130", "13.0", "2.11.0", True),
        wheel("cu132", "13.2", "2.11.0", False)))
    commands = {line.id: line.command() for line in install_lines.install_lines(manifest)}
    assert commands == {
        "cu128 fresh": 'pip install fusedops \'torch==2.10.*\' --extra-index-url https://OWNER.github.io/REPO/cu128',
        "cu128 keep-torch": 'pip install fusedops "torch==$(python -c \'import torch; print(torch.__version__)\')" '
                            "--extra-index-url https://OWNER.github.io/REPO/cu128",
        "cu130 fresh": "pip install fusedops",
        "cu130 keep-torch": 'pip install fusedops "torch==$(python -c \'import torch; print(torch.__version__)\')"',
        "cu132 fresh": "pip install fusedops --extra-index-url https://OWNER.github.io/REPO/cu132",
        "cu132 keep-torch": 'pip install fusedops "torch==$(python -c \'import torch; print(torch.__version__)\')" '
                            "--extra-index-url https://OWNER.github.io/REPO/cu132",
    }
    # The docs show the lines this function writes (and the dry run runs), word for word.
    root = Path(__file__).resolve().parents[3]
    releasing = (root / "docs" / "releasing.md").read_text()
    for line_id in ("cu128 fresh", "cu128 keep-torch", "cu132 fresh"):
        assert commands[line_id] in releasing, line_id


@pytest.fixture(scope="module")
def pypi() -> object:
    with pypi_view.PyPIView() as view:
        yield view
    assert not view.downloads, f"pip asked for whole files: {view.downloads}"


def test_old_scheme_trades_a_torch_2_10_users_torch_for_2_9(tmp_path: Path, pypi: pypi_view.PyPIView) -> None:
    """What the README promised, run: `pip install <project> --extra-index-url …/cu124` with torch 2.10 installed
    picks the +pt29cu124 build and torch 2.9.1."""
    out = tmp_path / "release"
    manifest = release(out, [("2.9.1", "cu124", "12.4"), ("2.10.0", "cu124", "12.4")], per_torch=False)
    line = dataclasses.replace(install_lines.install_lines(manifest)[1], torch=None)  # the old line: no torch pin
    python = pip_check.stand_in_torch(tmp_path / "venv", "2.10.0+cu128")
    sources = pip_check.Sources(pypi.url, None, out / "index", install_lines.SITE)
    outcome = pip_check.run_keep(line, python, "2.10.0+cu128", sources, tmp_path)
    assert outcome.wheel == f"{DIST}-{VERSION}+pt29cu124-{TAG}.whl" and outcome.torch == "2.9.1"


    # The old lines' failure is named in one line: the torch 2.10 user's line without the torch pin, over the
    # old index, picks 2.9's build.
