"""Builder images: one per matrix cell, from docker/Dockerfile, tagged by content.

The tag is a hash of everything that goes into the image (the Dockerfile's
text and the cell's build arguments), so a changed cell gets a new image and an
unchanged one is reused without asking the engine to rebuild.

Architectures: an image is built for the machine that builds it (``ci.universe.targets.platforms.host_arch``): on an
arm64 machine (the release's ``ubuntu-24.04-arm`` jobs) a cell's manylinux base becomes
``manylinux_2_28_aarch64`` and the tag names the architecture (``cu130-aarch64-<hash>``).

Base images: a cell names its official base (a manylinux image). Where no
registry is reachable, ``bootstrap_base`` makes a Debian base with debootstrap
and ``docker import``, and ``FARM_BASE_IMAGE`` (or ``--base-image``) points
the cells at it.

Layout: where a base keeps its compiler and its Pythons is found at image build time by docker/'s layout
scripts (``detect-toolchain.sh``, ``own-python.sh``); ``ci/linux/image_contents.py`` reads what the image recorded.
Sizes: ``ci/linux/image_contents.py`` prints and saves an image's per-layer sizes (what a CI job's disk must hold).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import ssl
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from ci import proc, settings
from ci.errors import MissingRequirement, UsageError, env_path
from ci.linux import debian
from ci.log import log
from ci.universe import matrix, pins, shapes
from ci.universe.project import FARM_ROOT
from ci.universe.targets import platforms

DOCKERFILE = FARM_ROOT / "docker" / "Dockerfile"
#: The scripts the Dockerfile runs to find the base's layout (copied into the build context and the image).
LAYOUT_SCRIPTS = ("detect-toolchain.sh", "own-python.sh")
#: The script of the Dockerfile's free-threaded stage (the free-threaded CPython built from Debian's source).
STAGE_SCRIPTS = ("free-threaded-python.sh",)
#: Where detect-toolchain.sh records the compiler paths in the image.
TOOLCHAIN_ENV = "/etc/farm/toolchain.env"
IMAGE_REPO = "cuda-ext-farm/builder"
BASE_REPO = "cuda-ext-farm/base"

#: Debian suite and packages of the bootstrapped bases. Compilers are pinned to
#: the suite's release; the image build fails loudly if the mirror serves others.
DEBIAN_SUITE = "bookworm"
COMMON_PACKAGES = ("make", "ccache", "git", "ca-certificates", "file")
DEBIAN_PACKAGES: dict[tuple[str, str], tuple[str, ...]] = {
    ("bookworm", "gcc-12"): (
        "g++-12=12.2.0-14+deb12u1", "gcc-12=12.2.0-14+deb12u1", "g++=4:12.2.0-3", "gcc=4:12.2.0-3",
        "python3.11-venv", "python3.11-dev",
    ),
    ("trixie", "gcc-13"): (
        "g++-13=13.3.0-16", "gcc-13=13.3.0-16", "python3-venv=3.13.5-1", "python3-dev=3.13.5-1",
    ),
}
#: manylinux_2_28 (AlmaLinux 8) already has every CPython, auditwheel and patchelf, and one gcc-toolset (the
#: newest); the cell's own toolset (gcc-toolset-<major>-gcc-c++), the cache and git are added.
MANYLINUX_PACKAGES = ("ccache", "git")
#: The hash-pinned locks an image installs (ci/requirements/), copied into its build context.
IMAGE_TOOLS_LOCK = "image"


class ImageError(MissingRequirement):
    """Docker is missing or an image cannot be had."""


def _probe(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """A quiet query of the docker client (not logged: it changes nothing)."""
    return proc.run(cmd, capture=True, check=False, log=False)


@functools.cache
def docker_cli() -> str:
    """A docker client that can run BuildKit builds (needed for build secrets).

    Clients from 23.0 on need the buildx plugin for BuildKit; older clients have
    it built in. ``FARM_DOCKER`` wins; otherwise the first suitable ``docker``
    on PATH.
    """
    chosen = env_path("FARM_DOCKER", settings.current().environ, kind="executable")
    if chosen:
        if not _probe([chosen, "version", "--format", "{{.Client.Version}}"]).stdout.strip():
            raise UsageError("FARM_DOCKER is not a usable docker client", chosen,
                             f"`{chosen} version` must print the client's version: point FARM_DOCKER at a docker "
                             "client, or unset it to use the one on PATH")
        return chosen
    candidates: list[Path] = []
    for folder in settings.current().environ.get("PATH", "").split(os.pathsep):
        path = Path(folder) / "docker"
        try:
            usable = path.is_file() and os.access(path, os.X_OK)
        except OSError:  # a PATH entry this user may not read
            continue
        if usable and path.resolve() not in [c.resolve() for c in candidates]:
            candidates.append(path)
    if not candidates:
        raise ImageError("the docker client is not installed", "docker",
                         "install Docker (apt-get install docker.io) or set FARM_DOCKER to a docker client")
    for path in candidates:
        if _probe([str(path), "buildx", "version"]).returncode == 0:
            return str(path)
        version = _probe([str(path), "version", "--format", "{{.Client.Version}}"]).stdout.strip()
        if version and version.split(".")[0].isdigit() and int(version.split(".")[0]) < 23:
            return str(path)
    raise ImageError(
        "no docker client with BuildKit found", ", ".join(map(str, candidates)),
        "install the buildx plugin or set FARM_DOCKER to a client that has it",
    )



@dataclasses.dataclass(frozen=True)
class ImageSpec:
    cell: shapes.Cell
    base_image: str
    build_args: tuple[tuple[str, str], ...]
    #: The CPU architecture of the image (its base's).
    arch: str = "x86_64"

    def context_files(self) -> dict[str, Path]:
        """The files of the build context: the Dockerfile and the locks it installs (name in context -> source)."""
        files = {"Dockerfile": DOCKERFILE, "image.txt": pins.lock_path(IMAGE_TOOLS_LOCK)}
        files |= {name: DOCKERFILE.parent / name for name in (*LAYOUT_SCRIPTS, *STAGE_SCRIPTS)}
        if self.cell.toolkit.kind == "pypi":
            files["toolkit.txt"] = pins.lock_path(pins.toolkit_lock(self.cell))
            if self.cell.toolkit.library_headers:
                files["headers.txt"] = pins.lock_path(pins.headers_lock(self.cell))
        return files

    @property
    def tag(self) -> str:
        """Content-derived: the Dockerfile, its layout scripts, the locks it installs and the build arguments."""
        digest = hashlib.sha256()
        for name, path in sorted(self.context_files().items()):
            digest.update(name.encode() + b"\0" + path.read_bytes())
        for key, value in self.build_args:
            digest.update(f"{key}={value}\n".encode())
        arch = "" if self.arch == "x86_64" else f"{self.arch}-"
        return f"{IMAGE_REPO}:{self.cell.name}-{arch}{digest.hexdigest()[:12]}"


def python_tag(python: str) -> str:
    """``3.11`` -> ``cp311-cp311``, ``3.13t`` -> ``cp313-cp313t`` (the folder name cibuildwheel looks for under
    /opt/python)."""
    major, minor = python.removesuffix("t").split(".")[:2]
    return f"cp{major}{minor}-cp{major}{minor}{'t' if python.endswith('t') else ''}"


#: The CPython the free-threaded stage builds on a Debian base (ci/toolchain/free_threaded.py SOURCES).
FREE_THREADED_STAGE = "3.13"


def free_threaded_pythons() -> tuple[str, ...]:
    """The free-threaded CPythons a Debian base's image has besides its suite's own (the free-threaded stage)."""
    return (f"{FREE_THREADED_STAGE}t",)


def base_image_for(cell: shapes.Cell, env: Mapping[str, str] | None = None, arch: str = "x86_64") -> str:
    """The base of ``cell``'s image: ``FARM_BASE_IMAGE_<CELL>``, ``FARM_BASE_IMAGE``, else the cell's own base for
    ``arch`` (``quay.io/pypa/manylinux_2_28_aarch64`` on an arm64 machine)."""
    env = settings.current().environ if env is None else env
    chosen = env.get(f"FARM_BASE_IMAGE_{cell.name.upper()}") or env.get("FARM_BASE_IMAGE") or \
        matrix.base_image_for_arch(cell.base_image, arch)
    # FARM_BASE_IMAGE=cuda-ext-farm/base (or any suite of it) selects each cell's own suite.
    if chosen.split(":")[0] == BASE_REPO:
        return f"{BASE_REPO}:{cell.debian_suite}"
    return chosen


def is_debian_base(base_image: str) -> bool:
    return base_image.startswith(BASE_REPO)


def image_python(base_image: str, cell: shapes.Cell) -> str:
    """Debian bases bring their suite's Python; manylinux bases have every CPython."""
    return matrix.DEBIAN_PYTHON[cell.debian_suite] if is_debian_base(base_image) else cell.python


