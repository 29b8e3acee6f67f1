"""The release folder: which file goes where, the per-variant PEP 503 indexes, SHA256SUMS, the manifest, and
pip's view of the indexes (file:// only, no network), with small fake wheels made here."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from ci.errors import CommandFailed, UsageError
from ci.release import assembly, index, install_checks
from ci.release import manifest as release_manifest
from ci.release import plan as release_plan
from ci.universe import matrix, project, targets
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
VERSION = "0.1.0"
#: The cells a release builds (a local stand-in never): fusedops, a stable-ABI project, has one variant in each.
RELEASED_CELLS = tuple(c for c in matrix.CELLS if not c.stand_in_for)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fake_wheel(folder: Path, name: str, version: str, tag: str, *, body: str = "") -> Path:
    """A small valid wheel: one module, METADATA (Requires-Python), WHEEL, RECORD."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": f"VERSION = {version!r}\n{body}".encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             "Requires-Python: >=3.10\nRequires-Dist: torch>=2.10\n\n").encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return path


def fake_sdist(folder: Path, name: str, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        data = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        member = tarfile.TarInfo(f"{name}-{version}/PKG-INFO")
        member.size = len(data)
        tf.addfile(member, io.BytesIO(data))
    return path


def write_report(folder: Path, target: targets.Target, wheel: Path, *, ok: bool = True) -> None:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    report = {"target": target.id, "project": target.project.name, "mode": "container", "wheel": wheel.name,
              "sha256": digest, "checks": [{"name": "wheel-tag", "ok": True, "detail": ""},
                                           {"name": "sass", "ok": ok, "detail": ""}]}
    (folder / "report.json").write_text(json.dumps(report))


@pytest.fixture(scope="module")
def fusedops() -> project.ProjectConfig:
    return reading.load(ROOT)


def label(target: targets.Target, pypi_variant: str) -> str:
    """The local label a variant's wheel carries (the PyPI variant's carries none)."""
    return "" if target.variant == pypi_variant else f"+{target.variant}"


def platform(target: targets.Target) -> str:
    return f"manylinux_2_28_{target.arch}" if target.os == "linux" else "win_amd64"


def build_artifacts(folder: Path, config: project.ProjectConfig, *, labels: bool = True,
                    os_names: tuple[str, ...] = ("linux", "windows"), layout: str = "wheel-{id}") -> list[Path]:
    """Fake build outputs of every target: ``<folder>/<layout>/{wheel, report.json}``."""
    variant = release_plan.pypi_variant(config)
    made = []
    for os_name in os_names:
        for target in targets.platform_targets(config, os_name):
            out = folder / layout.format(id=target.id)
            version = VERSION + (label(target, variant) if labels else "")
            wheel = fake_wheel(out, config.name, version, f"{target.wheel_tag_prefix}-{platform(target)}")
            write_report(out, target, wheel)
            made.append(wheel)
    return made


def built(folder: Path, config: project.ProjectConfig, os_names: tuple[str, ...] = ("linux",),
          **kwargs: object) -> list[release_plan.Built]:
    build_artifacts(folder, config, os_names=os_names, **kwargs)  # type: ignore[arg-type]
    return release_plan.find_built(folder, release_plan.all_targets(config, os_names))


def test_the_pypi_variant_is_the_release_cell_of_the_newest_cuda_major(fusedops: project.ProjectConfig) -> None:
    assert release_plan.pypi_variant(fusedops) == "cu130"
    ids = release_plan.pypi_target_ids(fusedops)
    # The abi3 wheel and, beside it, a wheel per free-threaded CPython of the cell's torch (abi3 does not cover them).
    assert ids == {f"fusedops-stable-cu130-{python}-{platform}" for python in ("cp310abi3", "cp313t", "cp314t")
                   for platform in ("linux_x86_64", "linux_aarch64", "win_amd64")}


def test_plan_sends_the_pypi_variant_and_the_sdist_to_pypi_and_every_wheel_to_its_index(
        tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    items = built(tmp_path / "wh", fusedops, ("linux", "windows"))
    sdist = fake_sdist(tmp_path / "sd", "fusedops", VERSION)
    manifest = release_plan.plan(fusedops, items, sdist, tag="v0.1.0", commit="abc")
    on_pypi = sorted(f.name for f in manifest.files if f.pypi)
    assert on_pypi == [f"fusedops-0.1.0-{tag}-{platform}.whl" for tag in ("cp310-abi3", "cp313-cp313t", "cp314-cp314t")
                       for platform in ("manylinux_2_28_aarch64", "manylinux_2_28_x86_64", "win_amd64")] + [
                       "fusedops-0.1.0.tar.gz"]
    assert sorted(manifest.variants()) == sorted(c.name for c in RELEASED_CELLS)
    assert {f.name for f in manifest.variants()["cu128"]} == {
        f"fusedops-0.1.0+cu128-{tag}-{platform}.whl" for tag in ("cp310-abi3", "cp313-cp313t", "cp314-cp314t")
        for platform in ("manylinux_2_28_x86_64", "win_amd64")}
    threaded = next(f for f in manifest.wheels if f.name == "fusedops-0.1.0-cp313-cp313t-manylinux_2_28_x86_64.whl")
    assert (threaded.python, threaded.tags, threaded.pypi) == ("3.13t", ("cp313-cp313t-manylinux_2_28_x86_64",), True)
    assert manifest.version == VERSION
    again = release_manifest.Manifest.from_json(manifest.to_json())
    assert again == manifest


def test_two_variants_with_one_file_name_are_refused(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    # Without local labels every variant's abi3 wheel has one name: a GitHub Release cannot hold them, and pip
    # with --extra-index-url would take PyPI's build for the cu128 one.
    items = built(tmp_path, fusedops, labels=False)
    with pytest.raises(UsageError) as exc:
        release_plan.plan(fusedops, items, None, tag=None, commit=None)
    assert "local" in exc.value.fix and "+cu1" in exc.value.fix


def test_a_tag_that_is_not_the_version_is_refused(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    items = built(tmp_path, fusedops)
    with pytest.raises(UsageError, match="tag does not name the version"):
        release_plan.plan(fusedops, items, None, tag="v0.2.0", commit=None)


def test_files_of_two_versions_are_refused(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    items = built(tmp_path, fusedops)
    sdist = fake_sdist(tmp_path / "sd", "fusedops", "0.2.0")
    with pytest.raises(UsageError, match="different versions"):
        release_plan.plan(fusedops, items, sdist, tag=None, commit=None)


def test_a_wheel_changed_after_its_audit_is_refused(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    item = built(tmp_path, fusedops)[0]
    assert release_plan.verify_built(item).startswith("ok: 2 checks")
    with zipfile.ZipFile(item.wheel, "a") as zf:
        zf.writestr("extra.txt", "changed")
    with pytest.raises(UsageError, match="SHA-256 differs"):
        release_plan.verify_built(item)


def test_a_report_with_a_failed_check_is_refused(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    item = built(tmp_path, fusedops)[0]
    write_report(item.wheel.parent, item.target, item.wheel, ok=False)
    item = release_plan.find_built(tmp_path, {item.target.id: item.target})[0]
    with pytest.raises(UsageError, match="failed audit checks"):
        release_plan.verify_built(item)


def test_reuse_takes_the_verified_wheels_and_says_why_the_others_are_built_again(
        tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    items = built(tmp_path, fusedops)
    changed = items[0]
    with zipfile.ZipFile(changed.wheel, "a") as zf:
        zf.writestr("extra.txt", "changed")
    said: list[str] = []
    wanted = {item.target.id: item.target for item in items}
    ready = release_plan.reusable(tmp_path, wanted, said.append)
    assert ready == [item.target.id for item in items[1:]]
    assert len(said) == 1 and said[0].startswith(f"[yellow]rebuilding[/] {changed.target.id}: ")
    assert "SHA-256 differs" in said[0]


def test_missing_targets_are_named(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    build_artifacts(tmp_path, fusedops, os_names=("linux",))
    with pytest.raises(UsageError) as exc:
        release_plan.find_built(tmp_path, release_plan.all_targets(fusedops))
    assert "win_amd64" in str(exc.value.value)


def release_folder(tmp_path: Path, config: project.ProjectConfig) -> tuple[Path, release_manifest.Manifest]:
    items = built(tmp_path / "wh", config, ("linux", "windows"))
    sdist = fake_sdist(tmp_path / "sd", config.name, VERSION)
    manifest = release_plan.plan(config, items, sdist, tag="v0.1.0", commit=None)
    out = tmp_path / "release"
    assembly.write_release(out, manifest, {i.wheel.name: i.wheel for i in items} | {sdist.name: sdist})
    return out, manifest


def test_the_release_folder_holds_assets_pypi_indexes_and_sums(tmp_path: Path,
                                                               fusedops: project.ProjectConfig) -> None:
    out, manifest = release_folder(tmp_path, fusedops)
    assert assembly.verify_release(out) == manifest
    sums = release_manifest.parse_sums((out / "assets" / "SHA256SUMS").read_text())
    metadata_files = {f"{f.name}.metadata" for f in manifest.wheels}
    assert set(sums) == {f.name for f in manifest.files} | metadata_files | {"release-manifest.json"}
    for name, digest in sums.items():
        assert hashlib.sha256((out / "assets" / name).read_bytes()).hexdigest() == digest
    page = out / "index" / "cu128" / "fusedops" / "index.html"
    links = index.read_project_page(page)
    assert sorted(link.name for link in links) == sorted(f.name for f in manifest.variants()["cu128"])
    # The free-threaded wheels are in the index with the others, PEP 658 metadata and all (checked below).
    assert {link.name.split("-")[3] for link in links} == {"abi3", "cp313t", "cp314t"}
    for link in links:
        assert link.url.startswith("../../../assets/") and "%2B" in link.url  # the local "+", percent-encoded
        assert link.requires_python == ">=3.10"
        assert (page.parent / link.url.replace("%2B", "+")).resolve().is_file()
        # PEP 658: the wheel's METADATA beside it, announced with its hash.
        served = (page.parent / (link.url.replace("%2B", "+") + ".metadata")).resolve()
        assert link.metadata_sha256 == hashlib.sha256(served.read_bytes()).hexdigest()
        with zipfile.ZipFile(served.with_suffix("")) as zf:
            assert served.read_bytes() == zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")))
    assert sorted(p.name for p in (out / "pypi").iterdir()) == sorted(f.name for f in manifest.files if f.pypi)
    text = page.read_text()
    assert 'data-requires-python="&gt;=3.10"' in text and "pypi:repository-version" in text
    assert text.count('data-dist-info-metadata="sha256=') == text.count('data-core-metadata="sha256=') == len(links)
    # Tampering shows.
    sdist = out / "assets" / "fusedops-0.1.0.tar.gz"
    original = sdist.read_bytes()
    sdist.unlink()  # a hard link to the build's file
    sdist.write_bytes(b"changed")
    with pytest.raises(UsageError, match="does not match SHA256SUMS"):
        assembly.verify_release(out)
    sdist.write_bytes(original)
    assert assembly.verify_release(out) == manifest
    manifest_sums = (out / "assets" / "SHA256SUMS").read_text()
    served = out / "assets" / f"{manifest.wheels[0].name}.metadata"
    served.write_bytes(served.read_bytes() + b"Summary: changed\n")
    release_manifest.write_manifest(out, manifest)  # SHA256SUMS agrees, the manifest's hash does not
    assert (out / "assets" / "SHA256SUMS").read_text() != manifest_sums
    with pytest.raises(UsageError, match=r"\.metadata file is missing or is not the wheel's METADATA"):
        assembly.verify_release(out)


def test_an_earlier_release_folder_is_replaced_but_no_other_folder(tmp_path: Path,
                                                                  fusedops: project.ProjectConfig) -> None:
    out, _ = release_folder(tmp_path, fusedops)
    assembly.prepare_out(out)
    assert list(out.iterdir()) == []
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    with pytest.raises(UsageError, match="not an earlier release folder"):
        assembly.prepare_out(other)
    assert (other / "thesis.tex").is_file()


def test_pip_installs_each_wheel_from_its_variant_index(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    out, manifest = release_folder(tmp_path, fusedops)
    results = install_checks.check_index_install(out, manifest)
    assert set(results) == {f.name for f in manifest.wheels}
    assert all(r.startswith("ok: pip install --index-url") for r in results.values())


def test_pip_refuses_an_index_whose_file_changed(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    out, manifest = release_folder(tmp_path, fusedops)
    wheel = next(f for f in manifest.wheels if f.variant == "cu128" and f.os == "linux")
    fake_wheel(tmp_path / "other", "fusedops", VERSION + "+cu128", "cp310-abi3-manylinux_2_28_x86_64", body="x = 1\n")
    (out / "assets" / wheel.name).unlink()
    (tmp_path / "other" / wheel.name).rename(out / "assets" / wheel.name)
    with pytest.raises(CommandFailed, match="from the cu128 index failed"):
        install_checks.check_index_install(out, dataclasses.replace(manifest, files=(wheel,)))


def test_extra_index_url_picks_the_variant_over_pypi(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    out, manifest = release_folder(tmp_path, fusedops)
    results = install_checks.check_extra_index(out, manifest)
    cu128 = "fusedops-0.1.0+cu128-cp310-abi3-manylinux_2_28_x86_64.whl"
    assert results[cu128] == f"ok: --extra-index-url cu128 picks {cu128}"
    pypi_wheel = "fusedops-0.1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    assert results[pypi_wheel] == f"ok: --extra-index-url cu130 picks {pypi_wheel}"


def test_extra_index_check_fails_when_pypi_would_win(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    # A variant wheel whose version sorts below PyPI's (here: an older release) is not what users get.
    out, manifest = release_folder(tmp_path, fusedops)
    old = fake_wheel(tmp_path / "old", "fusedops", "0.0.9+cu128", "cp310-abi3-manylinux_2_28_x86_64")
    entry = release_manifest.ReleaseFile(name=old.name, sha256=hashlib.sha256(old.read_bytes()).hexdigest(),
                                size=old.stat().st_size, kind="wheel", pypi=False, pypi_reason="test",
                                target="x", os="linux", variant="cu128", python="3.10",
                                tags=("cp310-abi3-manylinux_2_28_x86_64",), requires_python=">=3.10")
    manifest = dataclasses.replace(manifest, files=(*[f for f in manifest.files if f.variant != "cu128"], entry))
    os.link(old, out / "assets" / old.name)
    index.write_site(out / "index", release_manifest.local_index(manifest))
    with pytest.raises(CommandFailed, match="picks another file"):
        install_checks.check_extra_index(out, manifest)


def test_the_site_links_every_release_download(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    _, first = release_folder(tmp_path / "a", fusedops)
    second = dataclasses.replace(first, tag="v0.2.0", files=tuple(
        dataclasses.replace(f, name=f.name.replace("0.1.0", "0.2.0")) for f in first.files))
    site = release_manifest.site_index([first, second], "https://github.com/o/r/releases/download")
    index.write_site(tmp_path / "site", site)
    links = index.read_project_page(tmp_path / "site" / "cu128" / "fusedops" / "index.html")
    urls = sorted(link.url for link in links)
    assert urls[0] == ("https://github.com/o/r/releases/download/v0.1.0/"
                       "fusedops-0.1.0%2Bcu128-cp310-abi3-manylinux_2_28_x86_64.whl")
    # Each release: the abi3 wheel and the cp313t and cp314t ones, on Linux and Windows.
    assert len(urls) == 12 and sum("/v0.2.0/" in u for u in urls) == 6
    assert any(u.endswith("-cp313-cp313t-manylinux_2_28_x86_64.whl") for u in urls)
    assert all(link.metadata_sha256 for link in links)  # GitHub Release holds each <wheel>.metadata beside it
    assert (tmp_path / "site" / "index.html").read_text().count('href="cu1') == len(RELEASED_CELLS)


def test_a_manifest_without_a_tag_cannot_make_the_site(tmp_path: Path, fusedops: project.ProjectConfig) -> None:
    _, manifest = release_folder(tmp_path, fusedops)
    with pytest.raises(UsageError, match="no tag"):
        release_manifest.site_index([dataclasses.replace(manifest, tag=None)], "https://example.invalid")


