"""Container builds: cibuildwheel in the cell's builder image, then the shared publish tail on the host.

* The target's torch lives in a Docker volume of its own (``cuda-ext-farm-torch-...``,
  keyed by image Python and torch pin), installed once and mounted read-only
  into every later container: the build and cibuildwheel's clean test venv both
  see it through a ``.pth`` file instead of installing torch again.
* cibuildwheel builds the target's wheel (one build identifier), repairs it with
  auditwheel excluding torch's and CUDA's libraries, and runs the project's
  smoke command in a fresh venv that holds only torch and the wheel.
* The symbol check runs in a throw-away container with the same volume (the loader's view is the image's, with
  the target's torch); the rest of the audit and the publishing run on the host (``ci/builds/tail.py``).
* Pip and ccache caches are named volumes; containers carry a label with the job, so an interrupted build
  removes them.
* The compilers (``CC``, ``CXX``) are those the image found in its base at build time (``docker/detect-toolchain.sh``):
  Debian's ``gcc-12`` and manylinux's gcc-toolset live in different places.
* On a Debian base, they compile and link against the host-made Debian bullseye sysroot (``ci/linux/sysroot.py``),
  mounted read-only at ``SYSROOT_MOUNT``: ``CC``/``CXX``/``LDSHARED`` are its wrappers around the image's
  compilers, and the symbol check resolves against its libraries, so the wheel's floor is bullseye's (glibc
  2.31), not the base's. ``FARM_SYSROOT=none`` turns it off; a manylinux base (glibc 2.28) never uses it, nor
  a cell whose toolkit is Debian's (``uses_sysroot``: its headers need the base's glibc headers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from ci import fsutil, proc, settings, toolenv
from ci.audit import checks as audit_records
from ci.audit import symbols, wheel_audit
from ci.builds import (
    arch_flags,
    cibw_environment,
    cmake_compiler,
    cuda_available,
    environment,
    failure,
    free_threaded_cibw,
    preflight,
    project_source,
    report,
)
from ci.builds import tail as publish
from ci.errors import CommandFailed, FarmError, UsageError
from ci.linux import container_compiles, image_contents, images, sysroot
from ci.log import log
from ci.toolchain import compiler_cache, envs, toolkit
from ci.toolchain.compiler_cache import in_container
from ci.universe import matrix, pins, project, shapes
from ci.universe.targets import Target

PIP_CACHE_VOLUME = "cuda-ext-farm-pip-cache"
CCACHE_VOLUME = "cuda-ext-farm-ccache"
SYMBOLS_VOLUME = "cuda-ext-farm-symbols"


def volume_name(name: str) -> str:
    """A cache volume's name; FARM_VOLUME_NAMESPACE gives a separate set (cold-build timings, experiments).
    The pip cache is shared by every namespace: downloads are not what a build's time is about."""
    namespace = settings.value("FARM_VOLUME_NAMESPACE") or ""
    if namespace and not namespace.replace("-", "").isalnum():
        raise UsageError("FARM_VOLUME_NAMESPACE may hold letters, digits and -", namespace, "pick another name")
    if not namespace or name == PIP_CACHE_VOLUME:
        return name
    return name.replace("cuda-ext-farm", f"cuda-ext-farm-{namespace}", 1)
CONTAINER_HOME = "/home/build"
CONTAINER_CA = "/run/farm/ca-bundle.crt"
TORCH_MOUNT = "/opt/farm-torch"
FARM_MOUNT = "/opt/farm"
#: Where container builds on a Debian base see the host-made sysroot (read-only).
SYSROOT_MOUNT = "/opt/farm-sysroot"
#: Where CUDA builds see ``ci/nvcc`` (read-only): the nvcc wrapper, its toolkit folder, the module anchor.
NVCC_TOOLS_MOUNT = f"{FARM_MOUNT}/nvcc"
#: The images' CUDA toolkit (docker/Dockerfile), and where a build makes the folder in front of it whose bin/nvcc
#: runs the nvcc wrapper (ci/nvcc/shim.py).
IMAGE_CUDA_HOME = "/usr/local/cuda"
NVCC_FRONT = "/tmp/farm-nvcc-front"
#: Where CUDA builds see ``ci/buildsite`` (read-only), first on the build's PYTHONPATH: ci/builds/cuda_available.py.
BUILDSITE_MOUNT = f"{FARM_MOUNT}/buildsite"


