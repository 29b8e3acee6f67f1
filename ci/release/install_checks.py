"""A release folder's checks in clean environments: each wheel installs from its variant's index, ``pip install
<project> --extra-index-url <site>/<variant>`` picks the variant over PyPI, and the wheels import under a CUDA
and a CPU-only torch (the release workflow's import-test jobs).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ci.errors import CommandFailed, UsageError
from ci.log import log
from ci.release.manifest import Manifest, ReleaseFile
from ci.universe import shapes

if TYPE_CHECKING:
    from ci.toolchain import envs
    from ci.universe.targets import Target


def pip_isolated_env() -> dict[str, str]:
    """pip that sees only the indexes on its command line: no configuration file (PIP_CONFIG_FILE=os.devnull
    skips them all, the machine's find-links and constraints included); ``--isolated`` drops PIP_* variables."""
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def _tag_args(item: ReleaseFile) -> list[str]:
    """pip's --python-version/--implementation/--abi/--platform for the wheel's own tags."""
    interpreters = sorted({t.split("-")[0] for t in item.tags})
    abis = sorted({t.split("-")[1] for t in item.tags})
    platforms = sorted({t.split("-")[2] for t in item.tags})
    # A free-threaded wheel's Python is 3.13t in the manifest; pip's --python-version takes 3.13, --abi cp313t.
    python = (item.python or f"{interpreters[0][2]}.{interpreters[0][3:]}").removesuffix("t")
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for abi in abis:
        args += ["--abi", abi]
    for platform_tag in platforms:
        args += ["--platform", platform_tag]
    return args


def check_index_install(out: Path, manifest: Manifest, python: Path | None = None) -> dict[str, str]:
    """``pip install --index-url file://…/index/<variant> <project>==<version>`` for every wheel, with the
    wheel's own tags (so Windows wheels are checked on Linux too); the installed files must be the wheel's."""
    from ci import proc, wheelmeta

    interpreter = str(python or sys.executable)
    results: dict[str, str] = {}
    for variant, files in sorted(manifest.variants().items()):
        url = (out / "index" / variant).resolve().as_uri() + "/"
        for item in files:
            public, local = wheelmeta.version_parts(item.name)
            spec = f"{manifest.project}=={public}{'+' + local if local else ''}"
            with tempfile.TemporaryDirectory(prefix="farm-index-check-") as tmp:
                proc.run([interpreter, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps", "--no-cache-dir",
                          "--target", tmp, "--index-url", url, *_tag_args(item), spec],
                         env=pip_isolated_env(), what=f"installing {item.name} from the {variant} index failed",
                         hint="the index under index/ does not serve the wheel; its page is above")
                dist_info = sorted(Path(tmp).glob("*.dist-info"))
                record = dist_info[0] / "RECORD" if dist_info else None
                if record is None or not record.is_file():
                    raise CommandFailed(f"the {variant} index installed no distribution", item.name,
                                        "check the index page's links")
                installed = wheelmeta.parse_name(Path(item.name)).version
                if not dist_info[0].name.endswith(f"-{installed}.dist-info"):
                    raise CommandFailed(f"the {variant} index installed another version", dist_info[0].name,
                                        f"expected {item.name}")
            results[item.name] = f"ok: pip install --index-url {variant} {spec}"
    return results


def check_extra_index(out: Path, manifest: Manifest, python: Path | None = None) -> dict[str, str]:
    """What users type, ``pip install <project> --extra-index-url <site>/<variant>``, with PyPI played by an
    index of the pypi/ folder: pip must pick the variant's wheel, not PyPI's."""
    from ci import proc
    from ci.release import index

    interpreter = str(python or sys.executable)
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="farm-pypi-standin-") as tmp:
        standin = Path(tmp) / "pypi"
        index.write_site(standin, {"simple": {manifest.project: [
            index.IndexFile(f.name, (out / "pypi" / f.name).resolve().as_uri(), f.sha256, f.requires_python)
            for f in manifest.files if f.pypi]}})
        pypi_url = (standin / "simple").as_uri() + "/"
        for variant, files in sorted(manifest.variants().items()):
            variant_url = (out / "index" / variant).resolve().as_uri() + "/"
            names = {f.name for f in files}
            for item in files:
                dest = Path(tmp) / "download" / item.name
                proc.run([interpreter, "-m", "pip", "download", "--isolated", "--quiet", "--no-deps",
                          "--no-cache-dir", "--dest", str(dest), "--index-url", pypi_url,
                          "--extra-index-url", variant_url, *_tag_args(item), manifest.project],
                         env=pip_isolated_env(), what=f"pip found no {manifest.project} for {item.name}'s tags")
                got = sorted(p.name for p in dest.iterdir())
                if len(got) != 1 or got[0] not in names:
                    raise CommandFailed(
                        f"pip install {manifest.project} --extra-index-url …/{variant} picks another file",
                        ", ".join(got) or "nothing", f"expected a {variant} wheel ({item.name}); the variant's "
                        "wheels need a local label that sorts above PyPI's version")
                results[item.name] = (f"ok: --extra-index-url {variant} picks {got[0]}" if got[0] == item.name
                                      else f"ok: --extra-index-url {variant} picks {got[0]} (same variant, newer)")
    return results


