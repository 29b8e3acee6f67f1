"""``python -m ci doctor``: which wheel of an index fits a machine, judged for the recorded environments of
tests/fixtures/doctor/ against an index of metadata-only wheels built here, and once for this machine's own
interpreter (the real probe, end to end)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging import tags as pkg_tags
from packaging.utils import parse_wheel_filename

from ci.doctor import diagnose, rules
from ci.doctor import wheels as doctor_wheels
from ci.release import index

ROOT = Path(__file__).resolve().parents[3]
ENVS = ROOT / "tests" / "fixtures" / "doctor"
SASS13 = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]

#: file -> (index it is listed in, Requires-Dist torch, cuda-ext-farm.json or None for a wheel without one)
WHEELS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "demo_ext-1.0.0-cp310-abi3-manylinux_2_28_x86_64.whl":
        ("cu130", "torch>=2.10", {"cuda": "13.0", "sass": SASS13, "ptx": ["12.0"]}),
    "demo_ext-1.0.0+cu128-cp310-abi3-manylinux_2_28_x86_64.whl":
        ("cu128", "torch>=2.10", {"cuda": "12.8", "sass": SASS13, "ptx": ["12.0"]}),
    "demo_ext-1.0.0-cp310-abi3-manylinux_2_28_aarch64.whl":
        ("cu130", "torch>=2.10", {"cuda": "13.0", "sass": ["8.0", "9.0", "10.0", "12.0"], "ptx": ["12.0"]}),
    "demo_ext-1.0.0+pt2.11.cu130-cp311-cp311-manylinux_2_28_x86_64.whl":
        ("torch2.11-cu130", "torch==2.11.*", {"cuda": "13.0", "sass": SASS13, "ptx": ["12.0"]}),
    "demo_ext-1.0.0+pt2.10.cu128-cp311-cp311-manylinux_2_28_x86_64.whl":
        ("torch2.10-cu128", "torch==2.10.*", {"cuda": "12.8", "sass": SASS13, "ptx": ["12.0"]}),
    "demo_ext-1.0.0+pt2.13.cpu-cp311-cp311-manylinux_2_28_x86_64.whl":
        ("torch2.13-cpu", "torch==2.13.*", {"cuda": None, "sass": [], "ptx": []}),
    "demo_ext-1.0.0+cu124-cp310-abi3-manylinux_2_31_x86_64.whl":
        ("cu124", "torch>=2.10", {"cuda": "12.4", "sass": ["7.5", "8.0", "8.6", "8.9", "9.0"], "ptx": ["9.0"]}),
    "demo_ext-0.9.0+pt2.11.cu130-cp311-cp311-manylinux_2_28_x86_64.whl":
        ("torch2.11-cu130", "torch==2.11.*", {"cuda": "13.0", "sass": ["9.0a"], "ptx": []}),
    "demo_ext-0.8.0+cu128-cp310-abi3-manylinux_2_28_x86_64.whl":
        ("cu128", "torch>=2.8", {"cuda": "12.8", "sass": [], "ptx": ["8.0"]}),
    "demo_ext-0.7.0+cu130-cp310-abi3-manylinux_2_28_x86_64.whl": ("cu130", "torch>=2.10", None),
    "demo_ext-1.0.0-cp310-abi3-win_amd64.whl":
        ("cu130", "torch>=2.10", {"cuda": "13.0", "sass": SASS13, "ptx": ["12.0"]}),
}
STABLE13 = "demo_ext-1.0.0-cp310-abi3-manylinux_2_28_x86_64.whl"
STABLE128 = "demo_ext-1.0.0+cu128-cp310-abi3-manylinux_2_28_x86_64.whl"
ARM = "demo_ext-1.0.0-cp310-abi3-manylinux_2_28_aarch64.whl"
PT211 = "demo_ext-1.0.0+pt2.11.cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
PT210 = "demo_ext-1.0.0+pt2.10.cu128-cp311-cp311-manylinux_2_28_x86_64.whl"
CPU = "demo_ext-1.0.0+pt2.13.cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
CU124 = "demo_ext-1.0.0+cu124-cp310-abi3-manylinux_2_31_x86_64.whl"
HOPPER = "demo_ext-0.9.0+pt2.11.cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
PTX = "demo_ext-0.8.0+cu128-cp310-abi3-manylinux_2_28_x86_64.whl"
NOFILE = "demo_ext-0.7.0+cu130-cp310-abi3-manylinux_2_28_x86_64.whl"
WIN = "demo_ext-1.0.0-cp310-abi3-win_amd64.whl"

#: recorded environment -> (the wheel chosen, or None: nothing fits; {wheel: text its line must hold})
EXPECT: dict[str, tuple[str | None, dict[str, str]]] = {
    "cpu_torch": (CPU, {PT211: "needs torch==2.11.*", STABLE13: "its CUDA kernels won't run",
                        ARM: "built for aarch64 (manylinux_2_28_aarch64), this machine is x86_64",
                        WIN: "built for Windows x86_64 (win_amd64), this machine is Linux x86_64"}),
    "h100_cu130": (PT211, {STABLE128: "built for CUDA 12.8, this torch is built for CUDA 13.0",
                           HOPPER: "SASS for compute capability 9.0", NOFILE: "GPU code unknown",
                           CPU: "needs torch==2.13.*"}),
    "rtx4090_cu128": (PT210, {STABLE13: "CUDA 13.x needs an NVIDIA driver >= 580 (minor-version compatibility), "
                                        "this machine has 570.124.06",
                              PT211: "needs torch==2.11.*"}),
    "b200_cu130": (PT211, {HOPPER: "no code for GPU 0 (NVIDIA B200, compute capability 10.0): SASS 9.0a (9.0a: "
                                   "arch-specific", CU124: "built for CUDA 12.4, this torch is built for CUDA 13.0"}),
    "h100_ptx_only": (PTX, {PTX: "runs via PTX JIT on compute capability 9.0: first call compiles, slower start",
                            STABLE128: "needs torch>=2.10 (Requires-Dist), this environment has torch 2.9.1+cu128"}),
    "a100_driver_too_old_for_ptx": (None, {PTX: "PTX of CUDA 12.8 needs a driver for CUDA 12.8 or newer; this "
                                                "driver runs CUDA 12.4 at most"}),
    "driver_too_old_cu13": (None, {PT211: "CUDA 13.x needs an NVIDIA driver >= 580 (minor-version compatibility), "
                                          "this machine has 550.54.15",
                                   PT210: "the CUDA majors must match"}),
    "old_glibc_rhel8": (PT210, {CU124: "needs glibc 2.31 (manylinux_2_31_x86_64), this machine has 2.28",
                                STABLE128: "SASS for compute capability 8.0"}),
    "gh200_aarch64": (ARM, {PT211: "built for x86_64 (manylinux_2_28_x86_64), this machine is aarch64; built for "
                                   "CPython 3.11 (cp311-cp311), this is CPython 3.12 (cp312)"}),
    "thor_aarch64_newer_than_sass": (None, {ARM: "no code for GPU 0 (NVIDIA Thor, compute capability 11.0): SASS "
                                                 "8.0 9.0 10.0 12.0, PTX 12.0"}),
    "rtx5090_cu126_py312": (STABLE128, {CU124: "runs via PTX JIT on compute capability 12.0",
                                        PT210: "built for CPython 3.11 (cp311-cp311), this is CPython 3.12"}),
    "no_torch_l4": (PT211, {PT211: "torch is not installed: pip installs torch==2.11.* with it",
                            HOPPER: "no code for GPU 0 (NVIDIA L4, compute capability 8.9)",
                            CPU: "CPU build: runs on the CPU, not on the GPU"}),
    "python312_cu130": (STABLE13, {PT211: "built for CPython 3.11 (cp311-cp311), this is CPython 3.12 (cp312)"}),
    "python39_old": (None, {STABLE128: "needs CPython >= 3.10 (abi3 floor cp310), this is CPython 3.9",
                            PT210: "built for CPython 3.11 (cp311-cp311), this is CPython 3.9"}),
    "v100_older_than_sass": (None, {STABLE128: "no code for GPU 0 (Tesla V100-SXM2-32GB, compute capability 7.0): "
                                               "SASS 7.5 8.0 8.6 8.9 9.0 10.0 12.0, PTX 12.0",
                                    PTX: "no code for GPU 0"}),
    # Printed by ci/doctor/probe.py on an H200 (torch 2.11.0, CUDA 13.0, CPython 3.12): sys_tags() recorded.
    # The same probe on the H100 this session (python -m ci.doctor on an index of fusedops' real wheels chose the
    # x86_64 cu130 one for its sm_90 SASS).
    "h100_live_cu130": (STABLE13, {PT211: "built for CPython 3.11 (cp311-cp311), this is CPython 3.12 (cp312)",
                                   CU124: "built for CUDA 12.4, this torch is built for CUDA 13.0"}),
    "h200_live_cu130": (STABLE13, {PT211: "built for CPython 3.11 (cp311-cp311), this is CPython 3.12 (cp312)",
                                   CU124: "built for CUDA 12.4, this torch is built for CUDA 13.0"}),
    "windows_rtx4090": (WIN, {STABLE13: "built for Linux x86_64 (manylinux_2_28_x86_64), this machine is Windows "
                                        "x86_64"}),
}


def make_wheel(folder: Path, file: str, requirement: str, farm: dict[str, Any] | None) -> Path:
    """A metadata-only wheel: dist-info (METADATA, WHEEL, RECORD and the farm's coverage file) and a stub."""
    _name, version, _build, tags = parse_wheel_filename(file)
    info = f"demo_ext-{version}.dist-info"
    files = {
        "demo_ext/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: demo-ext\nVersion: {version}\nRequires-Python: >=3.10\n"
                            f"Requires-Dist: {requirement}\nRequires-Dist: numpy; extra == 'bench'\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                         + "".join(f"Tag: {t}\n" for t in sorted(map(str, tags))),
    }
    if farm is not None:
        files[f"{info}/{doctor_wheels.FARM_FILE}"] = json.dumps(
            {"format": 1, "target": "demo", "torch_requirement": requirement, **farm}, indent=1, sort_keys=True)
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / file, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return folder / file


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_release(tmp_path_factory.mktemp("release"))


def write_release(out: Path) -> Path:
    """A release folder as ci/release/assembly.py lays it out: assets/ and index/<variant>/demo-ext/index.html."""
    variants: dict[str, dict[str, list[index.IndexFile]]] = {}
    for file, (variant, requirement, farm) in WHEELS.items():
        wheel = make_wheel(out / "assets", file, requirement, farm)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        variants.setdefault(variant, {}).setdefault("demo-ext", []).append(
            index.IndexFile(file, index.file_url("../../../assets", file), digest, ">=3.10"))
    index.write_site(out / "index", variants)
    return out


def report(folder: Path, env: str) -> diagnose.Report:
    return diagnose.doctor(folder, diagnose.load_env(ENVS / f"{env}.json"))


def test_there_are_ten_or_more_recorded_environments_and_each_is_expected() -> None:
    recorded = {p.stem for p in ENVS.glob("*.json")}
    assert len(recorded) >= 10
    assert recorded == set(EXPECT)


@pytest.mark.parametrize("env", sorted(EXPECT))
def test_recorded_environment(env: str, release: Path) -> None:
    chosen, lines = EXPECT[env]
    found = report(release, env)
    verdicts = {v.wheel.file: v for v in found.projects["demo-ext"]}
    assert len(verdicts) == len(WHEELS)
    best = found.projects["demo-ext"][0]
    assert (best.wheel.file if best.fits else None) == chosen, [(v.wheel.file, v.reasons) for v in verdicts.values()]
    assert found.fits == (chosen is not None)
    for file, text in lines.items():
        v = verdicts[file]
        said = "; ".join(v.reasons) if not v.fits else f"{v.how}; {'; '.join(v.notes)}"
        assert text in said, f"{file}: {said}"


def test_every_other_wheel_gets_a_reason_or_a_rank(release: Path) -> None:
    found = report(release, "h100_cu130")
    text = "\n".join(found.lines())
    assert text.count("\n  demo_ext-") == len(WHEELS) - 1  # one line each, below the chosen one
    assert f"fits: {PT211} [torch2.11-cu130]" in text
    assert "install: pip install " + str((release / "assets" / PT211).resolve()) in text


@pytest.mark.parametrize("shape", ["release folder", "PEP 503 site", "one variant", "wheelhouse", "flat"])
def test_every_index_shape_gives_the_same_verdict(shape: str, release: Path, tmp_path: Path) -> None:
    folder = {"release folder": release, "PEP 503 site": release / "index", "one variant": release / "index/cu130",
              "wheelhouse": tmp_path / "wheelhouse", "flat": release / "assets"}[shape]
    if shape == "wheelhouse":
        for file, (variant, requirement, farm) in WHEELS.items():
            make_wheel(folder / f"demo-ext-{variant}-{file.split('-')[2]}-linux", file, requirement, farm)
    found = report(folder, "h100_cu130")
    expected = STABLE13 if shape == "one variant" else PT211
    assert found.projects["demo-ext"][0].wheel.file == expected
    assert found.shape == {"release folder": "PEP 503 site", "one variant": "PEP 503 site",
                           "flat": "folder of wheels"}.get(shape, shape)


def test_a_wheel_without_the_farm_file_or_behind_a_url_is_judged_by_its_name_and_index(tmp_path: Path) -> None:
    remote = [index.IndexFile(STABLE13, f"https://example.org/dl/{STABLE13}", "0" * 64),
              index.IndexFile(CPU, f"../../nowhere/{CPU}", "0" * 64)]
    index.write_site(tmp_path, {"cu130": {"demo-ext": remote}})
    found = {v.wheel.file: v for v in report(tmp_path, "h100_cu130").projects["demo-ext"]}
    assert found[STABLE13].fits and found[STABLE13].wheel.cuda == "13.0"
    assert "GPU code unknown" in found[STABLE13].how and "index cu130" in found[STABLE13].wheel.cuda_from
    assert "needs torch==2.13.*" in found[CPU].reasons[0]  # from its +pt2.13.cpu label


def test_gpu_code_rules() -> None:
    def arch(text: str) -> tuple[int, int, str]:
        found = rules._arch(text)
        assert found is not None
        return found

    assert rules._sass_runs(arch("8.0"), (8, 6)) and not rules._sass_runs(arch("8.6"), (8, 0))
    assert not rules._sass_runs(arch("9.0"), (10, 0))  # SASS never crosses a major
    assert rules._sass_runs(arch("9.0a"), (9, 0)) and not rules._sass_runs(arch("9.0a"), (9, 1))
    assert rules._sass_runs(arch("10.0f"), (10, 3)) and not rules._sass_runs(arch("10.3f"), (10, 0))
    assert rules._ptx_runs(arch("8.0"), (12, 0)) and not rules._ptx_runs(arch("12.0"), (11, 0))
    assert not rules._ptx_runs(arch("9.0a"), (10, 0))  # arch-specific PTX JITs for its own GPU only
    assert arch("sm_100a") == (10, 0, "a") and arch("120") == (12, 0, "")


def test_derived_tags_are_what_packaging_gives_this_interpreter() -> None:
    if not sys.platform.startswith("linux") or not platform.libc_ver()[1]:
        pytest.skip("a glibc Linux machine")
    raw = {"python": {"version": platform.python_version(), "implementation": sys.implementation.name},
           "platform": {"os": "linux", "machine": platform.machine(), "glibc": platform.libc_ver()[1]}}
    derived = rules.Machine.from_json(raw, "test").tags
    assert set(derived) == set(pkg_tags.sys_tags())


def test_probe_prints_json_for_this_interpreter() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "ci" / "doctor" / "probe.py")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT / "ci")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["python"]["version"] == platform.python_version()
    assert data["tags"][0] == str(next(iter(pkg_tags.sys_tags())))
    machine = rules.Machine.from_json(data, "probe")
    assert machine.tags[0] == next(iter(pkg_tags.sys_tags()))


