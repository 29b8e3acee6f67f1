"""The doctor's pick among variant wheels (ci/doctor/variants.py) agrees with variantlib's own ordering
(``sort_and_filter_supported_variants``, the function an installer calls) on every recorded machine of
tests/fixtures/doctor/, for an index of variant wheels written by ci/release/variants.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ci.doctor import diagnose
from ci.doctor import variants as doctor_variants
from ci.release import variants as release_variants

ROOT = Path(__file__).resolve().parents[3]
ENVS = ROOT / "tests" / "fixtures" / "doctor"
SM13 = ("75_real", "80_real", "86_real", "89_real", "90_real", "100_real", "120_real", "120_virtual")
#: label -> (properties, platforms it is built for)
INDEX: dict[str, tuple[dict[str, tuple[str, ...]], tuple[str, ...]]] = {
    "cuda13.0": ({"cuda_version_lower_bound": ("13.0",), "sm_arch": SM13},
                 ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64")),
    # The cell's Windows wheel holds other architectures (no 8.9): its own label (ci/release/variants.py).
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
    return release_variants.write_folder(tmp_path_factory.mktemp("release"), items, "demo_ext").folder


def _variantlib_order(index_file: Path, machine: Any) -> list[str]:
    """variantlib's own filter and order of the index's variants, given the provider's supported properties."""
    from variantlib.models.variant import VariantProperty
    from variantlib.resolver.lib import sort_and_filter_supported_variants
    from variantlib.variants_json import VariantsJson

    described = VariantsJson(json.loads(index_file.read_text(encoding="utf-8")))
    supported = [VariantProperty(release_variants.NAMESPACE, f.name, v)
                 for f in doctor_variants.provider_features(machine) for v in f.values]
    ordered = sort_and_filter_supported_variants(list(described.variants.values()), supported,
                                                 namespace_priorities=list(described.namespace_priorities),
                                                 filter_values=True)
    return [v.label for v in ordered]


def test_every_recorded_machine_is_expected() -> None:
    assert {p.stem for p in ENVS.glob("*.json")} == set(EXPECT)


@pytest.mark.parametrize("env", sorted(EXPECT))
def test_the_doctor_picks_what_variantlib_orders_first(env: str, variant_index: Path) -> None:
    machine = diagnose.load_env(ENVS / f"{env}.json")
    report = diagnose.doctor(variant_index, machine)
    pick, labels = report.variant_picks["demo-ext"]
    index_file = next(variant_index.glob("*-variants.json"))
    assert labels == _variantlib_order(index_file, machine)
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


def test_the_features_are_the_real_providers_where_it_is_installed(tmp_path: Path) -> None:
    """With nvidia-variant-provider importable (its PyPI release is a placeholder; point PYTHONPATH at a checkout),
    its get_supported_configs under the recorded driver and GPU equals provider_features."""
    probe = ("import json; from nvidia_variant_provider.plugin import NvidiaVariantPlugin as P; "
             "print(json.dumps([[c.name, list(c.values)] for c in P.get_supported_configs()]))")
    found = subprocess.run([sys.executable, "-c", "import nvidia_variant_provider.plugin"], capture_output=True,
                           check=False)
    if found.returncode != 0:
        pytest.skip("nvidia-variant-provider is not installed")
    for env in sorted(EXPECT):
        machine = diagnose.load_env(ENVS / f"{env}.json")
        caps = sorted((g.capability for g in machine.gpus if g.capability), reverse=True)
        if not machine.driver_cuda or not caps:
            continue  # the provider would ask NVML: no override says "no GPU"
        forced = {"NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": machine.driver_cuda,
                  "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": f"{caps[0][0]}.{caps[0][1]}"}
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              env={**os.environ, **forced})
        theirs = [tuple(x) for x in json.loads(done.stdout)]
        ours = [(f.name, list(f.values)) for f in doctor_variants.provider_features(machine)]
        assert [(n, list(v)) for n, v in theirs] == ours, env
