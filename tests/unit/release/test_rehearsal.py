"""The release dry run runs the generated workflow's import-test commands, changed only where this machine
cannot reach what GitHub can (PyTorch's indexes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.errors import CommandFailed, UsageError
from ci.release import import_steps, install_checks, rehearsal
from ci.release import manifest as release_manifest
from ci.toolchain import envs
from ci.universe import targets
from ci.universe.project import reading
from ci.universe.selection import Selection, select

ROOT = Path(__file__).resolve().parents[3]


def test_the_dry_run_runs_the_workflows_own_import_commands_on_the_targets_python(tmp_path: Path) -> None:
    config = reading.load(ROOT)
    target = select(config, Selection(cuda="12.4"))[0]  # the local stand-in of cu128
    wheel = tmp_path / "x.whl"
    commands = dict(import_steps.import_commands(target))
    assert len(commands) == 2  # fusedops declares cpu-libraries: a CPU and a CUDA import test
    for command in commands.values():
        local = rehearsal.local_command(command, wheel=wheel, cpu_torch="2.13.0")
        assert local[:3] == [sys.executable, "-m", "ci"]
        assert "--torch-index" not in local and local[local.index("import-test") + 1] == str(wheel)
        assert local[local.index("--test-python") + 1] == target.python == "3.10"
        assert local[local.index("--target") + 1] == target.id
        # Everything else is the generated command's, in its order.
        kept = [w for w in command.split()[3:] if not w.startswith("https://") and w not in ("--torch-index", "dist")]
        assert [w for w in local[3:] if w not in (str(wheel), "--cpu-torch", "2.13.0")] == kept
        assert ("--cpu-torch" in local) == ("--torch-kind cpu" in command)


def test_only_farm_commands_are_rehearsed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a farm command"):
        rehearsal.local_command("pip install x", wheel=tmp_path, cpu_torch=None)


# --- the CPU-only import test's torch: what pip can get, never a +cpu build the index lacks (issue 20, item 4) --

#: What PyPI offers a CPython 3.10 on Linux (pip index versions torch): CUDA builds only, no local labels.
PYPI = ("2.14.1", "2.13.0", "2.12.1", "2.11.0", "2.10.0", "2.9.1", "2.8.0")
#: This machine's pip: PyPI and one local CPU wheel (a find-links folder).
HERE = ("2.13.0+cpu", *PYPI)
#: PyTorch's CPU index, the workflow's (--torch-index https://download.pytorch.org/whl/cpu).
PYTORCH_CPU = ("2.13.0+cpu", "2.11.0+cpu", "2.10.0+cpu")


@pytest.mark.parametrize(("needed", "stable", "cpu_torch", "offered", "source", "requirement", "record"), [
    # A stable-ABI wheel: any CPU torch at or above its floor proves its CPU import.
    ("2.10.0", True, "2.13.0", HERE, "cpu-torch", "torch==2.13.0+cpu",
     "torch 2.13.0+cpu (the CPU build --cpu-torch names)"),
    ("2.11.0", True, "2.13", HERE, "cpu-torch", "torch==2.13.0+cpu",
     "torch 2.13.0+cpu (the CPU build --cpu-torch names)"),
    # ... below its floor it does not: PyPI's build of the cell's torch, a CUDA build, with no GPU.
    ("2.13.0", True, "2.11.0", ("2.11.0+cpu", *PYPI), "cuda-no-gpu", "torch==2.13.0,!=2.13.0+cpu",
     "torch 2.13.0 (PyPI's CUDA 13.0 build, no GPU; --cpu-torch 2.11.0: below the wheel's floor 2.13)"),
    # A fresh machine: PyPI alone, no --cpu-torch (the CUDA 12 cell that stopped the dry run).
    ("2.10.0", True, None, PYPI, "cuda-no-gpu", "torch==2.10.0,!=2.10.0+cpu",
     "torch 2.10.0 (PyPI's CUDA 12.8 build, no GPU)"),
    ("2.11.0", True, None, PYPI, "cuda-no-gpu", "torch==2.11.0,!=2.11.0+cpu",
     "torch 2.11.0 (PyPI's CUDA 13.0 build, no GPU)"),
    # --cpu-torch names a build the index does not have: never installed, PyPI's build instead.
    ("2.10.0", True, "2.13.0", PYPI, "cuda-no-gpu", "torch==2.10.0,!=2.10.0+cpu",
     "torch 2.10.0 (PyPI's CUDA 12.8 build, no GPU; --cpu-torch 2.13.0: pip's indexes has no torch 2.13.0+cpu)"),
    # A classic wheel needs its own release: the CPU torch of another minor does not prove it.
    ("2.11.0", False, "2.13.0", HERE, "cuda-no-gpu", "torch==2.11.0,!=2.11.0+cpu",
     "torch 2.11.0 (PyPI's CUDA 13.0 build, no GPU; --cpu-torch 2.13.0: not the wheel's torch 2.11)"),
    ("2.13.0", False, "2.13.0", HERE, "cpu-torch", "torch==2.13.0+cpu",
     "torch 2.13.0+cpu (the CPU build --cpu-torch names)"),
    ("2.10.0", False, None, PYPI, "cuda-no-gpu", "torch==2.10.0,!=2.10.0+cpu",
     "torch 2.10.0 (PyPI's CUDA 12.8 build, no GPU)"),
    # The workflow: PyTorch's CPU index has the CPU build of the wheel's own torch.
    ("2.10.0", True, None, PYTORCH_CPU, "cpu-build", "torch==2.10.0+cpu",
     "torch 2.10.0+cpu (the CPU build from https://download.pytorch.org/whl/cpu)"),
    ("2.11.0", False, None, PYTORCH_CPU, "cpu-build", "torch==2.11.0+cpu",
     "torch 2.11.0+cpu (the CPU build from https://download.pytorch.org/whl/cpu)"),
])
def test_the_cpu_import_takes_the_first_torch_pip_can_get(
        needed: str, stable: bool, cpu_torch: str | None, offered: tuple[str, ...], source: str, requirement: str,
        record: str) -> None:
    index_url = "https://download.pytorch.org/whl/cpu" if offered is PYTORCH_CPU else None
    choice = install_checks.choose_cpu_torch(needed, stable=stable, cpu_torch=cpu_torch, offered=offered,
                                             index_url=index_url)
    assert (choice.source, choice.requirement, choice.record) == (source, requirement, record)
    assert choice.hide_gpu == (source == "cuda-no-gpu")


def test_no_torch_the_index_lacks_is_ever_chosen() -> None:
    """Every wheel kind x CPU torch x what the index offers: the chosen version is one pip listed."""
    from packaging.version import Version

    menus = [PYPI, HERE, PYTORCH_CPU, ("2.13.0+cpu",), ("2.10.0", "2.10.0+cpu"), ("2.11.0+cpu", "2.10.0")]
    for needed in ("2.10.0", "2.11.0", "2.13.0"):
        for stable in (True, False):
            for cpu_torch in (None, "2.10.0", "2.11.0", "2.13.0"):
                for offered in menus:
                    try:
                        choice = install_checks.choose_cpu_torch(needed, stable=stable, cpu_torch=cpu_torch,
                                                                 offered=offered)
                    except UsageError as exc:
                        assert Version(needed) not in {Version(v) for v in offered}, exc.line()
                        continue
                    assert choice.version in offered
                    assert choice.requirement.split(",")[0] == f"torch=={choice.version}"
                    assert choice.version.endswith("+cpu") != choice.hide_gpu
                    if not stable:
                        assert choice.version.startswith(needed.rpartition(".")[0] + ".")


def test_no_torch_at_all_is_one_line_not_pips_no_matching_distribution() -> None:
    with pytest.raises(UsageError, match=r"pip can get no torch 2\.10\.0 for the CPU-only import test") as caught:
        install_checks.choose_cpu_torch("2.10.0", stable=True, cpu_torch="2.13.0", offered=("2.11.0+cpu", "2.9.1"))
    assert "--cpu-torch VERSION" in caught.value.line() and "download.pytorch.org/whl/cpu" in caught.value.line()


def test_pip_index_versions_output_is_read() -> None:
    text = ("torch (2.15.0)\nAvailable versions: 2.15.0, 2.13.0+cpu, 2.10.0\n  INSTALLED: 2.13.0+cpu\n"
            "  LATEST:    2.15.0\n")
    assert envs.parse_index_versions(text) == ("2.15.0", "2.13.0+cpu", "2.10.0")
    assert envs.parse_index_versions("ERROR: No matching distribution found for torch\n") == ()


def _cu124_wheel(out: Path) -> tuple[targets.Target, release_manifest.Manifest]:
    config = reading.load(ROOT)
    target = select(config, Selection(cuda="12.4"))[0]  # the local stand-in of cu128
    name = "fusedops-0.1.0+cu124-cp310-abi3-manylinux_2_28_x86_64.whl"
    (out / "assets").mkdir(parents=True)
    (out / "assets" / name).write_bytes(b"")
    item = release_manifest.ReleaseFile(name, "0" * 64, 0, "wheel", False, "a variant", target=target.id,
                                        os="linux", variant="cu124", cuda="12.4", torch=target.torch, python="3.10",
                                        tags=("cp310-abi3-manylinux_2_28_x86_64",), abi="stable")
    return target, release_manifest.Manifest("fusedops", "0.1.0", None, None, "cu130", (item,))


@pytest.mark.skipif(sys.platform != "linux", reason="a Linux wheel's import steps run on Linux")
@pytest.mark.parametrize(("cpu_torch", "cpu_python", "expected", "test_python"), [
    # A machine with PyPI alone: PyPI's CUDA build of the cell's torch, on the target's CPython.
    (None, None, "; here: torch 2.10.0 (PyPI's CUDA 12.8 build, no GPU)", "3.10"),
    # This machine: its one CPU wheel (cp311), on the CPython it has a wheel for.
    ("2.13.0", "3.11", "; here: CPython 3.11, torch 2.13.0+cpu (the CPU build --cpu-torch names)", "3.11"),
])
def test_the_dry_run_records_the_torch_of_its_cpu_import(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_torch: str | None, cpu_python: str | None,
        expected: str, test_python: str) -> None:
    target, manifest = _cu124_wheel(tmp_path)
    monkeypatch.setattr(envs, "offered_torch",
                        lambda python, index_url: HERE if python == "3.11" else PYPI)
    from ci import proc

    ran: list[list[str]] = []
    monkeypatch.setattr(proc, "run", lambda cmd, **kw: ran.append([str(c) for c in cmd]))
    checks = rehearsal.import_tests(tmp_path, manifest, {target.id: target}, ROOT, cpu_torch=cpu_torch,
                                    cpu_python=cpu_python)[manifest.files[0].name]
    assert checks["import-cpu"] == "ok: Import on CPython 3.10 with a CPU-only torch 2.10.0" + expected
    assert checks["import-cuda"] == "ok: Import on CPython 3.10 with the CUDA torch of cu124 (torch 2.10.0)"
    cpu = next(cmd for cmd in ran if "cpu" in cmd)
    assert cpu[cpu.index("--test-python") + 1] == test_python
    assert ("--cpu-torch" in cpu) == (cpu_torch is not None)


class _Ran:
    def __init__(self, gpu: str) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.gpu = gpu

    def __call__(self, cmd: list[object], *, env: dict[str, str] | None = None,
                 **kw: object) -> subprocess.CompletedProcess[str]:
        args = [str(c) for c in cmd]
        self.calls.append((args, dict(env or {})))
        return subprocess.CompletedProcess(args, 0, f"2.10.0+cu128\n{self.gpu}\n", "")


def test_the_cpu_import_of_a_cuda_build_sees_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ci import proc
    from ci.toolchain import envs

    target, manifest = _cu124_wheel(tmp_path)
    made: list[tuple[str, str | None]] = []

    def build_env(python: str, requirement: str | None, extra: object = ()) -> envs.PythonEnv:
        made.append((python, requirement))
        return envs.PythonEnv(tmp_path / "base")

    monkeypatch.setattr(envs, "offered_torch", lambda python, index_url: PYPI)
    monkeypatch.setattr(envs, "build_env", build_env)
    monkeypatch.setattr(envs, "ensure_env", lambda *a, **kw: pytest.fail("a +cpu environment was made"))
    monkeypatch.setattr(envs, "test_env", lambda base, folder: envs.PythonEnv(folder))
    ran = _Ran("False")
    monkeypatch.setattr(proc, "run", ran)
    wheel = tmp_path / "assets" / manifest.files[0].name
    result = install_checks.import_test(target, "cpu", wheel=wheel, python="3.10", index_url=None, cpu_torch=None)
    assert result == "ok: smoke under torch 2.10.0+cu128 (PyPI's CUDA 12.8 build, no GPU)"
    # The CUDA import test's own environment: PyPI's CUDA build of the cell's torch, one download for both tests.
    assert made == [("3.10", envs.TorchBuild(target.torch))]
    pip = [env for cmd, env in ran.calls if "pip" in cmd]
    imports = [env for cmd, env in ran.calls if "pip" not in cmd and "index" not in cmd]
    assert pip and imports and all(env.get("CUDA_VISIBLE_DEVICES") == "" for env in imports)
    assert all(env.get("FARM_LANE") == "import-cpu" for env in imports)

    monkeypatch.setattr(proc, "run", _Ran("True"))
    with pytest.raises(CommandFailed, match="sees a GPU"):
        install_checks.import_test(target, "cpu", wheel=wheel, python="3.10", index_url=None, cpu_torch=None)