def test_default_python_is_the_one_first_on_the_callers_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed command's launcher keeps the user's PATH in FARM_CALLER_PATH: doctor probes the `python` found
    there, not the one first on the PATH the farm's process has (its tool environment)."""
    user, farm = tmp_path / "user-bin", tmp_path / "farm-bin"
    for folder in (user, farm):
        folder.mkdir()
        script = folder / "python"
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{farm}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FARM_CALLER_PATH", str(user))
    assert diagnose.interpreter(None) == str(user / "python")
    monkeypatch.delenv("FARM_CALLER_PATH")  # no launcher: the process's own PATH
    assert diagnose.interpreter(None) == str(farm / "python")


def test_the_launcher_passes_the_callers_path(tmp_path: Path) -> None:
    """`cuda-ext-farm doctor`: the launcher hands the child the PATH the user had (FARM_CALLER_PATH)."""
    code = ("import os, sys\nfrom ci import launch, toolenv\n"
            "toolenv.farm_python = lambda lock='farm': sys.executable\n"
            "os.execve = lambda exe, argv, env: (print(env.get('FARM_CALLER_PATH')), sys.exit(0))\n"
            "launch.main(['doctor', '.'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"/user/bin{os.pathsep}/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"/user/bin{os.pathsep}/bin"


def test_a_wheel_that_only_imports_here_says_so(release: Path, tmp_path: Path) -> None:
    """A stable CUDA wheel next to a CPU-only torch loads, but its kernels cannot run: not a plain "fits"."""
    only = make_wheel(tmp_path / "wheels", STABLE13, "torch>=2.10", WHEELS[STABLE13][2])
    lines = diagnose.doctor(only.parent, diagnose.load_env(ENVS / "cpu_torch.json")).lines()
    assert f"demo-ext: fits (CPU import only here: no GPU): {STABLE13}: loads with a CPU-only torch" \
        in "\n".join(lines)
    full = "\n".join(report(release, "h100_cu130").lines())
    assert f"demo-ext: fits: {PT211}" in full


def test_when_the_interpreter_is_why_nothing_fits_the_line_names_python(release: Path) -> None:
    """Python 3.9 fits no wheel (abi3 floor cp310, cp311 builds): another interpreter of the machine may; a V100
    (no SASS for 7.0) fits none whatever the interpreter: no --python hint then."""
    old = report(release, "python39_old")
    hint = diagnose.interpreter_hint(old, ["demo-ext"])
    assert hint.startswith("the doctor judged ") and "--python PATH" in hint
    assert diagnose.interpreter_hint(report(release, "v100_older_than_sass"), ["demo-ext"]) == ""
