"""The farm's local label merged with a project's own local version (setuptools-scm's ``+g<hash>``):
ci/wheelmeta.py merge_local / local_matches, rewrite, and the audit's ``metadata`` check."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from ci import wheelmeta
from ci.audit import naming
from ci.universe import targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[2]
SCM = ROOT / "tests" / "fixtures" / "two_modules_scm"
PLATFORM = "manylinux_2_28_x86_64"


def make_wheel(folder: Path, version: str, requires: tuple[str, ...] = ("torch",)) -> Path:
    """A wheel of two-modules-scm ``version`` for cp311 (what setuptools-scm and setuptools would write)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"two_modules_scm-{version}-cp311-cp311-{PLATFORM}.whl"
    dist = f"two_modules_scm-{version}.dist-info"
    meta = f"Metadata-Version: 2.4\nName: two-modules-scm\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires) + "\n"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("two_modules_scm/__init__.py", "")
        zf.writestr("two_modules_scm/utils.py", "")
        zf.writestr(f"{dist}/METADATA", meta)
        zf.writestr(f"{dist}/WHEEL", f"Wheel-Version: 1.0\nTag: cp311-cp311-{PLATFORM}\n")
        zf.writestr(f"{dist}/RECORD", "")
    return path


@pytest.fixture(scope="module")
def target() -> targets.Target:
    config = reading.load(SCM)
    (found,) = select(config, Selection(torch="2.11", python="3.11"))
    assert found.local_version == "pt2.11.cu130" and found.torch_pin == "torch==2.11.*"
    return found


@pytest.mark.parametrize(("label", "own", "merged"), [
    ("pt2.11.cu130", "", "pt2.11.cu130"),                                   # a tagged release
    ("pt2.11.cu130", "g1a2b3c4", "pt2.11.cu130.g1a2b3c4"),                  # setuptools-scm between tags
    ("pt2.11.cu130", "g1a2b3c4.d20260102", "pt2.11.cu130.g1a2b3c4.d20260102"),  # ... with a dirty tree
    ("pt2.11.cu130", "pt2.11.cu130.g1a2b3c4", "pt2.11.cu130.g1a2b3c4"),       # a farm wheel rewritten again
    ("pt2.11.cu130", "g1a2b3c4.pt2.11.cu130", "pt2.11.cu130.g1a2b3c4"),       # the label is never written twice
    ("cu124", "g1a2b3c4", "cu124.g1a2b3c4"),                            # a stable-ABI variant
    ("", "g1a2b3c4", "g1a2b3c4"),                                       # no label: the project's own, as it is
    ("", "", ""),
])
def test_the_farm_label_comes_first_and_the_project_part_follows(label: str, own: str, merged: str) -> None:
    assert wheelmeta.merge_local(label, own) == merged
    assert wheelmeta.local_matches(merged, label)
    assert str(Version(f"1.4.1.dev1+{merged}" if merged else "1.4.1.dev1")) == (
        f"1.4.1.dev1+{merged}" if merged else "1.4.1.dev1")


@pytest.mark.parametrize(("local", "label"), [
    ("", "pt2.11.cu130"),                        # the label dropped
    ("g1a2b3c4", "pt2.11.cu130"),                # ... and only the project's part kept
    ("pt2.13.cu130", "pt2.11.cu130"),              # another torch's label
    ("pt2.11.cu130.pt2.11.cu130", "pt2.11.cu130"),   # written twice
    ("g1a2b3c4.pt2.11.cu130", "pt2.11.cu130"),     # not first
    ("pt2.11.cu130", ""),                        # a label where the target has none (PyPI's variant)
    ("cu124.g1a2b3c4", ""),
])
def test_a_wrong_missing_or_doubled_label_does_not_match(local: str, label: str) -> None:
    assert not wheelmeta.local_matches(local, label)


def test_merged_labels_sort_by_torch_first() -> None:
    """pip compares local segments in order: the farm label first keeps one torch's builds together."""
    versions = ["1.4.1.dev1+pt2.13.cu130.g0000000", "1.4.1.dev1+pt2.11.cu130.gfffffff",
                "1.4.1.dev1+pt2.11.cu130.g0000000"]
    assert sorted(versions, key=Version) == [versions[2], versions[1], versions[0]]


def test_rewrite_keeps_the_scm_local_part_after_the_label(tmp_path: Path) -> None:
    built = make_wheel(tmp_path / "dist", "1.4.1.dev1+g1a2b3c4")
    out = wheelmeta.rewrite(built, tmp_path / "final", local_version="pt2.11.cu130", torch_pin="torch==2.11.*")
    assert out.name == f"two_modules_scm-1.4.1.dev1+pt2.11.cu130.g1a2b3c4-cp311-cp311-{PLATFORM}.whl"
    meta = wheelmeta.read_metadata(out)
    assert meta["Version"] == ["1.4.1.dev1+pt2.11.cu130.g1a2b3c4"] and meta["Requires-Dist"] == ["torch==2.11.*"]
    with zipfile.ZipFile(out) as zf:
        assert zf.namelist()[-1] == "two_modules_scm-1.4.1.dev1+pt2.11.cu130.g1a2b3c4.dist-info/RECORD"
    again = wheelmeta.rewrite(out, tmp_path / "again", local_version="pt2.11.cu130", torch_pin="torch==2.11.*")
    assert again.name == out.name and again.read_bytes() == out.read_bytes()


def test_rewrite_of_a_tagged_build_and_without_a_label(tmp_path: Path) -> None:
    tagged = wheelmeta.rewrite(make_wheel(tmp_path / "a", "1.4.0"), tmp_path / "b", local_version="pt2.11.cu130")
    assert tagged.name.startswith("two_modules_scm-1.4.0+pt2.11.cu130-")
    unlabelled = wheelmeta.rewrite(make_wheel(tmp_path / "c", "1.4.1.dev1+g1a2b3c4"), tmp_path / "d")
    assert unlabelled.name.startswith("two_modules_scm-1.4.1.dev1+g1a2b3c4-")


def test_the_metadata_check_accepts_the_merged_version(target: targets.Target, tmp_path: Path) -> None:
    for version in ("1.4.0+pt2.11.cu130", "1.4.1.dev1+pt2.11.cu130.g1a2b3c4",
                    "1.4.1.dev1+pt2.11.cu130.g1a2b3c4.d20260102"):
        wheel = make_wheel(tmp_path / version, version, requires=("torch==2.11.*",))
        check = naming.check_metadata(wheel, target)
        assert check.ok, check.detail


@pytest.mark.parametrize("version", [
    "1.4.1.dev1+g1a2b3c4",                   # the farm's label missing
    "1.4.1.dev1+pt2.13.cu130.g1a2b3c4",        # another torch's label
    "1.4.1.dev1+g1a2b3c4.pt2.11.cu130",        # the label after the project's part
    "1.4.1.dev1+pt2.11.cu130.pt2.11.cu130",      # the label twice
    "1.4.0",
])
def test_the_metadata_check_refuses_a_wrong_label(target: targets.Target, tmp_path: Path, version: str) -> None:
    wheel = make_wheel(tmp_path, version, requires=("torch==2.11.*",))
    check = naming.check_metadata(wheel, target)
    assert not check.ok and "expected +pt2.11.cu130" in check.detail, check.detail


def test_the_metadata_check_still_wants_the_torch_pin(target: targets.Target, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "1.4.1.dev1+pt2.11.cu130.g1a2b3c4", requires=("torch",))
    assert not naming.check_metadata(wheel, target).ok
