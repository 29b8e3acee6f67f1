"""torch.cuda.is_available() True in CUDA builds, and the device questions answered from the build's architecture list
(ci/builds/cuda_available.py, ci/buildsite/sitecustomize.py): which builds get ci/buildsite first on PYTHONPATH, and
what a real Python with it on its path sees (the test environment's torch, in subprocesses).

The container and Windows environments are tested beside their own (tests/unit/linux/test_container.py,
tests/unit/windows/test_win_build_commands.py); the fixture cuda_if_available builds a wheel with it
(tests/integration/test_fixture_projects.py).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.builds import cuda_available
from ci.linux import host
from ci.toolchain import toolkit
from ci.universe import targets
from ci.universe.project import reading
from ci.universe.tomlvalues import ConfigError

ROOT = Path(__file__).resolve().parents[3]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"


def classic(**changes: object) -> targets.Target:
    target = targets.targets_for(reading.load(CLASSIC))[0]
    return dataclasses.replace(target, project=dataclasses.replace(target.project, **changes)) if changes else target


def test_the_key_is_on_unless_the_project_turns_it_off(tmp_path: Path) -> None:
    assert reading.load(CLASSIC).cuda_available_in_build is True
    (tmp_path / "pyproject.toml").write_text('[tool.cuda-ext-farm]\nname = "x"\ncuda-available-in-build = false\n')
    assert reading.load(tmp_path).cuda_available_in_build is False
    (tmp_path / "pyproject.toml").write_text('[tool.cuda-ext-farm]\nname = "x"\ncuda-available-in-build = "no"\n')
    with pytest.raises(ConfigError, match="cuda-available-in-build"):
        reading.load(tmp_path)


def test_the_folder_holds_sitecustomize_alone() -> None:
    """Everything in it is importable by the project's build: nothing but the one module."""
    assert cuda_available.SITE == ROOT / "ci" / "buildsite"
    assert sorted(p.name for p in cuda_available.SITE.iterdir() if p.name != "__pycache__") == ["sitecustomize.py"]


def test_pythonpath_puts_the_folder_first_in_cuda_builds_alone(capsys: pytest.CaptureFixture[str]) -> None:
    target = classic()
    assert cuda_available.pythonpath(target, "/site", {}) == {"PYTHONPATH": "/site"}
    said = capsys.readouterr().err
    assert "torch.cuda.is_available() is True in this build" in said
    assert f"({target.cell.arch_list})" in " ".join(said.split())  # the list the devices answer from
    assert "ci/" not in said and "sitecustomize" not in said and "PYTHONPATH" not in said  # a user's words
    assert cuda_available.pythonpath(target, "/site", {}, "/a:/b") == {"PYTHONPATH": "/site:/a:/b"}
    # The project's own PYTHONPATH (build-env) replaces the inherited one, after the farm's folder.
    assert cuda_available.pythonpath(target, "/site", {"PYTHONPATH": "/own"}, "/a") == {"PYTHONPATH": "/site:/own"}
    assert cuda_available.pythonpath(target, r"C:\site", {}, r"C:\a", ";") == {"PYTHONPATH": r"C:\site;C:\a"}
    capsys.readouterr()
    assert cuda_available.pythonpath(dataclasses.replace(target, cpu=True), "/site", {}, "/a") == {}
    assert cuda_available.pythonpath(classic(cuda_available_in_build=False), "/site", {}, "/a") == {}
    assert "is_available" not in capsys.readouterr().err  # said only by a build that applies it