@dataclasses.dataclass(frozen=True)
class ContainerBuild:
    target: Target
    spec: images.ImageSpec
    image: str
    outputs: publish.Outputs
    max_jobs: int | None = None
    job: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:12])
    #: The compilers ``image`` recorded (:func:`image_contents.image_toolchain`); ``build_in_container`` reads them.
    toolchain: image_contents.Toolchain | None = None
    #: The sysroot the build links against (mounted at ``SYSROOT_MOUNT``); ``build_in_container`` picks it.
    sysroot: sysroot.Sysroot | None = None

    def sysroot_lib_dirs(self) -> list[str]:
        """The sysroot's system library folders as the container sees them."""
        if self.sysroot is None:
            return []
        root = self.sysroot.root
        return [f"{SYSROOT_MOUNT}/{d.relative_to(root).as_posix()}" for d in self.sysroot.system_lib_dirs()]

    def compilers(self) -> image_contents.Toolchain:
        """The recorded compilers; without them (a job rendered but not built) the Debian base's known layout."""
        return self.toolchain or image_contents.planned_toolchain(self.spec)


def uses_sysroot(cell: shapes.Cell) -> bool:
    """Whether a container build of ``cell`` on a Debian base links against the bullseye sysroot: not with Debian's
    own CUDA toolkit (cu124), whose ``/usr/local/cuda/include/math.h`` wrapper includes glibc 2.41's
    ``bits/mathcalls-macros.h`` (the build fails on it against bullseye's headers): its floor is the base's."""
    return cell.toolkit.kind != "debian"


def nvcc_version(cell: shapes.Cell) -> str | None:
    """The nvcc a cell's image holds: the pinned wheel's version for PyPI toolkits."""
    for req in cell.toolkit.packages:
        if req.startswith("nvidia-cuda-nvcc=="):
            return req.split("==")[1]
        if req.startswith("nvidia-cuda-toolkit="):
            # Debian version strings read 12.4.131~12.4.1-2: the part before ~ is nvcc's.
            return req.split("=")[1].split("~")[0]
        if req.startswith("cuda-nvcc-"):  # NVIDIA's RPM: cuda-nvcc-12-8-12.8.93-1
            return req.rsplit("-", 2)[1]
    return None


def image_python(spec: images.ImageSpec) -> str:
    tag = dict(spec.build_args)["PYTHON_TAG"].split("-")[0]  # cp311
    return f"{tag[2]}.{tag[3:]}"


def build_python(target: Target, spec: images.ImageSpec) -> str:
    """The image Python that builds ``target``: any for abi3 wheels (>= the oldest), the target's otherwise."""
    have = image_python(spec)
    if target.abi3:
        if shapes.version_key(have) < shapes.version_key(target.python):
            raise UsageError(f"the image's Python {have} is older than the target's oldest CPython", target.python,
                             "use a base image with a newer Python")
        return have
    if images.is_debian_base(spec.base_image) and target.python not in (have, *images.free_threaded_pythons()):
        raise UsageError(
            f"the Debian base of {target.cell.name} has only Python {have}, the target needs", target.python,
            f"build the Python {have} targets here (--python {have}) or use a manylinux base with every CPython "
            f"(FARM_BASE_IMAGE={matrix.MANYLINUX_2_28})",
        )
    return target.python


def build_identifier(python: str, arch: str = "x86_64") -> str:
    return f"cp{python.replace('.', '')}-manylinux_{arch}"


def torch_volume(target: Target, python: str) -> str:
    key = hashlib.sha256(f"{python}\n{target.torch_requirement}".encode()).hexdigest()[:10]
    return volume_name(f"cuda-ext-farm-torch-py{python}-torch{target.torch}-cu{target.cell.cuda_major}-{key}")


