"""``doctor`` and a wheel across CUDA majors (``pypi-cuda-majors``): a machine with PyPI's CUDA 12 torch and one with
its CUDA 13 torch both fit, each through the build of its own major (cuda-ext-farm.json ``majors``); a torch of a
major the wheel lacks does not."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from ci.doctor import diagnose
from ci.doctor import wheels as doctor_wheels

ROOT = Path(__file__).resolve().parents[3]
ENVS = ROOT / "tests" / "fixtures" / "doctor"
FILE = "demo_ext-1.0.0-cp310-abi3-manylinux_2_31_x86_64.whl"
MAJORS = {"12": {"cuda": "12.4", "sass": ["7.5", "8.0", "8.6", "8.9", "9.0"], "ptx": [], "target": "t12"},
          "13": {"cuda": "13.0", "sass": ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"], "ptx": [], "target": "t13"}}


def wheel(folder: Path) -> Path:
    info = "demo_ext-1.0.0.dist-info"
    farm = {"format": 1, "abi": "stable", "cuda": "13.0", "sass": ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"],
            "ptx": [], "torch_requirement": "torch>=2.10", "majors": MAJORS}
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / FILE, "w") as zf:
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo-ext\nVersion: 1.0.0\n"
                    "Requires-Python: >=3.10\nRequires-Dist: torch>=2.10\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                    "Tag: cp310-abi3-manylinux_2_31_x86_64\n")
        zf.writestr(f"{info}/{doctor_wheels.FARM_FILE}", json.dumps(farm))
    return folder / FILE


def verdict(folder: Path, env: Path) -> diagnose.Verdict:
    return diagnose.doctor(folder, diagnose.load_env(env)).projects["demo-ext"][0]


def test_a_cuda_12_torch_and_a_cuda_13_torch_both_fit(tmp_path: Path) -> None:
    wheel(tmp_path / "wheels")
    facts = doctor_wheels.read(doctor_wheels.list_index(tmp_path / "wheels")[1][0])
    assert facts.majors == {12: ("12.4", tuple(MAJORS["12"]["sass"]), ()), 13: ("13.0", tuple(MAJORS["13"]["sass"]),
                                                                                 ())}
    rtx = verdict(tmp_path / "wheels", ENVS / "rtx4090_cu128.json")  # torch 2.10.0+cu128, sm_89
    assert rtx.fits and rtx.how == "SASS for compute capability 8.9", rtx.reasons
    assert "carries builds for CUDA 12, 13: its CUDA 12 build (12.4) loads with this torch" in rtx.notes
    h100 = verdict(tmp_path / "wheels", ENVS / "h100_cu130.json")
    assert h100.fits and h100.how == "SASS for compute capability 9.0", h100.reasons
    assert "its CUDA 13 build (13.0) loads with this torch" in "; ".join(h100.notes)
    assert h100.as_dict()["majors"]["12"]["cuda"] == "12.4"


def test_a_torch_of_another_major_does_not_fit(tmp_path: Path) -> None:
    wheel(tmp_path / "wheels")
    env = json.loads((ENVS / "h100_cu130.json").read_text())
    env["torch"] = {"version": "2.11.0", "cuda": "11.8"}
    (tmp_path / "cu118.json").write_text(json.dumps(env))
    found = verdict(tmp_path / "wheels", tmp_path / "cu118.json")
    assert not found.fits
    assert found.reasons == ["built for CUDA 12, 13, this torch is built for CUDA 11.8 (torch.version.cuda): no build "
                             "of that major in the wheel"]