def test_host_builds_get_it_before_the_callers_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ci/linux/host.py compiler_env: the host build, the aarch64 cross build and develop."""
    monkeypatch.setenv("PYTHONPATH", "/caller")
    tk = toolkit.InstalledToolkit(root=tmp_path, cuda_home=tmp_path / "cu13", nvcc_version="13.0.88")
    env = host.compiler_env(classic(), tk, max_jobs=1)
    assert env["PYTHONPATH"] == f"{cuda_available.SITE}{os.pathsep}/caller" and env["FORCE_CUDA"] == "1"
    assert "PYTHONPATH" not in host.compiler_env(classic(), None, cpu=True, max_jobs=1)
    assert "PYTHONPATH" not in host.compiler_env(classic(cuda_available_in_build=False), tk, max_jobs=1)


# --- the sitecustomize itself, in a real Python with the test environment's torch -------------------------------

PROBE = """
import json, os, sys, torch
cuda = torch.cuda
found = {"available": cuda.is_available(), "devices": cuda.device_count(),
         "real": getattr(cuda.is_available, "__wrapped__", cuda.is_available)(),
         "real_devices": getattr(cuda.device_count, "__wrapped__", cuda.device_count)(),
         "other": getattr(sys, "_other_sitecustomize_runs", 0), "ran": getattr(sys, "_cuda_ext_farm_sitecustomize", []),
         "hook": [type(f).__name__ for f in sys.meta_path][:1]}
if found["devices"]:
    found["capabilities"] = [list(cuda.get_device_capability(i)) for i in range(cuda.device_count())]
    found["default"] = list(cuda.get_device_capability())
    props = cuda.get_device_properties("cuda:1")
    found["properties"] = [props.major, props.minor, cuda.get_device_name(1)]
    try:
        cuda.get_device_capability(cuda.device_count())
    except AssertionError as exc:
        found["out_of_range"] = str(exc)
"""

#: Then a setup.py that writes TORCH_CUDA_ARCH_LIST from the GPUs it sees (so does torch itself for an empty list),
#: in the same Python (one import of torch per case).
FROM_DEVICES = """
from torch.utils import cpp_extension
archs = []
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        archs.append(f"{major}.{minor}")


def flags(value):
    os.environ["TORCH_CUDA_ARCH_LIST"] = value
    try:
        return cpp_extension._get_cuda_arch_flags()
    except IndexError as exc:
        return f"IndexError: {exc}"


if torch.version.cuda is not None:  # torch's fallback reads the architectures a CUDA torch was built for
    found |= {"written": flags(";".join(archs)), "fallback": flags("")}
print(json.dumps(found))
"""


def run(code: str, pythonpath: str | None, cwd: Path, archs: str = "8.0 9.0+PTX",
        python: str = sys.executable) -> dict[str, object]:
    import json

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCH_CUDA_ARCH_LIST")}
    env["TORCH_CUDA_ARCH_LIST"] = archs
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    result = subprocess.run([python, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """Another folder's sitecustomize, later on the path (the one the farm's hides), counting its runs."""
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text("import sys\n"
                                             "sys._other_sitecustomize_runs = getattr(sys, '_other_sitecustomize_runs',"
                                             " 0) + 1\n")
    return folder


def test_a_python_with_the_folder_on_its_path_sees_the_architecture_list_as_its_gpus(tmp_path: Path,
                                                                                      other: Path) -> None:
    """is_available() True, one device per architecture of the list the build started with (8.0 9.0+PTX: two, the
    9.0 of "+PTX" a capability like any), newest first: the default device (no index) is 9.0, device 1 is 8.0 for
    every question; torch's own answers at __wrapped__;
    the sitecustomize it hides still runs, once. A setup.py that then writes TORCH_CUDA_ARCH_LIST from those GPUs
    writes the farm's architectures, and torch's own fallback for an empty list finds them too; without the folder
    that fallback dies with the IndexError the farm's failure reader names (failure/causes.py empty_arch_list)."""
    torch = pytest.importorskip("torch")
    plain = run(PROBE + FROM_DEVICES, str(other), tmp_path)
    assert plain["other"] == 1 and plain["hook"] != ["CudaAvailableFinder"] and plain["devices"] == 0
    patched = run(PROBE + FROM_DEVICES, os.pathsep.join([str(cuda_available.SITE), str(other)]), tmp_path)
    assert patched["available"] is True and patched["hook"] == ["CudaAvailableFinder"]
    assert patched["real"] == plain["available"] and patched["real_devices"] == plain["devices"]
    assert patched["devices"] == 2 and patched["capabilities"] == [[9, 0], [8, 0]] and patched["default"] == [9, 0]
    assert patched["properties"] == [8, 0, "no GPU: the build's architecture 8.0"]
    assert "Invalid device id 2" in str(patched["out_of_range"])
    assert patched["other"] == 1
    if torch.version.cuda is None:
        pytest.skip("torch's fallback reads the architectures a CUDA build of torch was compiled for")
    assert patched["written"] == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
    assert patched["fallback"] == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=compute_90",
                                   "-gencode=arch=compute_90,code=sm_90"]
    assert plain["written"] == plain["fallback"] == "IndexError: list index out of range"


