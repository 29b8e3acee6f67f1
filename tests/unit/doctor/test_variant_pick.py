"""The doctor's pick among variant wheels (ci/doctor/variants.py) against the real parts, on every recorded machine
of tests/fixtures/doctor/, for an index of variant wheels written by ci/release/variants/: the NVIDIA provider's
own answer (``get_supported_configs``, recorded with its version by ``python -m ci.doctor.provider`` in
tests/fixtures/doctor_provider/) equals the doctor's re-implementation, and variantlib's own ordering
(``sort_and_filter_supported_variants``, the function an installer calls) of that answer is the doctor's. Both run
wherever the tests run; where the provider is installed, a further test asks it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ci.doctor import diagnose, provider
from ci.doctor import variants as doctor_variants
from ci.release import variants as release_variants
from ci.release.variants import writing as variant_writing

ROOT = Path(__file__).resolve().parents[3]
ENVS = ROOT / "tests" / "fixtures" / "doctor"
#: The NVIDIA provider's own answers on those machines (``python -m ci.doctor.provider`` writes it).
RECORDED: dict[str, Any] = json.loads(provider.RECORDING.read_text(encoding="utf-8"))
SM13 = ("75_real", "80_real", "86_real", "89_real", "90_real", "100_real", "120_real", "120_virtual")
#: label -> (properties, platforms it is built for)
INDEX: dict[str, tuple[dict[str, tuple[str, ...]], tuple[str, ...]]] = {
    "cuda13.0": ({"cuda_version_lower_bound": ("13.0",), "sm_arch": SM13},
                 ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64")),
    # The cell's Windows wheel holds other architectures (no 8.9): its own label (ci/release/variants/writing.py).
    "cuda13.0.win": ({"cuda_version_lower_bound": ("13.0",), "sm_arch": tuple(v for v in SM13 if v != "89_real")},
                     ("win_amd64",)),
    "cuda12.8": ({"cuda_version_lower_bound": ("12.8",), "sm_arch": SM13}, ("manylinux_2_28_x86_64",)),
    "cuda12.4": ({"cuda_version_lower_bound": ("12.4",),
                  "sm_arch": ("75_real", "80_real", "86_real", "89_real", "90_real", "90_virtual")},
                 ("manylinux_2_28_x86_64",)),
    "null": ({}, ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "win_amd64")),
}
#: recorded machine -> the label a variant-aware installer picks (None: no variant wheel installs there)
EXPECT = {
    "a100_driver_too_old_for_ptx": "cuda12.4", "b200_cu130": "cuda13.0", "cpu_torch": "null",
    "driver_too_old_cu13": "cuda12.4", "gh200_aarch64": "cuda13.0", "h100_cu130": "cuda13.0",
    "h100_live_cu130": "cuda13.0", "h100_ptx_only": "cuda12.8", "h200_live_cu130": "cuda13.0",
    "no_torch_l4": "cuda13.0", "old_glibc_rhel8": "null", "python312_cu130": "cuda13.0",
    "python39_old": None, "rtx4090_cu128": "cuda12.8", "rtx5090_cu126_py312": "cuda12.8",
    "thor_aarch64_newer_than_sass": "null", "v100_older_than_sass": "null",
    # cuda13.0 ranks first on its RTX 4090 (89_real) but has no Windows wheel: the installer takes cuda13.0.win.
    "windows_rtx4090": "cuda13.0.win",
}


def _base_wheel(folder: Path, platform: str, cuda: str | None) -> Path:
    """A metadata-only stable-ABI wheel of demo_ext (what the doctor reads: METADATA, the farm's file)."""
    name = f"demo_ext-1.0.0-cp310-abi3-{platform}.whl"
    info = "demo_ext-1.0.0.dist-info"
    files = {
        "demo_ext/__init__.py": b"",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: demo_ext\nVersion: 1.0.0\nRequires-Python: >=3.10\n"
                            b"Requires-Dist: torch>=2.10\n\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp310-abi3-{platform}\n".encode(),
        f"{info}/cuda-ext-farm.json": json.dumps({"cuda": cuda, "abi": "stable", "sass": [], "ptx": []}).encode(),
        f"{info}/RECORD": b"",
    }
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return path


@pytest.fixture(scope="module")
def variant_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("base")
    items = []
    for label, (props, platforms) in INDEX.items():
        variant = release_variants.Variant(label, props)
        for platform in platforms:
            folder = base / label / platform
            folder.mkdir(parents=True)
            cuda = None if label == "null" else label.removeprefix("cuda").removesuffix(".win")
            items.append((_base_wheel(folder, platform, cuda), variant))
    return variant_writing.write_folder(tmp_path_factory.mktemp("release"), items, "demo_ext").folder


def _variantlib_order(index_file: Path, configs: list[list[Any]]) -> list[str]:
    """variantlib's own filter and order of the index's variants, given the provider's supported configs."""
    from variantlib.models.variant import VariantProperty
    from variantlib.resolver.lib import sort_and_filter_supported_variants
    from variantlib.variants_json import VariantsJson

    described = VariantsJson(json.loads(index_file.read_text(encoding="utf-8")))
    supported = [VariantProperty(release_variants.NAMESPACE, name, v) for name, values, _ in configs for v in values]
    ordered = sort_and_filter_supported_variants(list(described.variants.values()), supported,
                                                 namespace_priorities=list(described.namespace_priorities),
                                                 filter_values=True)
    return [v.label for v in ordered]


def _ours(machine: Any) -> list[list[Any]]:
    return [[f.name, list(f.values), f.multi_value] for f in doctor_variants.provider_features(machine)]


def test_every_recorded_machine_is_expected() -> None:
    assert {p.stem for p in ENVS.glob("*.json")} == set(EXPECT)


def test_the_providers_recording_covers_every_machine() -> None:
    assert RECORDED["provider"] == {"name": "nvidia-variant-provider", "version": RECORDED["provider"]["version"]}
    assert RECORDED["provider"]["version"]
    assert set(RECORDED["machines"]) == set(EXPECT)


@pytest.mark.parametrize("env", sorted(EXPECT))
def test_the_doctor_answers_as_the_real_provider_did(env: str) -> None:
    """ci/doctor/variants.py re-implements the provider (the doctor runs without it): its answer on each recorded
    machine is the provider's own, value for value and in the provider's order."""
    assert _ours(diagnose.load_env(ENVS / f"{env}.json")) == RECORDED["machines"][env]


@pytest.mark.parametrize("env", sorted(EXPECT))
def test_the_doctor_picks_what_variantlib_orders_first(env: str, variant_index: Path) -> None:
    machine = diagnose.load_env(ENVS / f"{env}.json")
    report = diagnose.doctor(variant_index, machine)
    pick, labels = report.variant_picks["demo-ext"]
    index_file = next(variant_index.glob("*-variants.json"))
    assert labels == _variantlib_order(index_file, RECORDED["machines"][env])  # the real provider's answer
    installable = [label for label in labels if any(
        diagnose._installable(v, machine) for v in report.projects["demo-ext"] if v.wheel.variant_label == label)]
    assert (pick.wheel.variant_label if pick else None) == EXPECT[env] == (installable[0] if installable else None)
    printed = "\n".join(report.lines())
    assert "variant-aware installer (PEP 825 draft, NVIDIA provider's rules): " in printed
    assert report.as_dict()["projects"]["demo-ext"]["variant"]["labels"] == labels


def test_a_windows_machine_picks_a_windows_variant_below_a_linux_one(variant_index: Path) -> None:
    pick, labels = diagnose.doctor(variant_index, diagnose.load_env(ENVS / "windows_rtx4090.json")).variant_picks[
        "demo-ext"]
    assert labels[:2] == ["cuda13.0", "cuda13.0.win"]
    assert pick is not None and pick.wheel.file == "demo_ext-1.0.0-cp310-abi3-win_amd64-cuda13.0.win.whl"


def test_provider_features_follow_the_providers_rules() -> None:
    h100 = diagnose.load_env(ENVS / "h100_ptx_only.json")  # driver CUDA 12.8, one compute capability 9.0 GPU
    lower, upper, sm = doctor_variants.provider_features(h100)
    assert lower.values[:10] == ("12.8", "12.7", "12.6", "12.5", "12.4", "12.3", "12.2", "12.1", "12.0", "12")
    assert lower.values[-2:] == ("11.0", "11") and "13.0" not in lower.values
    assert upper.values[0] == "15.20" and upper.values[-1] == "12.9" and "12" not in upper.values
    assert sm.values == ("90_real", "90_virtual") and sm.multi_value
    assert doctor_variants.provider_features(diagnose.load_env(ENVS / "cpu_torch.json")) == ()


def test_the_real_provider_answers_as_recorded() -> None:
    """Where nvidia-variant-provider is installed (in this interpreter, or the one FARM_TEST_PROVIDER_PYTHON names;
    its PyPI name holds a placeholder, docs/doctor.md says where it is published): asked again, it gives the
    recording, so the recording is the provider's and not an old one."""
    python = os.environ.get("FARM_TEST_PROVIDER_PYTHON") or sys.executable
    found = subprocess.run([python, "-c", "import nvidia_variant_provider.plugin"], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"nvidia-variant-provider is not installed in {python}: the recording was compared above")
    again = provider.derive(python)
    assert again["provider"] == RECORDED["provider"], "a new provider release: python -m ci.doctor.provider"
    assert again["machines"] == RECORDED["machines"]