def _pth_command(site: str) -> str:
    """A one-liner that makes the current interpreter see ``site`` (the torch volume) through a .pth file."""
    code = (f"import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()['purelib'], '_farm_torch.pth')"
            f".write_text('{site}\\n')")
    return f"python -c {shlex.quote(code)}"


def ca_mount(ca_bundle: Path | None) -> tuple[list[str], dict[str, str]]:
    if ca_bundle is None:
        return [], {}
    # A read-only mount for the container's lifetime: never part of an image.
    return [f"--volume={ca_bundle}:{CONTAINER_CA}:ro"], {"PIP_CERT": CONTAINER_CA, "SSL_CERT_FILE": CONTAINER_CA}


def ensure_torch_volume(job: ContainerBuild, python: str) -> str:
    """Install the target's torch into its volume once (under a lock); later builds mount it read-only."""
    target = job.target
    volume = torch_volume(target, python)
    docker = images.docker_cli()
    marker = f"{TORCH_MOUNT}/.farm-complete"
    lock = toolenv.cache_root() / "locks" / f"{volume}.lock"
    with fsutil.locked(lock, f"the torch volume {volume}"):
        probe = proc.run([docker, "run", "--rm", f"--volume={volume}:{TORCH_MOUNT}", job.image, "test", "-f", marker],
                         capture=True, check=False, log=False)
        if probe.returncode == 0:
            log.reuse(f"torch {target.torch} in the volume {volume}")
            return volume
        mounts, ca_env = ca_mount(images.host_ca_bundle())
        name = f"farm-torch-{job.job}"
        cmd = [docker, "run", "--rm", "--init", f"--name={name}", f"--label=farm.job={job.job}",
               f"--volume={volume}:{TORCH_MOUNT}", f"--volume={PIP_CACHE_VOLUME}:{CONTAINER_HOME}/.cache/pip",
               *mounts, *[f"--env={k}={v}" for k, v in ca_env.items()], job.image, "sh", "-c",
               f"set -e; rm -rf {TORCH_MOUNT}/site; "
               f"/opt/python/{images.python_tag(python)}/bin/python -m pip install --quiet --target "
               f"{TORCH_MOUNT}/site --cache-dir {CONTAINER_HOME}/.cache/pip "
               f"{shlex.quote(target.torch_requirement)}; touch {marker}"]
        with proc.on_interrupt(lambda: remove_containers(job.job)):
            proc.run(cmd, what=f"installing torch {target.torch} into {volume} failed",
                     hint="pip's message is above; check the network, an index mirror or the CA bundle")
    return volume


def farm_settings(job: ContainerBuild, nvcc: str) -> dict[str, str]:
    """The farm's layer of a container build's environment (ci/builds/environment.py): the cell's list, the image's
    compilers and ccache wrapper of nvcc, the deterministic and compression flags, the compile cache's settings (with
    the caller's own CCACHE_*), and ci/buildsite first on PYTHONPATH (torch.cuda.is_available() True)."""
    target = job.target
    compilers = job.compilers()
    farm = {
        "TORCH_CUDA_ARCH_LIST": target.cell.arch_list,
        "MAX_JOBS": str(job.max_jobs or os.cpu_count() or 2),
        "CXX": compilers.cxx,
        "CC": compilers.cc,
        "PYTORCH_NVCC": in_container.IMAGE_NVCC_WRAPPER,  # see docker/Dockerfile
        # Deterministic objects (see ci/builds/environment.py); toolkits older than 12.8 lack -frandom-seed.
        **environment.farm_flags(target, nvcc or None),
        "CCACHE_DIR": f"{CONTAINER_HOME}/.cache/ccache",
        "CCACHE_BASEDIR": "/project",
        "CCACHE_NOHASHDIR": "1",
        **compiler_cache.cache_settings(),
        # torch.cuda.is_available() True for the project's build (the image's Python has no PYTHONPATH of its own).
        **cuda_available.pythonpath(target, BUILDSITE_MOUNT, {}),
    }
    # The caller's own ccache settings (CCACHE_LOGFILE, CCACHE_MAXSIZE, ...) reach the container too.
    return farm | {k: v for k, v in settings.current().environ.items() if k.startswith("CCACHE_") and k not in farm}