def test_two_copies_of_the_folder_on_the_path_run_once_each_and_chain_on(tmp_path: Path, other: Path) -> None:
    """A container's mount and the host's folder both on PYTHONPATH: the second copy is passed over (no
    RecursionError), the hook is installed once, the other sitecustomize runs once."""
    pytest.importorskip("torch")
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(cuda_available.SITE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = os.pathsep.join([str(cuda_available.SITE), str(copy), str(other)])
    found = run(PROBE + "print(json.dumps(found))\n", path, tmp_path)
    assert found["other"] == 1 and found["devices"] == 2 and found["hook"] == ["CudaAvailableFinder"]
    assert [Path(str(p)).parent.name for p in found["ran"]] == ["buildsite", "copy", "other"]  # type: ignore[union-attr]


def test_the_distributions_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    """Debian's Python has /usr/lib/python3.X/sitecustomize.py: it runs after the farm's."""
    system = Path("/usr/bin/python3")
    if not system.is_file():
        pytest.skip("no system Python")
    probe = subprocess.run([str(system), "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                           capture_output=True, text=True, check=True)
    own = Path(probe.stdout.strip()) / "sitecustomize.py"
    if not own.exists():
        pytest.skip(f"{system} has no sitecustomize of its own")
    found = run("import json, sys; print(json.dumps({'ran': sys._cuda_ext_farm_sitecustomize}))",
                str(cuda_available.SITE), tmp_path, python=str(system))
    assert found["ran"] == [str(cuda_available.SITE / "sitecustomize.py"), str(own)]


#: A setup.py that builds its bf16 and FP8 kernels only for a GPU that can run them (asking the default device), and
#: reads every device for the rest, in the same Python (issue 45, item 8).
CAPABLE = """
major, minor = torch.cuda.get_device_capability()
kernels = ["base"] + (["bf16"] if major >= 8 else []) + (["fp8"] if (major, minor) >= (8, 9) else [])
by_index = {i: [list(torch.cuda.get_device_capability(i)),
                [torch.cuda.get_device_properties(i).major, torch.cuda.get_device_properties(i).minor],
                torch.cuda.get_device_name(i)] for i in range(torch.cuda.device_count())}
found |= {"kernels": kernels, "by_index": by_index, "name": torch.cuda.get_device_name(),
          "current": list(torch.cuda.get_device_capability(torch.device("cuda")))}
print(json.dumps(found))
"""


def test_the_default_device_is_the_newest_architecture_so_capability_gated_kernels_are_built(tmp_path: Path) -> None:
    """The farm's list as it writes it, oldest first (7.5 8.0 8.6 9.0+PTX, and 8.9 among them): a setup.py that
    asks get_device_capability() with no index builds its FP8 kernels, as on the newest GPU the wheel serves; device
    i is the i-th from the newest down, and every question about it agrees."""
    pytest.importorskip("torch")
    found = run(PROBE + CAPABLE, str(cuda_available.SITE), tmp_path, archs="7.5;8.0;8.6;8.9;9.0+PTX")
    assert found["default"] == [9, 0] and found["current"] == [9, 0]
    assert found["kernels"] == ["base", "bf16", "fp8"]
    by_index = found["by_index"]
    assert isinstance(by_index, dict)
    assert [by_index[str(i)][0] for i in range(5)] == [[9, 0], [8, 9], [8, 6], [8, 0], [7, 5]]
    assert all(cap == props and name == f"no GPU: the build's architecture {cap[0]}.{cap[1]}"
               for cap, props, name in by_index.values())
    assert found["name"] == by_index["0"][2]
