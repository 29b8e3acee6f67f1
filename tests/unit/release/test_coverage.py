"""Coverage of a project's targets by a wheelhouse or a PEP 503 site, and build-all --missing's selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.release import coverage, index
from ci.universe import targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def _wheel_name(target: targets.Target, version: str = "0.1.0") -> str:
    local = f"+{target.local_version}" if target.local_version else ""
    platform = "win_amd64" if target.os == "windows" else f"manylinux_2_28_{target.arch}"
    name = target.project.name.replace("-", "_")
    return f"{name}-{version}{local}-{target.wheel_tag_prefix}-{platform}.whl"


def _linux_targets(root: Path) -> tuple[targets.Target, ...]:
    return targets.platform_targets(reading.load(root), "linux")


@pytest.mark.parametrize("root", [ROOT, CLASSIC], ids=["stable", "classic"])
def test_a_wheelhouse_missing_two_targets_says_which(root: Path, tmp_path: Path) -> None:
    chosen = _linux_targets(root)
    assert len(chosen) >= 3
    for target in chosen[2:]:
        (tmp_path / target.id).mkdir()
        (tmp_path / target.id / _wheel_name(target)).write_bytes(b"")
    found = coverage.read(tmp_path, chosen)
    assert found.shape == "wheelhouse"
    assert [t.id for t in found.missing] == [t.id for t in chosen[:2]]
    assert set(found.present) == {t.id for t in chosen[2:]}
    assert found.percent == pytest.approx(100 * (len(chosen) - 2) / len(chosen))


def test_a_wheel_of_another_target_in_a_target_folder_does_not_count(tmp_path: Path) -> None:
    chosen = _linux_targets(CLASSIC)
    first, second = chosen[0], chosen[1]
    (tmp_path / first.id).mkdir()
    (tmp_path / first.id / _wheel_name(second)).write_bytes(b"")  # the wrong wheel in the folder
    assert first.id not in coverage.read(tmp_path, chosen).present


@pytest.mark.parametrize("root", [ROOT, CLASSIC], ids=["stable", "classic"])
def test_a_pep503_site_is_matched_by_variant_tags_and_local_label(root: Path, tmp_path: Path) -> None:
    config = reading.load(root)
    chosen = targets.platform_targets(config, "linux") + targets.platform_targets(config, "windows")
    keep = chosen[1:]
    variants: dict[str, dict[str, list[index.IndexFile]]] = {}
    for target in keep:
        files = variants.setdefault(target.variant, {}).setdefault(config.name, [])
        files.append(index.IndexFile(_wheel_name(target), f"../../files/{_wheel_name(target)}", "0" * 64))
    index.write_site(tmp_path, variants)
    (tmp_path / "index.html").write_text(index.listing_page("variants", variants))
    found = coverage.read(tmp_path, chosen)
    assert found.shape == "PEP 503 site"
    assert [t.id for t in found.missing] == [chosen[0].id]
    assert len(found.present) == len(keep)


def test_matching_needs_the_targets_tags() -> None:
    target = _linux_targets(ROOT)[0]
    name = _wheel_name(target)
    assert coverage.matches(name, target)
    other_arch = "aarch64" if target.arch == "x86_64" else "x86_64"
    assert not coverage.matches(name.replace(f"_{target.arch}.whl", f"_{other_arch}.whl"), target)
    assert not coverage.matches(name.replace("0.1.0", "0.1.0+cu999"), target)
    assert not coverage.matches("not-a-wheel.whl", target)


def test_a_folder_of_neither_shape_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "sub").mkdir()
    with pytest.raises(coverage.UsageError, match="PEP 503"):
        coverage.read(tmp_path, _linux_targets(ROOT))
    with pytest.raises(coverage.UsageError, match="does not exist"):
        coverage.read(tmp_path / "nowhere", _linux_targets(ROOT))




def test_free_threaded_targets_are_counted_and_only_their_own_wheel_covers_them(tmp_path: Path) -> None:
    """A cp313t target is a target of its own: the abi3 wheel does not cover it (abi3 does not load in a
    free-threaded CPython), nor a GIL build's cp313 wheel; its cp313-cp313t wheel does."""
    chosen = _linux_targets(ROOT)
    threaded = [t for t in chosen if t.free_threaded]
    assert threaded and {t.python for t in threaded} == {"3.13t", "3.14t"}
    for target in chosen:
        (tmp_path / target.id).mkdir()
        if not target.free_threaded:
            (tmp_path / target.id / _wheel_name(target)).write_bytes(b"")
    first = threaded[0]
    gil_wheel = _wheel_name(first).replace("-cp313-cp313t-", "-cp313-cp313-").replace("-cp314-cp314t-", "-cp314-cp314-")
    (tmp_path / first.id / gil_wheel).write_bytes(b"")
    found = coverage.read(tmp_path, chosen)
    assert {t.id for t in found.missing} == {t.id for t in threaded}
    (tmp_path / first.id / gil_wheel).unlink()
    for target in threaded:
        (tmp_path / target.id / _wheel_name(target)).write_bytes(b"")
    assert coverage.read(tmp_path, chosen).percent == pytest.approx(100)