#: Where the torch of a CPU-only import test comes from: the CPU build ``--cpu-torch`` names, the CPU build of the
#: wheel's own torch from the index (PyTorch's CPU index in the workflow), or the index's CUDA build (PyPI's) imported
#: with no GPU visible.
CpuTorchSource = Literal["cpu-torch", "cpu-build", "cuda-no-gpu"]


@dataclasses.dataclass(frozen=True)
class CpuImportTorch:
    """The torch a CPU-only import test installs, chosen from what pip can see (:func:`choose_cpu_torch`)."""

    #: The version as pip lists it: ``2.13.0+cpu``, ``2.10.0``.
    version: str
    #: What pip installs: ``torch==2.13.0+cpu``, or ``torch==2.10.0,!=2.10.0+cpu`` (the CUDA build).
    requirement: str
    source: CpuTorchSource
    #: How the manifest says where it came from: ``PyPI's CUDA 12.8 build, no GPU``.
    what: str

    @property
    def hide_gpu(self) -> bool:
        """A CUDA build: the import runs with ``CUDA_VISIBLE_DEVICES=""``, so torch takes its CPU-only path."""
        return self.source == "cuda-no-gpu"

    @property
    def record(self) -> str:
        return f"torch {self.version} ({self.what})"


def _fits(version: str, needed: str, *, stable: bool) -> str | None:
    """Why ``version`` of torch cannot prove the wheel's CPU import (None when it can): a stable-ABI wheel takes any
    torch at or above its floor, a classic wheel only its own torch minor."""

    minor, own = shapes.minor_of(version), shapes.minor_of(needed)
    if stable:
        return None if shapes.version_key(minor) >= shapes.version_key(own) else f"below the wheel's floor {own}"
    return None if minor == own else f"not the wheel's torch {own}"


