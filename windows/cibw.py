"""cibuildwheel on a Windows host: one build identifier per target, the farm's environment passed in.

cibuildwheel runs each step in a throw-away ``cmd.exe`` that inherits its own
process environment, so the farm starts it with the captured vcvars64
environment and the toolkit on PATH already applied (``windows/environment.py``),
and adds the build's own variables (``CUDA_HOME``, ``DISTUTILS_USE_SDK=1``,
an explicit ``TORCH_CUDA_ARCH_LIST`` so nothing probes for a GPU, ``MAX_JOBS``,
the farm's nvcc flags, the project's ``build-env``, ``PYTHONPATH`` with ``ci/buildsite`` first, so the
build sees torch.cuda.is_available() True: ``ci/builds/cuda_available.py``, and the nvcc wrapper
``ci/nvcc/wrapper.py``, composed as on every route by ``ci/builds/environment.py``) through
``CIBW_ENVIRONMENT``, where its log shows them (written as ``ci/builds/cibw_environment.py`` says: every value
exactly as composed, a ``PATH`` the build names in front of the step's own).

The build venv sees the target's torch through a ``.pth`` file
(``windows/torchenv.py``) and gets only the build tools from PyPI. Repair
(delvewheel), the audit and the import test are the farm's, on the built
wheel (``windows/build.py``), so cibuildwheel's own repair and test steps are off.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath, PureWindowsPath

from ci.builds import (
    arch_flags,
    cibw_environment,
    cmake_compiler,
    cuda_available,
    environment,
    free_threaded_cibw,
    project_source,
)
from ci.errors import UsageError
from ci.nvcc import shim
from ci.universe import matrix, project, shapes
from ci.universe.targets import Target
from windows.toolkit import layout

#: What the build venv installs besides the project's own [build-system] requires (torch comes from the .pth).
BUILD_TOOLS = ("setuptools>=77", "wheel", "ninja")
CMD_LINE_LIMIT = 8191
_CMD_PLAIN = re.compile(r"[A-Za-z0-9_.\-+:/\\=,@]+")


def build_python(target: Target) -> str:
    """The CPython that builds ``target``: its own; for abi3 the oldest >= the target's that torch has wheels for."""
    if not target.abi3:
        return target.python
    pythons = [p for p in matrix.get_torch(target.torch).pythons
               if shapes.version_key(p) >= shapes.version_key(target.python)]
    if not pythons:
        raise UsageError(f"torch {target.torch} has no wheel for CPython {target.python} or newer", target.id,
                         "pick another torch (--torch)")
    return min(pythons, key=shapes.version_key)


def build_identifier(python: str) -> str:
    return f"cp{python.replace('.', '')}-win_amd64"


def cmd_quote(arg: str) -> str:
    """One argument for a cmd.exe line (cibuildwheel runs its steps with shell=True)."""
    if _CMD_PLAIN.fullmatch(arg):
        return arg
    if '"' in arg or "%" in arg:
        raise UsageError("an argument holds a character cmd.exe cannot quote", arg, 'remove " and % from it')
    return f'"{arg}"'


def pth_command(site: PurePath) -> str:
    """A one-liner that makes the running interpreter see ``site`` (the torch folder) through a .pth file."""
    posix = PureWindowsPath(site).as_posix()
    if "'" in posix:
        raise UsageError("the torch folder's path holds a quote", posix, "move FARM_CACHE_DIR to a plainer path")
    code = (f"import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()['purelib'], '_farm_torch.pth')"
            f".write_text('{posix}\\n')")
    return f"python -c {cmd_quote(code)}"


