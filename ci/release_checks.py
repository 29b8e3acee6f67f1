"""A release folder's checks in clean environments: each wheel installs from its variant's index, ``pip install
<project> --extra-index-url <site>/<variant>`` picks the variant over PyPI, and the wheels import under a CUDA
and a CPU-only torch (the release workflow's import-test jobs).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import CommandFailed, UsageError
from ci.release_manifest import Manifest, ReleaseFile
from ci.release_plan import version_parts

if TYPE_CHECKING:
    from ci import envs
    from ci.targets import Target


def pip_isolated_env() -> dict[str, str]:
    """pip that sees only the indexes on its command line: no configuration file (PIP_CONFIG_FILE=os.devnull
    skips them all, the machine's find-links and constraints included); ``--isolated`` drops PIP_* variables."""
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def _tag_args(item: ReleaseFile) -> list[str]:
    """pip's --python-version/--implementation/--abi/--platform for the wheel's own tags."""
    interpreters = sorted({t.split("-")[0] for t in item.tags})
    abis = sorted({t.split("-")[1] for t in item.tags})
    platforms = sorted({t.split("-")[2] for t in item.tags})
    python = item.python or f"{interpreters[0][2]}.{interpreters[0][3:]}"
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for abi in abis:
        args += ["--abi", abi]
    for platform in platforms:
        args += ["--platform", platform]
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
            public, local = version_parts(item.name)
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
    from ci import index, proc

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


def torch_env(target: Target, kind: str, python: str, *, index_url: str | None,
              cpu_torch: str | None) -> envs.PythonEnv:
    """An environment (cached by the farm) holding only ``python`` and the torch of the import test."""
    from ci import envs, matrix

    if kind == "cuda":
        if index_url is None:
            # The farm's own build environment of the target: the CUDA torch of its cell, from pip's index.
            return envs.build_env(python, target.torch_requirement, target.project.build_requires)
        return envs.ensure_env("import-cuda", python, ["--index-url", index_url, target.torch_requirement])
    version = matrix.get_torch(cpu_torch).version if cpu_torch else target.torch
    if target.project.abi != "stable" and matrix.minor_of(version) != target.torch_minor:
        raise UsageError(f"{target.id} is bound to torch {target.torch_minor}", cpu_torch,
                         "a classic wheel is import-tested with its own torch release")
    return envs.ensure_env("import-cpu", python, [*(["--index-url", index_url] if index_url else []),
                                                  f"torch=={version}+cpu"])


def import_test(target: Target, kind: str, *, wheel: Path, python: str, index_url: str | None,
                cpu_torch: str | None, from_index: str | None = None, version_spec: str | None = None) -> str:
    """Install the wheel into a new venv over a torch-only environment; ``pip check``; the smoke command."""
    from ci import commands, envs, proc

    base = torch_env(target, kind, python, index_url=index_url, cpu_torch=cpu_torch)
    with tempfile.TemporaryDirectory(prefix="farm-import-") as tmp:
        env = envs.test_env(base, Path(tmp) / "venv")
        source = ["--index-url", from_index, version_spec or target.project.name] if from_index \
            else ["--no-index", str(wheel)]
        proc.run([env.python, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps", *source],
                 env=pip_isolated_env(), what=f"installing {wheel.name} into a clean environment failed")
        proc.run([env.python, "-m", "pip", "check"], env=pip_isolated_env(),
                 what="the wheel's requirements are not met in its test environment",
                 hint="a classic wheel pins its torch release; a stable-ABI wheel needs torch >= its floor")
        torch = proc.run([env.python, "-c", "import torch; print(torch.__version__)"], capture=True, log=False)
        run_env = {"PATH": os.pathsep.join([str(env.bin_dir), os.environ.get("PATH", "")]), "PYTHONPATH": "",
                   "FARM_LANE": f"import-{kind}"}
        smoke = commands.expand(target.project.commands.smoke, python=env.python,
                                project_root=target.project.root, wheel=wheel)
        with commands.scratch_folder() as scratch:
            proc.run(smoke, env=run_env, cwd=scratch, what=f"the smoke command failed under a {kind} torch",
                     hint="its output is above ([tool.cuda-ext-farm.commands] smoke)")
            proc.run(commands.origin_check(env.python, target.project.import_name), env=run_env, cwd=scratch,
                     what=f"{target.project.import_name} did not come from the wheel under test")
    return f"ok: smoke under torch {torch.stdout.strip().splitlines()[-1]}"


def host_can_run(item: ReleaseFile, python: str) -> str | None:
    """Why this machine cannot import the wheel (None when it can)."""
    from packaging import tags

    from ci import matrix

    if item.os != "linux" or sys.platform != "linux":
        return f"a {item.os} wheel"
    host_platforms = set(tags.platform_tags())
    wheel_platforms = {t.split("-")[2] for t in item.tags}
    if not host_platforms & wheel_platforms:
        return (f"its platform {', '.join(sorted(wheel_platforms))} needs a newer glibc than this machine's; "
                "the build's smoke test ran it in the cell's image")
    if matrix.version_key(python) < matrix.version_key(item.python or python):
        return f"it needs CPython {item.python} or newer"
    return None


def _test_python(target: Target) -> str | None:
    """The CPython an import test uses here: the running one for abi3 wheels, the target's otherwise."""
    from ci import envs, options
    from ci.errors import MissingRequirement

    if target.abi3:
        return options.current_python()
    try:
        envs.find_interpreter(target.python)
    except MissingRequirement:
        return None
    return target.python


def run_import_tests(out: Path, manifest: Manifest, by_id: Mapping[str, Target], *,
                     cpu_torch: str | None) -> dict[str, dict[str, str]]:
    results: dict[str, dict[str, str]] = {}
    for item in manifest.wheels:
        target = by_id[str(item.target)]
        url = (out / "index" / item.index_name).resolve().as_uri() + "/"
        public, local = version_parts(item.name)
        spec = f"{manifest.project}=={public}{'+' + local if local else ''}"
        python = _test_python(target)
        reason = f"no CPython {target.python} on this machine" if python is None \
            else host_can_run(item, python)
        checks: dict[str, str] = {}
        wheel = out / "assets" / item.name
        if reason is not None:
            checks["import-cuda"] = checks["import-cpu"] = f"not run here: {reason}"
        else:
            assert python is not None
            checks["import-cuda"] = import_test(target, "cuda", wheel=wheel, python=python, index_url=None,
                                                cpu_torch=None, from_index=url, version_spec=spec)
            if target.project.cpu_libraries:
                checks["import-cpu"] = import_test(target, "cpu", wheel=wheel, python=python, index_url=None,
                                                   cpu_torch=cpu_torch, from_index=url, version_spec=spec)
            else:
                checks["import-cpu"] = "not applicable: the project declares no cpu-libraries"
        results[item.name] = checks
    return results