def os_packages(cell: shapes.Cell) -> tuple[str, ...]:
    key = (cell.debian_suite, cell.host_compiler)
    if key not in DEBIAN_PACKAGES:
        raise UsageError(f"no package list for {cell.host_compiler} on Debian {cell.debian_suite}", cell.name,
                         "add one to DEBIAN_PACKAGES in ci/linux/images.py")
    toolkit = cell.toolkit.packages if cell.toolkit.kind == "debian" else ()
    return (*DEBIAN_PACKAGES[key], *COMMON_PACKAGES, *toolkit)


def manylinux_packages(cell: shapes.Cell) -> tuple[str, ...]:
    """The cell's gcc-toolset (the base brings only its newest one), the cache and git."""
    return (f"gcc-toolset-{gcc_major(cell)}-gcc-c++", *MANYLINUX_PACKAGES)


def gcc_major(cell: shapes.Cell) -> int:
    """``gcc-12`` -> 12 (ci/universe/matrix.py validates the spelling)."""
    return int(cell.host_compiler.partition("-")[2])


def free_threaded_args() -> dict[str, str]:
    """The free-threaded stage's build arguments: the CPython ci/toolchain/free_threaded.py builds on a host, from
    the same source package, patches and flags."""
    from ci.toolchain import free_threaded

    source = free_threaded.SOURCES[FREE_THREADED_STAGE]
    return {"FREE_THREADED_SOURCE": f"{source.package} {source.suite} {source.upstream}",
            "FREE_THREADED_SKIPPED_PATCHES": " ".join(free_threaded.SKIPPED_PATCHES),
            "FREE_THREADED_FLAGS": " ".join(free_threaded.CONFIGURE_FLAGS)}


