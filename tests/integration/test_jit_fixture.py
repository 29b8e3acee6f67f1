"""A JIT-only project (tests/fixtures/jit_only/): its package compiles its C++ and CUDA sources with
``torch.utils.cpp_extension.load()`` at import, and nothing of it is built by setup.py.

The farm's part is ``cuda-ext-farm jit -- COMMAND``, run from the project's own folder: the command is the
user's, with the user's ``python`` and torch (the first ``python`` on the caller's PATH), and the farm adds its
hermetic CUDA toolkit (``CUDA_HOME``, ``nvcc`` on PATH) for load(). The fixture is copied into pytest's tmp_path
and its own tests run that way.

The user's environment is a venv that sees torch 2.11's CUDA build in the farm's cached build environment (the
one tests/integration/test_fixture_projects.py builds with, so nothing big is downloaded: a CPU build of torch cannot
compile CUDA sources with load(), it has no libtorch_cuda to link) plus pytest and ninja of its own, as
``pip install torch pytest ninja`` would make it. One architecture (TORCH_CUDA_ARCH_LIST=9.0), compiled once
for the module, into a TORCH_EXTENSIONS_DIR in tmp_path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import toolenv
from ci.audit import gpu_code
from ci.toolchain import envs, toolkit
from ci.universe import matrix, project
from windows import jit

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "jit_only"
PYTHON = "3.11"
#: torch 2.11's CUDA 13.0 build, the torch of tests/integration/test_fixture_projects.py's build environment.
TORCH_VERSION = "2.11.0"
CUDA = "13"


@dataclasses.dataclass
class JitRun:
    project: Path
    extensions: Path
    user: envs.PythonEnv
    before: dict[str, str]
    result: subprocess.CompletedProcess[str]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder`` with a digest of its content and its modification time."""
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_dir():
            out[key] = f"dir {path.stat().st_mtime_ns}"
        else:
            out[key] = f"{hashlib.sha256(path.read_bytes()).hexdigest()} {path.stat().st_mtime_ns}"
    return out


