"""Wheel variants (ci/release/variants/) from a real wheel: fusedops' release wheel (FARM_TEST_WHEEL) becomes the
``cuda13.0`` variant with the properties its binary gives, and a CPU target's wheel the null variant; variantlib's
own parsers and its index generator accept the folder; the same input gives the same bytes."""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from ci.errors import UsageError
from ci.release import variants
from ci.release.variants import binary, validation, writing
from ci.universe import targets
from ci.universe.project.reading import load

ROOT = Path(__file__).resolve().parents[3]


def test_names() -> None:
    assert variants.split_name("a-1.0-cp310-abi3-linux_x86_64-cuda13.0.whl") == (
        "a-1.0-cp310-abi3-linux_x86_64.whl", "cuda13.0")
    assert variants.split_name("a-1.0-1-cp310-abi3-linux_x86_64.whl") == ("a-1.0-1-cp310-abi3-linux_x86_64.whl", None)
    assert variants.split_name("a-1.0-1-cp310-abi3-linux_x86_64-null.whl")[1] == "null"
    assert variants.split_name("a-1.0-cp310-abi3-linux_x86_64.whl")[1] is None
    assert binary.sm_values(["sm_90", "sm_90a", "sm_100f", "sm_120"], ["sm_120"]) == (
        "90_real", "120_real", "120_virtual")
    assert binary.runtime_majors(["libc10.so", "libcudart.so.13"]) == {13}


def _record_ok(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(record).decode())))
        assert {r[0] for r in rows} == set(zf.namelist())
        for name, digest, size in rows:
            if name != record:
                data = zf.read(name)
                assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
                    b"=").decode() and int(size) == len(data), name


def test_real_wheel_becomes_variants_that_variantlib_accepts(built_wheel: Path, tmp_path: Path) -> None:
    from variantlib.commands.generate_index_json import generate_index_json
    from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX
    from variantlib.variant_dist_info import VariantDistInfo
    from variantlib.variants_json import VariantsJson

    from ci.toolchain import toolkit

    config = load(ROOT)
    cuda = next(t for t in targets.platform_targets(config, "linux")
                if t.cell.name == "cu130" and t.arch == "x86_64")
    cpu = dataclasses.replace(cuda, cpu=True)
    cuobjdump = toolkit.ensure_cuobjdump()
    items = writing.release_items([(built_wheel, cuda)], cuda.torch, cuobjdump)
    (_, variant), = items
    assert variant.label == "cuda13.0"
    assert variant.properties[variants.LOWER_BOUND] == ("13.0",)  # libcudart.so.13, cell cu130
    sm = variant.properties[variants.SM_ARCH]
    assert "90_real" in sm and all(v.endswith(("_real", "_virtual")) for v in sm)
    items.append((built_wheel, binary.variant_of(built_wheel, cpu, cuobjdump)))
    assert items[1][1].label == "null" and not items[1][1].properties

    written = writing.write_folder(tmp_path / "a", items, config.name)
    assert [w.name.rsplit("-", 1)[1] for w in written.wheels] == ["cuda13.0.whl", "null.whl"]
    assert "variantlib accepts 2 variant wheels" in validation.validate(written.folder)
    for wheel in written.wheels:
        _record_ok(wheel)
        label = VALIDATION_WHEEL_NAME_REGEX.fullmatch(wheel.name).group("variant_label")  # type: ignore[union-attr]
        with zipfile.ZipFile(wheel) as zf:
            dist_info = VariantDistInfo(zf.read(next(n for n in zf.namelist() if n.endswith("/variant.json"))), label)
        assert dist_info.variant_label == label
    # variantlib's own index generator, run on the wheels alone, writes the same variants.json.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for wheel in written.wheels:
        shutil.copy(wheel, theirs)
    generate_index_json(["-d", str(theirs)])
    generated = VariantsJson(json.loads(next(theirs.glob("*-variants.json")).read_text()))
    ours = VariantsJson(json.loads(written.index_file.read_text()))
    assert next(theirs.glob("*-variants.json")).name == written.index_file.name == "fusedops-0.1.0-variants.json"
    assert (generated.variants, generated.providers, generated.namespace_priorities) == (
        ours.variants, ours.providers, ours.namespace_priorities)
    page = written.page.read_text()
    assert written.index_file.name in page and all(w.name in page for w in written.wheels)
    # Byte-reproducible: the same input gives the same files.
    again = writing.write_folder(tmp_path / "b", items, config.name)
    assert [p.read_bytes() for p in again.wheels] == [p.read_bytes() for p in written.wheels]
    assert again.index_file.read_bytes() == written.index_file.read_bytes()


def test_a_variant_that_the_binary_contradicts_is_refused(built_wheel: Path) -> None:
    from ci.toolchain import toolkit

    config = load(ROOT)
    cu12 = next((t for t in targets.platform_targets(config, "linux") if t.cell.cuda_major == 12), None)
    if cu12 is None:
        pytest.skip("no CUDA 12 cell for fusedops")
    with pytest.raises(UsageError, match="not its cell's single major"):
        binary.variant_of(built_wheel, cu12, toolkit.ensure_cuobjdump())


def test_validate_refuses_a_label_that_variant_json_does_not_name(tmp_path: Path) -> None:
    pytest.importorskip("variantlib")
    wheel = tmp_path / "demo-1.0-py3-none-any-cuda13.0.whl"
    doc = variants.Variant("cuda12.8", {variants.LOWER_BOUND: ("12.8",)}).document()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo-1.0.dist-info/variant.json", json.dumps(doc))
    (tmp_path / "demo-1.0-variants.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="variantlib refuses"):
        validation.validate(tmp_path)