def choose_cpu_torch(needed: str, *, stable: bool, cpu_torch: str | None, offered: Iterable[str],
                     index_url: str | None = None) -> CpuImportTorch:
    """The torch of a wheel's CPU-only import test, from the versions ``offered`` by the indexes pip installs from
    (``index_url``, else pip's own: ``envs.offered_torch``), in this order:

    1. the CPU build the user named (``--cpu-torch``), when it fits the wheel (a stable-ABI wheel: at or above its
       floor ``needed``; a classic wheel: ``needed``'s minor, the release it is bound to) and the index has it;
    2. the CPU build of ``needed`` itself, when the index has it (PyTorch's CPU index, the workflow's);
    3. the index's own build of ``needed`` (PyPI's is a CUDA build), imported with no GPU visible.

    A ``torch==X+cpu`` the index does not offer is never chosen: pip would stop with "No matching distribution".
    """
    from packaging.version import InvalidVersion, Version

    from ci.universe import matrix
    from ci.universe.matrix import PYTORCH_INDEX

    seen: set[Version] = set()
    for item in offered:
        try:
            seen.add(Version(item.strip()))
        except InvalidVersion:
            continue
    where = index_url or "pip's indexes"
    passed_over = ""
    if cpu_torch:
        version = matrix.get_torch(cpu_torch).version
        build = f"{version}+cpu"
        why = _fits(version, needed, stable=stable)
        if why is None and Version(build) in seen:
            return CpuImportTorch(build, f"torch=={build}", "cpu-torch", "the CPU build --cpu-torch names")
        passed_over = f"; --cpu-torch {cpu_torch}: {why or f'{where} has no torch {build}'}"
    own = f"{needed}+cpu"
    if Version(own) in seen:
        return CpuImportTorch(own, f"torch=={own}", "cpu-build", f"the CPU build from {where}{passed_over}")
    if Version(needed) in seen:
        build = f"PyPI's CUDA {matrix.get_torch(needed).cuda} build" if index_url is None \
            else f"the build {index_url} serves"
        return CpuImportTorch(needed, shapes.torch_requirement(needed), "cuda-no-gpu",
                              f"{build}, no GPU{passed_over}")
    kind, fits = ("stable-ABI", f"{shapes.minor_of(needed)} or newer") if stable else \
        ("classic", shapes.minor_of(needed))
    raise UsageError(f"pip can get no torch {needed} for the CPU-only import test of a {kind} wheel", where,
                     f"pass --cpu-torch VERSION of a CPU torch pip can reach (torch {fits}), or --torch-index "
                     f"{PYTORCH_INDEX}/cpu")


def cpu_import_torch(target: Target, python: str, *, index_url: str | None,
                     cpu_torch: str | None) -> CpuImportTorch:
    """The torch of ``target``'s CPU-only import test on CPython ``python`` (:func:`choose_cpu_torch` over what pip
    sees from ``index_url``, else from its own indexes)."""
    from ci.toolchain import envs

    return choose_cpu_torch(target.torch, stable=target.project.abi == "stable", cpu_torch=cpu_torch,
                            offered=envs.offered_torch(python, index_url), index_url=index_url)


def torch_env(target: Target, kind: str, python: str, *, index_url: str | None,
              cpu_torch: str | None, choice: CpuImportTorch | None = None) -> envs.PythonEnv:
    """An environment (cached by the farm) holding ``python`` and the torch of the import test: the CUDA torch of
    the target's cell, or for ``kind == "cpu"`` the torch ``choice`` names (by default :func:`cpu_import_torch`)."""
    from ci.toolchain import envs

    if kind == "cuda":
        # The farm's own environment of the target's CUDA torch (from pip's index, or ``index_url``'s build of it).
        return envs.build_env(python, envs.TorchBuild(target.torch, index_url=index_url),
                              target.project.build_requires)
    choice = choice or cpu_import_torch(target, python, index_url=index_url, cpu_torch=cpu_torch)
    # PyPI's CUDA build of the target's torch is the CUDA import test's environment (one download, not two).
    return envs.build_env(python, envs.TorchBuild.of(choice.requirement, index_url), target.project.build_requires)