def spec_for(cell: shapes.Cell, base_image: str | None = None, arch: str | None = None) -> ImageSpec:
    """The image of ``cell`` for ``arch`` (default: this machine's; an image runs where it was built)."""
    # A builder image is built for, and runs on, the machine's own architecture (GitHub's arm64 runners build
    # the aarch64 images natively).
    arch = arch or platforms.host_arch()
    if arch not in matrix.NVIDIA_REPO_ARCH:
        raise UsageError("the farm has no builder images for this machine's architecture", arch,
                         f"build on {' or '.join(matrix.NVIDIA_REPO_ARCH)}")
    base = base_image or base_image_for(cell, arch=arch)
    debian = is_debian_base(base)
    if debian and not base.endswith(":" + cell.debian_suite):
        base = f"{BASE_REPO}:{cell.debian_suite}"
    if not debian and cell.toolkit.kind == "debian":
        release = f"; it is the local stand-in of {cell.stand_in_for}, which builds there" if cell.stand_in_for else ""
        raise UsageError(
            f"cell {cell.name} takes its toolkit from Debian packages, which only a Debian base has", base,
            f"use FARM_BASE_IMAGE=cuda-ext-farm/base{release}",
        )
    if debian and cell.toolkit.kind == "nvidia-repo":
        stand_in = matrix.stand_in_of(cell)
        raise UsageError(
            f"cell {cell.name} takes CUDA {cell.cuda} from NVIDIA's repository (RPMs for the manylinux_2_28 base), "
            "which a Debian base cannot install", base,
            (f"build its local stand-in with --cuda {stand_in.cuda}" if stand_in else "use its manylinux base")
            + f" (or unset FARM_BASE_IMAGE where {matrix.NVIDIA_REPO.split('/')[2]} and quay.io are reachable)",
        )
    args = {
        "OS_FAMILY": "debian" if debian else "manylinux",
        "BASE_IMAGE": base,
        "CELL": cell.name,
        "CUDA_VERSION": cell.cuda,
        "TORCH_VERSION": cell.torch,
        "HOST_COMPILER": cell.host_compiler,
        "OS_PACKAGES": " ".join(os_packages(cell) if debian else manylinux_packages(cell)),
        "PYTHON_TAG": python_tag(image_python(base, cell)),
        "TOOLKIT_KIND": cell.toolkit.kind,
        # pypi: labels only (the toolkit is installed from toolkit.txt, hash-pinned); nvidia-repo: the RPM specs
        # (name-version-release) dnf installs.
        "TOOLKIT_PACKAGES": " ".join(cell.toolkit.packages),
        "TOOLKIT_HOME": cell.toolkit.home_subdir,
        **free_threaded_args(),
    }
    if cell.toolkit.kind == "nvidia-repo":
        # The repository of the image's architecture (sbsa for aarch64); dnf installs TOOLKIT_PACKAGES from it.
        args["TOOLKIT_REPO"] = matrix.nvidia_repo_file(arch)
    return ImageSpec(cell=cell, base_image=base, build_args=tuple(sorted(args.items())), arch=arch)


