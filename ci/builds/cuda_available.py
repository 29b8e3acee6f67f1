"""torch.cuda.is_available() is True in every CUDA build the farm runs, and torch.cuda's device questions answer from
the build's architecture list (project key ``cuda-available-in-build``).

The farm's builders have no GPU. A ``setup.py`` that decides on CUDA with ``torch.cuda.is_available()`` (common:
pytorch/extension-cpp's template does) would build a CPU-only library there, which the audit refuses in a CUDA
wheel; one that then writes TORCH_CUDA_ARCH_LIST from the visible GPUs would write ``""`` over the farm's list. So
the build command, and only it, gets ``ci/buildsite/`` (:data:`SITE`) first on ``PYTHONPATH``: the
``sitecustomize.py`` there makes ``torch.cuda.is_available()`` True and ``device_count()``,
``get_device_capability(i)``, ``get_device_properties(i)`` answer one device per architecture of the list the
build started with, newest first (``get_device_capability()`` with no index: the newest), once ``torch.cuda`` is
imported, then runs the ``sitecustomize`` it hides (that file says how and why: a capability, not a fake GPU, so
anything that needs the device still fails as torch does without one).
Where each build applies it, beside the project's ``build-env``:

* host builds (``ci/linux/host.py`` ``compiler_env``: x86_64, the aarch64 cross build, ``develop``): the folder,
  then the ``PYTHONPATH`` the build had (the project's ``build-env`` one, else the farm process's);
* container builds (``ci/linux/container.py``): ``CIBW_ENVIRONMENT``, with the folder mounted read-only at
  ``/opt/farm/buildsite`` like ``ci/nvcc``; cibuildwheel's repair and test steps inherit that environment, so
  the farm clears ``PYTHONPATH`` there;
* Windows builds (``windows/cibw.py``): ``CIBW_ENVIRONMENT`` (cibuildwheel's repair and test are off there; the
  farm repairs and tests outside it).

Not in a ``--cpu`` build (it must build the CPU library it asks for), nor with ``cuda-available-in-build = false``.
The farm's own steps (repair, audit, the smoke and test commands in clean environments) never see it: they run
with an environment of their own. The build logs one line (:data:`NOTE`) saying so.
"""

from __future__ import annotations

from collections.abc import Mapping

from ci.log import log
from ci.universe.project import FARM_ROOT
from ci.universe.targets import Target

#: The folder put first on the build's ``PYTHONPATH``; it holds ``sitecustomize.py`` and nothing else importable.
SITE = FARM_ROOT / "ci" / "buildsite"
#: The project key that turns it off.
KEY = "cuda-available-in-build"
#: The line a build that applies it logs (``{archs}``: its architecture list), in a user's words: no file of the farm.
NOTE = ("torch.cuda.is_available() is True in this build, and torch.cuda.device_count() and get_device_capability() "
        "answer one device per architecture it compiles for ({archs}), newest first (so the default device is the "
        "newest): the builder has no GPU, and a setup.py that asks would leave the CUDA code out or find no "
        "architecture. {key} = false in [tool.cuda-ext-farm] gives torch's own answers")


def applies(target: Target) -> bool:
    """Whether ``target``'s build sees torch.cuda.is_available() True: a CUDA build of a project that keeps
    ``cuda-available-in-build`` on."""
    return not target.cpu and target.project.cuda_available_in_build


def pythonpath(target: Target, folder: str, build_env: Mapping[str, str], inherited: str | None = None,
               sep: str = ":") -> dict[str, str]:
    """The ``PYTHONPATH`` of ``target``'s build command: ``folder`` (:data:`SITE` as the build sees it) first, then
    the one the build had (``build_env``'s, the project's own, else ``inherited``, the environment the build
    starts from); ``{}`` when it does not apply. ``sep``: the build machine's separator (``;`` on Windows).
    Logs :data:`NOTE` when it applies (once per build: each build composes its environment once)."""
    if not applies(target):
        return {}
    had = build_env.get("PYTHONPATH", inherited)
    log.info(NOTE.format(archs=target.cell.arch_list, key=KEY))
    return {"PYTHONPATH": sep.join([folder, *([had] if had else [])])}