def build_variables(target: Target, cuda_home: PurePath, nvcc_version: str, max_jobs: int | None,
                    cpu_count: int, caller: Mapping[str, str]) -> dict[str, str]:
    """The build's own variables, composed by ci/builds/environment.py as on every route: of ``caller``'s
    environment only the flag variables (a Windows build does not start from the farm's: its process's
    ``PYTHONPATH`` holds the farm's code, and an empty one is set when the build names none), then the farm's
    (the toolkit, the deterministic and compression nvcc flags, in a CUDA build ``ci/buildsite`` first on
    PYTHONPATH so that the build sees torch.cuda.is_available() True: ci/builds/cuda_available.py), then the
    project's build-env; finally the nvcc wrapper in front of the nvcc asked for (ci/builds/arch_flags.py).
    cibuildwheel's repair and test steps are off, and the farm's own (delvewheel, the audit, the smoke test) run
    outside this environment."""
    values = project_source.build_values(target, nvcc_version)
    farm = {
        **layout.toolkit_env(cuda_home),
        "DISTUTILS_USE_SDK": "1",
        "TORCH_CUDA_ARCH_LIST": target.cell.arch_list,
        "MAX_JOBS": str(max_jobs or cpu_count or 1),
        **({} if target.cpu else {"PYTORCH_NVCC": str(PureWindowsPath(cuda_home, "bin", "nvcc.exe"))}),
        **environment.farm_flags(target, nvcc_version),
        **cuda_available.pythonpath(target, str(cuda_available.SITE), {}),
    }
    own = {k: project.expand(v, values) for k, v in target.project.build_env.items()}
    requested = {"PYTHONPATH": ""} | environment.compose(caller, farm, own, inherit=False, pathsep=";")
    if target.cpu:
        return requested
    return requested | arch_flags.wrapper_env(target, "python", str(arch_flags.WRAPPER), requested["PYTORCH_NVCC"],
                                              windows=True)


def nvcc_front(target: Target, requested: Mapping[str, str], cuda_home: PurePath, folder: Path,
               python: PurePath, caller: Mapping[str, str]) -> dict[str, str]:
    """``CUDA_HOME`` naming a toolkit folder (``folder``, in the build's stage) whose ``bin\\nvcc.exe`` runs the
    nvcc wrapper with ``python`` (ci/nvcc/shim.py): setuptools' own compile (``use_ninja=False``) runs
    ``CUDA_HOME\\bin\\nvcc``, never ``PYTORCH_NVCC``. As on the Linux routes: not in a CPU build, nor where the
    project names its own ``CUDA_HOME`` or builds with CMake, whose compiler ``bin\\nvcc.exe`` is (``CUDACXX``,
    ``CMAKE_ARGS`` after the project's or ``caller``'s: cibuildwheel's steps inherit its environment), with the
    farm's list in ``CUDAARCHS`` (ci/builds/cmake_compiler.py). ``CUDA_PATH`` keeps the real toolkit (nvcc's own
    lookups)."""
    asked = cmake_compiler.asked(requested, caller)
    if target.cpu or requested.get("CUDA_HOME") != str(cuda_home):
        return cmake_compiler.architectures(target, asked)
    nvcc = shim.make_shim(folder, cuda_home, [str(python), "-I", str(arch_flags.WRAPPER)], windows=True)
    return cmake_compiler.front_env(target, str(folder), str(PureWindowsPath(nvcc)), asked, windows=True)


def environment_option(variables: Mapping[str, str]) -> str:
    return cibw_environment.render(variables, pathsep=";")


def cibuildwheel_env(target: Target, python: str, torch_site: PurePath, variables: Mapping[str, str]) -> dict[str, str]:
    requires = " ".join(cmd_quote(r) for r in dict.fromkeys((*BUILD_TOOLS, *target.project.build_requires)))
    before_build = f"{pth_command(torch_site)} && python -m pip install {requires}"
    if len(before_build) > CMD_LINE_LIMIT:
        raise UsageError("the before-build command is longer than cmd.exe accepts", f"{len(before_build)} characters",
                         "shorten FARM_CACHE_DIR or the project's [build-system] requires")
    return {
        "CIBW_PLATFORM": "windows",
        "CIBW_ARCHS": "AMD64",
        "CIBW_BUILD": build_identifier(python),
        **free_threaded_cibw.enable_env(python),  # cp313t: cibuildwheel 3.x, which builds it only when asked
        "CIBW_BUILD_FRONTEND": "build; args: --no-isolation",
        "CIBW_BEFORE_BUILD": before_build,
        "CIBW_ENVIRONMENT": environment_option(variables),
        "CIBW_REPAIR_WHEEL_COMMAND": "",
        "CIBW_TEST_COMMAND": "",
        "CIBW_BUILD_VERBOSITY": "1",
        # cibuildwheel's own abi3audit step downloads virtualenv; the farm audits the wheel itself.
        "CIBW_AUDIT_COMMAND": "",
    }


def cibuildwheel_command(project_dir: Path, outdir: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "cibuildwheel", "--output-dir", str(outdir), str(project_dir)]