def nvcc_front(target: Target, build_env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """``CUDA_HOME`` (setuptools' own compile runs its ``bin/nvcc``) and CMake's compiler naming a folder whose nvcc
    runs the wrapper, and the command that makes it in the container (ci/nvcc/shim.py), as on the host
    (ci/builds/cmake_compiler.py); neither where the project names its ``CUDA_HOME``."""
    if target.cpu or "CUDA_HOME" in build_env:
        return cmake_compiler.architectures(target, build_env), ""
    code = (f"import pathlib, sys; sys.path[:0] = [{NVCC_TOOLS_MOUNT!r}]; import shim; "
            f"shim.make_shim(pathlib.Path({NVCC_FRONT!r}), {IMAGE_CUDA_HOME!r}, "
            f"['python', '-I', '{NVCC_TOOLS_MOUNT}/{arch_flags.WRAPPER.name}'])")
    front = cmake_compiler.front_env(target, NVCC_FRONT, f"{NVCC_FRONT}/bin/nvcc", build_env)
    return front, f"python -I -c {shlex.quote(code)}"


@dataclasses.dataclass(frozen=True)
class BuildEnvironment:
    """What the project's build sees in the container (``env``), the ``docker create`` arguments that give it, and
    what runs in the container before the build and before the repair (sccache's figures)."""

    env: dict[str, str]
    create_args: list[str]
    before_build: str = ""
    stats: str = ""


def build_environment(job: ContainerBuild, ca_bundle: Path | None) -> BuildEnvironment:
    """The farm's settings under the project's build-env (composed as on every route), the CA bundle, the sysroot's
    compilers, the compile cache, and in front of nvcc the nvcc wrapper (then the module anchor for nvcc < 12.8,
    then the cache or the image's ccache wrapper), however the build runs nvcc (:func:`nvcc_front`)."""
    target = job.target
    nvcc = nvcc_version(target.cell) or ""
    values = project_source.build_values(target, nvcc or None)
    own = {k: project.expand(v, values) for k, v in target.project.build_env.items()}
    compiles, compile_args = container_compiles.compile_env(job)  # the farm's layer: the project's build-env wins
    build_env = environment.compose(settings.current().environ, farm_settings(job, nvcc) | compiles, own, inherit=False)
    mounts, ca_env = ca_mount(ca_bundle)
    build_env, mounts = build_env | ca_env, mounts + compile_args
    if job.sysroot is not None:
        mounts.append(f"--volume={job.sysroot.root}:{SYSROOT_MOUNT}:ro")
        build_env |= job.sysroot.build_env(build_env["CC"], build_env["CXX"], mount=SYSROOT_MOUNT)
    # sccache in front of the compilers (FARM_COMPILE_CACHE=sccache); its nvcc front runs behind the nvcc wrapper,
    # and the host compilers' behind the compile front's (ci/nvcc/host_front.py).
    cache = in_container.route(job.outputs.work_dir(target), build_env)
    build_env, mounts = build_env | cache.env, mounts + cache.create_args
    build_env |= container_compiles.host_fronts(job, build_env, f"{NVCC_TOOLS_MOUNT}/host_front.py")
    mounts.append(f"--volume={project.FARM_ROOT / 'ci' / 'nvcc'}:{NVCC_TOOLS_MOUNT}:ro")
    next_nvcc = build_env["PYTORCH_NVCC"]
    if not environment.nvcc_has_random_seed(nvcc):
        # The same anonymous-namespace names in every build without -frandom-seed: see the script.
        build_env["FARM_NVCC"] = next_nvcc
        next_nvcc = f"{NVCC_TOOLS_MOUNT}/nvcc-module-anchor"
    # In front of the rest: the project's own architecture flags refused, replaced or kept (ci/builds/arch_flags.py)
    build_env |= arch_flags.wrapper_env(target, "python", f"{NVCC_TOOLS_MOUNT}/{arch_flags.WRAPPER.name}", next_nvcc)
    if cuda_available.applies(target):
        mounts.append(f"--volume={cuda_available.SITE}:{BUILDSITE_MOUNT}:ro")
    # The compile cache's hits and misses of this build alone, from a stats log in the build container (the
    # cache volume's own counters are shared by every build that runs at the same time).
    build_env["CCACHE_STATSLOG"] = CCACHE_STATS_LOG
    front, make_front = nvcc_front(target, build_env)
    before = " && ".join(filter(None, (make_front, cache.before_build)))
    return BuildEnvironment(build_env | front, mounts, before, cache.stats)


def cibuildwheel_env(job: ContainerBuild, python: str, volume: str, ca_bundle: Path | None) -> dict[str, str]:
    """cibuildwheel's settings for ``job``: one build identifier in the cell's image, the build's environment
    (:func:`build_environment`), torch from its read-only volume, the repair and the smoke test in the image."""
    target = job.target
    excluded = (*matrix.TORCH_LIBRARIES, *matrix.cuda_libraries(target.cell.cuda_major))
    excludes = " ".join(f"--exclude {lib}" for lib in excluded)
    built = build_environment(job, ca_bundle)
    build_env, (_, ca_env) = built.env, ca_mount(ca_bundle)
    create_args = [f"--label=farm.job={job.job}",
                   f"--volume={PIP_CACHE_VOLUME}:{CONTAINER_HOME}/.cache/pip",
                   f"--volume={volume_name(CCACHE_VOLUME)}:{CONTAINER_HOME}/.cache/ccache",
                   f"--volume={volume}:{TORCH_MOUNT}:ro", *built.create_args]
    site = f"{TORCH_MOUNT}/site"
    # The image has the hash-pinned build tools; only the project's own extra build requirements are installed.
    in_image = set(pins.pinned_in(pins.lock_path(images.IMAGE_TOOLS_LOCK)))
    extra = [r for r in target.project.build_requires if envs.requirement_name(r) not in in_image]
    before_build = _pth_command(site) + (f" && pip install {' '.join(shlex.quote(r) for r in extra)}" if extra else "")
    before_build += f" && rm -f {CCACHE_STATS_LOG}" + (f" && {built.before_build}" if built.before_build else "")
    stats = " && ".join(filter(None, (CCACHE_STATS, built.stats)))
    smoke, origin = free_threaded_cibw.test_commands(target, container_command(target.project.commands.smoke))
    # The farm's steps in the container never see ci/buildsite: an empty PYTHONPATH is none to Python.
    unset, test_env = ("PYTHONPATH= ", {"PYTHONPATH": ""}) if "PYTHONPATH" in build_env else ("", {})
    return {
        "CIBW_PLATFORM": "linux",
        # An aarch64 target builds here only on an arm64 machine (GitHub's arm runners): natively, in its image.
        "CIBW_ARCHS": job.target.arch,
        "CIBW_BUILD": build_identifier(python, job.target.arch),
        **free_threaded_cibw.enable_env(python),  # cibuildwheel 3.x builds CPython 3.13t only when asked
        f"CIBW_MANYLINUX_{job.target.arch.upper()}_IMAGE": job.image,
        "CIBW_CONTAINER_ENGINE": f"docker; create_args: {' '.join(create_args)}; disable_host_mount: true",
        "CIBW_BUILD_FRONTEND": "build; args: --no-isolation",
        # torch comes from the read-only volume: one install per torch pin, not one per build.
        "CIBW_BEFORE_BUILD": before_build,
        # Every value reaches the build as composed (a quote, a dollar sign): ci/builds/cibw_environment.py.
        "CIBW_ENVIRONMENT": cibw_environment.render(build_env, pathsep=":"),
        "CIBW_REPAIR_WHEEL_COMMAND": f"{stats} && {unset}auditwheel repair {excludes} -w {{dest_dir}} "
                                     "{wheel}",
        # The test venv is new and empty but for the same read-only torch and the wheel.
        "CIBW_BEFORE_TEST": _pth_command(site),
        "CIBW_TEST_ENVIRONMENT": cibw_environment.render({**ca_env, **test_env}, pathsep=":"),
        # cibuildwheel runs it in an empty folder (the source cannot shadow the wheel), as the farm runs every
        # configured command; then the package must have come from the test venv.
        "CIBW_TEST_COMMAND": f"pip check && {smoke} && {origin}",
        "CIBW_BUILD_VERBOSITY": "1",
        # cibuildwheel's own abi3audit step fetches virtualenv from GitHub; the farm runs abi3audit in its audit.
        "CIBW_AUDIT_COMMAND": "",
    }


#: One line with the build's compile-cache hits and misses (read by build-all's table), counted from the
#: stats log ccache writes a line per counter to (a "# <file>" line before each compile's counters).
CCACHE_STATS_LOG = "/tmp/farm-ccache-stats.log"
CCACHE_STATS = (f"(cat {CCACHE_STATS_LOG} 2>/dev/null || true) | awk '/^(direct|preprocessed)_cache_hit$/{{h++}} "
                "/^cache_miss$/{m++} END{print \"farm-ccache-stats: hits=\" h+0 \" misses=\" m+0}'")


def container_command(command: tuple[str, ...]) -> str:
    """A configured command as a shell line for cibuildwheel (whose {project} placeholder matches ours)."""
    values = {"project": "{project}", "python": "python", "out": "/tmp", "wheel": "{wheel}"}
    return shlex.join(project.expand(part, values) for part in command)


def cibuildwheel_command(project_dir: Path, outdir: Path, python: str | None = None) -> list[str]:
    return [str(free_threaded_cibw.cibuildwheel_python(python)), "-m", "cibuildwheel", "--output-dir", str(outdir),
            str(project_dir)]


def remove_containers(job: str) -> None:
    """Stop and remove every container of ``job`` (interrupts; cibuildwheel's own included)."""
    docker = images.docker_cli()
    found = proc.run([docker, "ps", "-aq", "--filter", f"label=farm.job={job}"], capture=True, check=False, log=False)
    ids = found.stdout.split()
    if ids:
        proc.run([docker, "rm", "-f", *ids], capture=True, check=False)


def resolve_in_container(job: ContainerBuild, torch_volume_name: str, wheel: Path,
                         out: Path) -> dict[str, symbols.Resolution]:
    """Run the symbol resolution of ``wheel`` inside the image, against the target's torch volume."""
    farm = project.FARM_ROOT / "ci"
    name = f"farm-symbols-{job.job}"
    # The exports of torch's libraries are cached in a volume: reading libtorch_cpu's 100k symbols takes long.
    cmd = [images.docker_cli(), "run", "--rm", "--init", f"--name={name}", f"--label=farm.job={job.job}",
           f"--volume={torch_volume_name}:{TORCH_MOUNT}:ro", f"--volume={farm}:{FARM_MOUNT}/ci:ro",
           f"--volume={volume_name(SYMBOLS_VOLUME)}:/opt/farm-symbols", f"--volume={wheel.parent}:/wheel:ro",
           f"--volume={out.parent}:/out", "--env", f"PYTHONPATH={FARM_MOUNT}", "--user", "0",
           *([f"--volume={job.sysroot.root}:{SYSROOT_MOUNT}:ro"] if job.sysroot else []), job.image,
           "sh", "-c", free_threaded_cibw.symbols_python(job.target) + ' -m ci.audit.symbols "$0" --site "$1" '
           '--extra-lib-dir /usr/local/cuda/lib64 --cache /opt/farm-symbols --out "$2" '
           + "".join(f"--system-lib-dir {d} " for d in job.sysroot_lib_dirs()) + '&& chown "$3" "$2"',
           f"/wheel/{wheel.name}", f"{TORCH_MOUNT}/site", f"/out/{out.name}", f"{os.getuid()}:{os.getgid()}"]
    with proc.on_interrupt(lambda: remove_containers(job.job)):
        proc.run(cmd, what="the symbol check in the builder image failed")
    return symbols.load_resolutions(out)


def build_in_container(job: ContainerBuild) -> report.BuildReport:
    """Build, repair (in the image), audit and publish ``job``'s target; a failed first build leaves no empty
    wheelhouse."""
    preflight.preflight(job.target)  # what the source alone refuses (links, submodules, C++ standard): now
    with publish.no_empty_wheelhouse(job.outputs):
        return _build_in_container(job)


def _build_in_container(job: ContainerBuild) -> report.BuildReport:
    started = time.monotonic()
    target = job.target
    python = build_python(target, job.spec)
    job.outputs.check_writable()
    if job.toolchain is None:
        job = dataclasses.replace(job, toolchain=image_contents.image_toolchain(job.image))
    if job.sysroot is None and images.is_debian_base(job.spec.base_image) and uses_sysroot(target.cell):
        job = dataclasses.replace(job, sysroot=sysroot.for_arch("x86_64"))
    with log.target(target.id, "container build"), fsutil.locked(job.outputs.lock(target),
                                                                  f"the build of {target.id}"):
        cuobjdump = toolkit.ensure_cuobjdump()
        with log.stage("torch volume"):
            volume = ensure_torch_volume(job, python)
        with publish.staging(job.outputs, target) as stage:
            env = cibuildwheel_env(job, python, volume, images.host_ca_bundle())
            # cibuildwheel calls `docker`; give it the client the farm chose.
            docker_dir = str(Path(images.docker_cli()).parent)
            env["PATH"] = proc.path_with(docker_dir)
            # sccache's storage and scheduler settings, handed on by name (``--env NAME``): on no command line.
            env |= in_container.passed_environment()
            source = stage / "source"
            project_source.sync_source(target.project.root, source, (job.outputs.build_root, job.outputs.wheelhouse))
            output = stage / "build-output.log"
            with log.stage("cibuildwheel in the image"), proc.on_interrupt(lambda: remove_containers(job.job)), \
                    container_compiles.measured(job, source, env):
                try:
                    proc.run(cibuildwheel_command(source, stage / "out", python), env=env, cwd=source,
                             what=f"the container build of {target.id} failed",
                             hint="the compiler's output is above; nothing was written to the wheelhouse",
                             tee=output, hide=failure.hidden,
                             # the nvcc wrapper's refusal (a failed edge's output, printed at once) stops it
                             stop_when=arch_flags.watch_output(target, ["/project"]))
                except CommandFailed as exc:
                    # cibuildwheel copies the project to /project in the container: paths are relative to it.
                    raise failure.explain_build(exc, output.read_text(errors="replace"),
                                                build=f"the container build of {target.id}", source=source,
                                                paths_from="/project", cpu=target.cpu,
                                                memory=container_compiles.configured_limit(),
                                                linkable=sorted(target.cell.toolkit.linkable)) from None
                except FarmError:
                    remove_containers(job.job)  # stopped by the watcher: cibuildwheel's container is still there
                    raise
            in_container.report(output.read_text(errors="replace"))  # sccache's figures, the scheduler's answer
            built = publish.one_wheel(stage / "out", "cibuildwheel")

            def run_audit(wheel: Path, audited: Target) -> audit_records.AuditResult:
                resolutions = resolve_in_container(job, volume, wheel, stage / "symbols.json")
                return wheel_audit.audit_wheel(wheel, audited, cuobjdump, resolutions=resolutions)

            return container_compiles.reported(job, publish.publish(  # repaired in the image: kept as it is
                target, built, stage, job.outputs, repair=lambda wheel, _: wheel, audit=run_audit, mode="container",
                nvcc=nvcc_version(target.cell), started=started, image=job.image, cuobjdump=cuobjdump,
                build_output=output))
