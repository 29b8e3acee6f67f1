"""A Windows build of one target: toolset, toolkit, vcvars64, torch, cibuildwheel, then the shared publish tail.

1. the MSVC toolset is chosen first (``windows/msvc.py``): a cell without an
   acceptable toolset stops here, naming the component to install, not after
   twenty screens of nvcc output;
2. the cell's CUDA toolkit (``windows/toolkit/``): the folder ``python -m ci toolkit``
   fills, ``<cache>\\tools\\cuda-win-<cuda>-<key>`` (the wheels are installed there on first
   use) or NVIDIA's installer's folder (CUDA 12, never installed by a build), checked
   against the cell's ``_MSC_VER`` range (``windows/hostconfig.py``);
3. the vcvars64 environment of the chosen toolset (``windows/vcvars.py``, cached);
4. the CUDA build of the target's torch for the build's CPython (``windows/torchenv.py``);
5. cibuildwheel builds the wheel from a copy of the project's sources;
6. ``ci.builds.tail.publish`` with delvewheel as the repair step (``windows/repair.py``)
   and the PE audit (``windows/audit.py``) plus an import test of the final
   wheel in a fresh venv that sees only the target's torch, as the audit step.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

from ci import fsutil, proc, settings
from ci.audit.checks import AuditResult, Check
from ci.builds import arch_flags, failure, free_threaded_cibw, preflight, project_source, report
from ci.builds import tail as publish
from ci.errors import CommandFailed
from ci.linux.host import NVCC_SHIM
from ci.log import log
from ci.toolchain import compiler_cache, envs
from ci.universe import project_commands
from ci.universe.targets import Target
from windows import audit, cibw, environment, hostconfig, msvc, repair, toolkit, torchenv, vcvars
from windows.vswhere import Discovery, InstalledToolset


@dataclasses.dataclass(frozen=True)
class Options:
    """``python -m ci build-win`` options beyond target selection, resolved once."""

    toolset: str | None = None
    dll_paths: tuple[Path, ...] = ()
    refresh_vcvars: bool = False
    max_jobs: int | None = None
    smoke: bool = True


def smoke_check(target: Target, wheel: Path, torch_site: Path, python: str) -> Check:  # pragma: no cover - Windows
    """Install the final wheel into a new venv that sees only the target's torch, run the smoke command."""
    with tempfile.TemporaryDirectory(prefix="farm-win-smoke-") as tmp:
        venv = envs.PythonEnv(Path(tmp) / "venv")
        proc.run([torchenv.interpreter(python), "-m", "venv", venv.root], what="creating the test venv failed")
        (venv.site_packages() / "_farm_torch.pth").write_text(f"{torch_site}\n", encoding="utf-8")
        proc.run([venv.python, "-m", "pip", "install", "--no-deps", "--quiet", wheel], env=envs.pip_env(),
                 what="installing the wheel into the test venv failed")
        cmd = project_commands.expand(target.project.commands.smoke, python=venv.python,
                project_root=target.project.root,
                              out=tmp, wheel=wheel)
        path = ";".join([str(venv.bin_dir), settings.current().environ.get("PATH", "")])
        # In the empty temporary folder: the project's source cannot shadow the wheel.
        result = proc.run(cmd, env={"PATH": path, "PYTHONPATH": ""}, cwd=Path(tmp), capture=True, check=False)
        if result.returncode == 0:
            result = proc.run(project_commands.origin_check(venv.python, target.project.import_name),
                              env={"PATH": path, "PYTHONPATH": ""}, cwd=Path(tmp), capture=True, check=False)
    text = (result.stdout + result.stderr).strip()
    last = text.splitlines()[-1] if text else f"exit status {result.returncode}"
    if result.returncode != 0:
        log.details(text[-4000:])
    return Check("smoke", result.returncode == 0,
                 f"imports next to torch {target.torch} ({last})" if result.returncode == 0 else
                 f"the smoke command failed in a clean venv with torch {target.torch}: {last}")