def user_env_vars(user: envs.PythonEnv, extensions: Path) -> dict[str, str]:
    """The caller's environment: the user's venv activated, no CUDA toolkit of its own (so what load() finds
    is the farm's), one architecture, the extensions' build folder in tmp_path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "PYTHONPATH", "PYTHONHOME")}
    env.update({
        "PATH": os.pathsep.join([str(user.bin_dir), os.environ.get("PATH", "")]),
        "VIRTUAL_ENV": str(user.root),
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "TORCH_EXTENSIONS_DIR": str(extensions),
        # The user's choice for this run: Python writes no __pycache__ into the project (nor does pytest,
        # whose cache the project's pyproject.toml turns off), so any file there would be the farm's doing.
        "PYTHONDONTWRITEBYTECODE": "1",
        "COLUMNS": "250",
    })
    return env


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> envs.PythonEnv:
    """A venv with torch (through a .pth to the build environment), pytest and ninja (torch runs `ninja`
    from PATH, so it is installed into this venv's bin even though the base has the package)."""
    import pytest as own_pytest

    base = envs.build_env(PYTHON, envs.TorchBuild(TORCH_VERSION))
    assert envs.torch_metadata(base)["cuda"], "the build environment's torch is a CPU build"
    user = envs.test_env(base, tmp_path_factory.mktemp("user") / "venv")
    pip = [str(user.python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, f"pytest=={own_pytest.__version__}"], check=True, env={**os.environ, **envs.pip_env()})
    ninja = sorted(base.root.glob("lib/python*/site-packages/ninja-*.dist-info"))
    version = ninja[-1].name[len("ninja-"):-len(".dist-info")] if ninja else None
    subprocess.run([*pip, "--ignore-installed", "--no-deps", f"ninja=={version}" if version else "ninja"],
                   check=True, env={**os.environ, **envs.pip_env()})
    assert (user.bin_dir / "ninja").is_file()
    return user


@pytest.fixture(scope="module")
def jit_run(farm_command: list[str], user_env: envs.PythonEnv,
            tmp_path_factory: pytest.TempPathFactory) -> JitRun:
    root = tmp_path_factory.mktemp("jit_only")
    folder = root / "jit_only"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    extensions = root / "torch_extensions"
    before = snapshot(folder)
    env = {**user_env_vars(user_env, extensions), "JIT_ROUND_VERBOSE": "1"}
    # -s: load()'s verbose lines (the compiler commands) come out during the import at collection.
    result = subprocess.run([*farm_command, "jit", "--cuda", CUDA, "--", "python", "-m", "pytest", "tests", "-q",
                             "-s"], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=1800)
    return JitRun(folder, extensions, user_env, before, result)


@pytest.mark.extended
@pytest.mark.slow
def test_the_projects_own_tests_pass_through_jit(jit_run: JitRun) -> None:
    out = jit_run.result.stdout
    assert jit_run.result.returncode == 0, out[-6000:]
    summary = [line for line in out.splitlines() if " passed" in line][-1]
    assert "failed" not in summary and "error" not in summary, out[-3000:]
    assert int(summary.split(" passed")[0].split()[-1]) >= 5, summary  # 5 on the CPU; the GPU cases skip here
    # load() compiled both sources: the C++ one with the host compiler, the CUDA one with nvcc.
    assert (jit_run.extensions / "jit_round_C" / "round.o").is_file()
    assert (jit_run.extensions / "jit_round_C" / "round_kernel.cuda.o").is_file()


@pytest.mark.extended
@pytest.mark.slow
def test_load_compiled_the_cuda_source_with_the_farms_nvcc(jit_run: JitRun) -> None:
    assert jit_run.result.returncode == 0, jit_run.result.stdout[-6000:]
    cached = toolkit.cached_toolkit(matrix.get_cell(CUDA))
    assert cached is not None, "the jit command installed no toolkit into FARM_CACHE_DIR's tools"
    farm_nvcc = cached / matrix.get_cell(CUDA).toolkit.home_subdir / "bin" / "nvcc"
    ninja = (jit_run.extensions / "jit_round_C" / "build.ninja").read_text()
    lines = dict(line.split(" = ", 1) for line in ninja.splitlines() if " = " in line and not line.startswith(" "))
    assert Path(lines["nvcc"]) == farm_nvcc, lines["nvcc"]
    assert Path(lines["nvcc"]).is_relative_to(toolenv.cache_root() / "tools")
    # The toolkit's runtime is the one linked, and the user's torch the one compiled against.
    assert f"-L{farm_nvcc.parent.parent / 'lib64'} -lcudart" in lines["ldflags"]
    assert "-gencode=arch=compute_90,code=sm_90" in lines["cuda_cflags"].split()
    # The library holds SASS for exactly the one architecture asked for, and no PTX.
    library = jit_run.extensions / "jit_round_C" / "jit_round_C.so"
    cuobjdump = toolkit.ensure_cuobjdump()
    elf = subprocess.run([cuobjdump, "--list-elf", library], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", library], capture_output=True, text=True).stdout
    assert gpu_code.parse_cuobjdump(elf, ptx) == (("sm_90",), ()), elf + ptx


@pytest.mark.extended
@pytest.mark.slow
def test_the_project_folder_is_not_written_to(jit_run: JitRun) -> None:
    assert jit_run.result.returncode == 0, jit_run.result.stdout[-6000:]
    assert snapshot(jit_run.project) == jit_run.before


@pytest.mark.extended
@pytest.mark.slow
def test_the_command_runs_the_users_python_and_torch_without_the_farms_code(jit_run: JitRun,
                                                                           farm_command: list[str]) -> None:
    """`python` is the caller's (the activated venv), with its torch; the farm's own code (ci/, windows/), which
    its launcher puts on PYTHONPATH for the farm's process, is not importable in the user's command."""
    code = "\n".join([
        "import importlib.util, json, os, sys, torch",
        "seen = {'python': sys.executable, 'torch': torch.__version__, 'torch_cuda': torch.version.cuda}",
        "seen.update((k, os.environ.get(k)) for k in ('PYTHONPATH', 'CUDA_HOME', 'FARM_PROG'))",
        "seen.update((m, importlib.util.find_spec(m) is not None) for m in ('ci', 'windows'))",
        "print('JSON' + json.dumps(seen))",
    ])
    env = user_env_vars(jit_run.user, jit_run.extensions)
    result = subprocess.run([*farm_command, "jit", "--cuda", CUDA, "--", "python", "-c", code],
                            cwd=jit_run.project, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    seen = json.loads(next(line[4:] for line in result.stdout.splitlines() if line.startswith("JSON")))
    assert Path(seen["python"]) == jit_run.user.python
    assert seen["torch"] == "2.11.0+cu130" and seen["torch_cuda"] == "13.0"
    assert seen["PYTHONPATH"] is None and seen["FARM_PROG"] is None
    assert not seen["ci"] and not seen["windows"]
    cached = toolkit.cached_toolkit(matrix.get_cell(CUDA))
    assert cached is not None and Path(seen["CUDA_HOME"]).is_relative_to(cached)
    assert snapshot(jit_run.project) == jit_run.before


def test_the_farms_launcher_settings_stay_out_of_the_users_command(tmp_path: Path) -> None:
    """caller_environ: the launchers' PYTHONPATH (the farm's code) and FARM_PROG go; the caller's PYTHONPATH,
    kept by a launcher in FARM_CALLER_PYTHONPATH, comes back; other entries of PYTHONPATH stay."""
    farm = str(project.FARM_ROOT)
    mine = str(tmp_path)
    base = {"PATH": "/usr/bin", "FARM_PROG": "cuda-ext-farm"}
    assert jit.caller_environ({**base, "PYTHONPATH": farm}) == {"PATH": "/usr/bin"}
    assert jit.caller_environ({**base, "PYTHONPATH": farm, jit.CALLER_PYTHONPATH: mine}) == {
        "PATH": "/usr/bin", "PYTHONPATH": mine}
    assert jit.caller_environ({"PYTHONPATH": os.pathsep.join([farm, mine])}) == {"PYTHONPATH": mine}
    assert jit.caller_environ({"PYTHONPATH": mine}) == {"PYTHONPATH": mine}
    assert jit.caller_environ({"PATH": sys.prefix}) == {"PATH": sys.prefix}