def import_test(target: Target, kind: str, *, wheel: Path, python: str, index_url: str | None,
                cpu_torch: str | None, from_index: str | None = None, version_spec: str | None = None) -> str:
    """Install the wheel into a new venv over a torch-only environment; ``pip check``; the smoke command. A CPU-only
    test whose torch is a CUDA build (:class:`CpuImportTorch`) runs with ``CUDA_VISIBLE_DEVICES=""``."""
    from ci import proc
    from ci.toolchain import envs
    from ci.universe import project_commands

    choice = cpu_import_torch(target, python, index_url=index_url, cpu_torch=cpu_torch) if kind == "cpu" else None
    if choice is not None:
        log.note("CPU-only import test", f"of {wheel.name}: {choice.record}", style="bold")
    base = torch_env(target, kind, python, index_url=index_url, cpu_torch=cpu_torch, choice=choice)
    with tempfile.TemporaryDirectory(prefix="farm-import-") as tmp:
        env = envs.test_env(base, Path(tmp) / "venv")
        source = ["--index-url", from_index, version_spec or target.project.name] if from_index \
            else ["--no-index", str(wheel)]
        proc.run([env.python, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps", *source],
                 env=pip_isolated_env(), what=f"installing {wheel.name} into a clean environment failed")
        proc.run([env.python, "-m", "pip", "check"], env=pip_isolated_env(),
                 what="the wheel's requirements are not met in its test environment",
                 hint="a classic wheel pins its torch release; a stable-ABI wheel needs torch >= its floor")
        run_env = {"PATH": proc.path_with(env.bin_dir), "PYTHONPATH": "",
                   "FARM_LANE": f"import-{kind}", **({"CUDA_VISIBLE_DEVICES": ""} if choice and choice.hide_gpu
                                                    else {})}
        probe = proc.run([env.python, "-c", "import torch; print(torch.__version__); print(torch.cuda.is_available())"],
                         env=run_env, capture=True, log=False).stdout.split()
        torch, gpu = probe[-2], probe[-1]
        if choice is not None and choice.hide_gpu and gpu != "False":
            raise CommandFailed(f"torch {torch} sees a GPU with CUDA_VISIBLE_DEVICES=''", wheel.name,
                                "the CPU-only import test must not reach the GPU")
        smoke = project_commands.expand(target.project.commands.smoke, python=env.python,
                                project_root=target.project.root, wheel=wheel)
        with project_commands.scratch_folder() as scratch:
            proc.run(smoke, env=run_env, cwd=scratch, what=f"the smoke command failed under a {kind} torch",
                     hint="its output is above ([tool.cuda-ext-farm.commands] smoke)")
            proc.run(project_commands.origin_check(env.python, target.project.import_name), env=run_env, cwd=scratch,
                     what=f"{target.project.import_name} did not come from the wheel under test")
    return f"ok: smoke under torch {torch}" + (f" ({choice.what})" if choice is not None else "")


def host_can_run(item: ReleaseFile, python: str) -> str | None:
    """Why this machine cannot import the wheel (None when it can)."""
    from packaging import tags


    if item.os != "linux" or sys.platform != "linux":
        return f"a {item.os} wheel"
    host_platforms = set(tags.platform_tags())
    wheel_platforms = {t.split("-")[2] for t in item.tags}
    host_machine = platform.machine().lower()
    if not any(p.endswith("_" + host_machine) for p in wheel_platforms):
        arch = next(iter(sorted(wheel_platforms))).split("_")[-1]
        return (f"an {arch} wheel on this {host_machine} machine: the release dry run imports it under qemu "
                "(import-qemu), the workflow natively on an arm64 runner")
    if not host_platforms & wheel_platforms:
        return (f"its platform {', '.join(sorted(wheel_platforms))} needs a newer glibc than this machine's; "
                "the build's smoke test ran it in the cell's image")
    if shapes.version_key(python) < shapes.version_key(item.python or python):
        return f"it needs CPython {item.python} or newer"
    return None


def emulated_import(wheel: Path, target: Target) -> str:
    """A linux_aarch64 wheel of the release imported under qemu-user with PyPI's aarch64 torch (ci/linux/qemu.py), as
    the workflow's import job does natively on an arm64 runner."""
    from ci.linux import cross, qemu

    line = qemu.import_wheel(wheel, target.project.import_name, cross.ensure_torch(target.torch,
                                                                                    cross.torch_python(target)))
    return f"ok: {line} (qemu-aarch64, no GPU)"