def ssl_context(ca_bundle: Path | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)


def probe_url(url: str, ca_bundle: Path | None = None, timeout: float = 15.0) -> str:
    """Empty when ``url`` answers, else why not (one line): whether a toolkit's source is reachable from here."""
    try:
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout, context=ssl_context(ca_bundle)):
            return ""
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return " ".join(str(reason).split())[:160] or type(exc).__name__


def check_toolkit_source(spec: ImageSpec, probe: Callable[[str], str] | None = None) -> None:
    """Before an image build that downloads its toolkit from NVIDIA's repository: stop with one line naming the
    cell's local stand-in when this machine cannot reach the repository (instead of a long docker build error)."""
    repo = dict(spec.build_args).get("TOOLKIT_REPO")
    if spec.cell.toolkit.kind != "nvidia-repo" or not repo:
        return
    probe = probe or (lambda url: probe_url(url, host_ca_bundle()))
    reason = probe(repo)
    if reason:
        what, fix = matrix.unreachable_toolkit(spec.cell)
        raise ImageError(what, reason, fix)


def host_ca_bundle(env: Mapping[str, str] | None = None) -> Path | None:
    """The CA bundle to hand to builds as a secret: FARM_CA_BUNDLE, else SSL_CERT_FILE, else none."""
    env = settings.current().environ if env is None else env
    explicit = env.get("FARM_CA_BUNDLE", "").strip()
    if explicit:
        if not Path(explicit).is_file():
            raise UsageError("FARM_CA_BUNDLE does not point at a file", explicit,
                             "point it at a PEM bundle (e.g. /etc/ssl/certs/ca-certificates.crt) or unset it")
        return Path(explicit)
    for key in ("SSL_CERT_FILE", "PIP_CERT"):
        value = env.get(key)
        if value and Path(value).is_file():
            return Path(value)
    return None


def build_command(spec: ImageSpec, ca_bundle: Path | None, context: Path | None = None) -> list[str]:
    """``docker build`` of ``spec`` from ``context`` (a folder holding :meth:`ImageSpec.context_files`)."""
    context = context or DOCKERFILE.parent
    cmd = [docker_cli(), "build", "--file", str(context / "Dockerfile"), "--tag", spec.tag]
    for key, value in spec.build_args:
        cmd += ["--build-arg", f"{key}={value}"]
    if ca_bundle is not None:
        cmd += ["--secret", f"id=cacert,src={ca_bundle}"]
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        if settings.current().environ.get(proxy):  # docker build hands the client's value on
            # Predefined proxy build args are not persisted in the image history.
            cmd += ["--build-arg", proxy]
    return [*cmd, str(context)]