def build_target(target: Target, outputs: publish.Outputs, found: Discovery,
                 options: Options) -> report.BuildReport:  # pragma: no cover - a Windows host with Visual Studio
    started = time.monotonic()
    cell = target.cell
    preflight.preflight(target)  # what the source alone refuses (links, submodules, C++ standard): now
    choice = msvc.choose(cell, found.toolsets, options.toolset, skipped=found.skipped)
    log.note(f"{target.id}:", f"MSVC {choice.toolset} of {choice.instance.label}", style="bold")
    if choice.note:
        log.note(choice.note)
    outputs.check_writable()
    with log.target(target.id, "Windows build"), fsutil.locked(outputs.lock(target), f"the build of {target.id}"):
        with log.stage("toolkit, MSVC and torch"):
            tk = toolkit.ensure(cell)
            hostconfig.check_cell(cell, hostconfig.read(Path(tk.cuda_home)))
            vc = vcvars.activate(InstalledToolset(choice.instance, str(choice.toolset)),
                                 refresh=options.refresh_vcvars)
            python = cibw.build_python(target)
            site = torchenv.ensure_torch(target, python)
            cuobjdump = toolkit.ensure_cuobjdump()
            torch_dlls = audit.TorchDlls.scan(site)
        with publish.staging(outputs, target) as stage:
            source = stage / "source"
            project_source.sync_source(target.project.root, source, (outputs.build_root, outputs.wheelhouse))
            variables = cibw.build_variables(target, tk.cuda_home, tk.nvcc_version, options.max_jobs,
                                             os.cpu_count() or 1, settings.current().environ)
            # setuptools' own compile (use_ninja=False) through the wrapper too: CUDA_HOME\bin\nvcc.exe runs it.
            variables |= cibw.nvcc_front(target, variables, tk.cuda_home, stage / NVCC_SHIM,
                                         torchenv.interpreter(python), settings.current().environ)
            env = environment.compose(settings.current().environ, vc, tk.cuda_home)
            with log.stage("cibuildwheel"), compiler_cache.for_build("windows", {**env, **variables}, stage,
                                                                      source) as cached:
                # The cache's variables go inside the build (CIBW_ENVIRONMENT), its nvcc behind the nvcc wrapper.
                build_vars = variables | arch_flags.behind_wrapper(cached, variables)
                run_env = env | cibw.cibuildwheel_env(target, python, site, build_vars)
                output = stage / "build-output.log"
                try:
                    proc.run(cibw.cibuildwheel_command(source, stage / "out", str(
                        free_threaded_cibw.cibuildwheel_python(python))), env=run_env, cwd=source,
                             what=f"the Windows build of {target.id} failed",
                             hint="the compiler's output is above; nothing was written to the wheelhouse",
                             tee=output, hide=failure.hidden,
                             stop_when=arch_flags.watch_output(target, [str(source)]))
                except CommandFailed as exc:
                    raise failure.explain_build(exc, output.read_text(errors="replace"),
                                                build=f"the Windows build of {target.id}", source=source,
                                                linkable=sorted(target.cell.toolkit.linkable)) from None
            built = publish.one_wheel(stage / "out", "cibuildwheel")

            def run_audit(wheel: Path, audited: Target) -> AuditResult:
                result = audit.audit_wheel(wheel, audited, torch=torch_dlls, cuobjdump=cuobjdump)
                if options.smoke and result.ok:
                    result = dataclasses.replace(result, checks=(*result.checks,
                                                                 smoke_check(target, wheel, site, python)))
                return result

            return publish.publish(target, built, stage, outputs, repair=repair.delvewheel_repair(options.dll_paths),
                                   audit=run_audit, mode="windows", nvcc=tk.nvcc_version, started=started,
                                   cuobjdump=cuobjdump, build_output=output)