def require_engine() -> None:
    # `docker version`, not `docker info --format`: without a daemon, docker 28's info answers with a template
    # error ("indirection through nil pointer") where version names the socket it could not reach.
    result = _probe([docker_cli(), "version", "--format", "{{.Server.Version}}"])
    if result.returncode != 0:
        reason = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no answer"
        raise ImageError("no Docker engine is reachable", reason,
                         "start one (sudo dockerd & or systemctl start docker) or set DOCKER_HOST")


def image_exists(tag: str) -> bool:
    return _probe([docker_cli(), "image", "inspect", tag]).returncode == 0


def image_size(tag: str) -> int:
    out = _probe([docker_cli(), "image", "inspect", "--format", "{{.Size}}", tag])
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else 0


def ensure_base(base: str) -> None:
    if image_exists(base):
        return
    result = proc.run([docker_cli(), "pull", base], capture=True, check=False)
    if result.returncode != 0:
        raise ImageError(
            "the base image is not present and cannot be pulled", base,
            f"without registry access run `{settings.entry('base-image')}` and export FARM_BASE_IMAGE={BASE_REPO}",
        )


def ensure_image(spec: ImageSpec, *, rebuild: bool = False) -> str:
    # The tag is read from the files once: a lock rewritten during a long build must not name an image never built.
    tag = spec.tag
    require_engine()
    if not rebuild and image_exists(tag):
        log.reuse(tag)
        return tag
    check_toolkit_source(spec)
    ensure_base(spec.base_image)
    env = {"DOCKER_BUILDKIT": "1"}
    with tempfile.TemporaryDirectory(prefix="farm-image-context-") as tmp:
        context = write_context(spec, Path(tmp))
        cmd = build_command(spec, host_ca_bundle(), context)
        proc.run(cmd, env=env, what=f"the image build of {tag} failed", hint="the failing step's output is above")
    return tag


def write_context(spec: ImageSpec, folder: Path) -> Path:
    """The image's build context: the Dockerfile and its locks (empty lock files for what the cell lacks)."""
    for name in ("toolkit.txt", "headers.txt"):
        (folder / name).write_text("")
    for name, source in spec.context_files().items():
        shutil.copyfile(source, folder / name)
    return folder


# --- base image bootstrap -----------------------------------------------------------------

def bootstrap_command(suite: str, rootfs: Path, mirror: str) -> list[str]:
    return ["debootstrap", "--variant=minbase", "--include=ca-certificates", suite, str(rootfs), mirror]


def bootstrap_base(suite: str = DEBIAN_SUITE, mirror: str | None = None, *, force: bool = False) -> str:
    """debootstrap ``suite`` and import it as ``cuda-ext-farm/base:<suite>``."""
    require_engine()
    tag = f"{BASE_REPO}:{suite}"
    if not force and image_exists(tag):
        log.reuse(tag)
        return tag
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed", "debootstrap", "apt-get install debootstrap")
    mirror = mirror or debian.mirror(default=None)
    if not mirror:
        raise ImageError("no Debian mirror found", "/etc/apt", "pass --mirror URL or set FARM_DEBIAN_MIRROR")
    with tempfile.TemporaryDirectory(prefix="farm-rootfs-") as tmp:
        rootfs = Path(tmp) / suite
        proc.run(bootstrap_command(suite, rootfs, mirror), what=f"debootstrap of Debian {suite} failed",
                 hint=f"from the mirror {mirror}: check that it serves {suite} (pass --mirror URL or set "
                 "FARM_DEBIAN_MIRROR) and that this machine reaches it; debootstrap's output is above")
        # apt in the image should use the same mirror; nothing else is configured.
        # contrib/non-free: Debian's CUDA toolkit (nvidia-cuda-toolkit) lives in non-free.
        (rootfs / "etc/apt/sources.list").write_text(f"deb {mirror} {suite} main contrib non-free\n")
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        archive = Path(tmp) / "rootfs.tar"
        proc.run(["tar", "-C", rootfs, "-cf", archive, "."])
        proc.run([docker_cli(), "import", archive, tag], capture=True, what="docker import failed")
    return tag
