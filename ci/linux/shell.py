"""The dev shell: ``docker run`` in a cell's builder image with the source mounted.

The container runs with the caller's UID/GID, so what it writes into the
mounted checkout (in-place builds, build folders) belongs to the caller; the
image's own user ``build`` (UID 1000) is what a UID-1000 caller, the usual
first user of a workstation, gets. Other UIDs get a writable HOME in /tmp; the
cache volumes are world-writable (sticky) for them. The ccache and pip-cache
volumes of the container builds are mounted, the host CA bundle read-only when
there is one, and ``--gpus all`` is added when the engine has the NVIDIA runtime.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from ci import proc
from ci.linux import container as wheels
from ci.linux import images
from ci.toolchain import compiler_cache

IMAGE_BUILD_UID = 1000


def has_nvidia_runtime() -> bool:
    out = proc.run([images.docker_cli(), "info", "--format", "{{json .Runtimes}}"], capture=True, check=False,
                   log=False)
    return out.returncode == 0 and "nvidia" in out.stdout


def user_spec(uid: int, gid: int) -> str:
    return f"{uid}:{gid}"


def ccache_volume(uid: int) -> str:
    name = wheels.volume_name(wheels.CCACHE_VOLUME)
    return name if uid == IMAGE_BUILD_UID else f"{name}-uid{uid}"


def home_for(uid: int) -> str:
    return wheels.CONTAINER_HOME if uid == IMAGE_BUILD_UID else "/tmp/farm-home"


def passed_environment() -> dict[str, str]:
    """The compile cache's settings (FARM_CCACHE_REMOTE, FARM_CCACHE=off), which the container gets by name
    (``--env NAME``) from the docker client's environment: a storage URL can carry a password, which a command line
    would show in the process list and the replayable line."""
    return compiler_cache.cache_settings()


def shell_command(
    image: str,
    project: Path,
    command: Sequence[str],
    *,
    interactive: bool,
    gpus: bool,
    ca_bundle: Path | None,
    uid: int,
    gid: int,
    name: str = "",
) -> list[str]:
    # Named, with an init process and removed on exit: an interrupted farm stops it by name.
    cmd = [images.docker_cli(), "run", "--rm", "--init", "-i"]
    if name:
        cmd += ["--name", name, "--label", f"farm.job={name}"]
    if interactive:
        cmd.append("-t")
    cmd += [
        "--user", user_spec(uid, gid),
        "--volume", f"{project}:/project",
        "--workdir", "/project",
        # ccache needs write access to its whole tree: other UIDs get a volume of their own.
        "--volume", f"{ccache_volume(uid)}:{wheels.CONTAINER_HOME}/.cache/ccache",
        "--volume", f"{wheels.PIP_CACHE_VOLUME}:{wheels.CONTAINER_HOME}/.cache/pip",
        # nox keeps its venvs outside the mounted checkout: the host's .nox holds
        # interpreters of the host.
        "--env", f"FARM_NOX_ENVDIR={home_for(uid)}/.nox",
        "--env", f"HOME={home_for(uid)}",
        "--env", f"PIP_CACHE_DIR={wheels.CONTAINER_HOME}/.cache/pip",
        "--env", f"CCACHE_DIR={wheels.CONTAINER_HOME}/.cache/ccache",
    ]
    for key in sorted(passed_environment()):
        cmd += ["--env", key]
    if ca_bundle is not None:
        cmd += ["--volume", f"{ca_bundle}:{wheels.CONTAINER_CA}:ro",
                "--env", f"PIP_CERT={wheels.CONTAINER_CA}", "--env", f"SSL_CERT_FILE={wheels.CONTAINER_CA}"]
    if gpus:
        cmd += ["--gpus", "all"]
    return [*cmd, image, *(command or ["bash"])]


def run_shell(spec: images.ImageSpec, project: Path, command: Sequence[str]) -> int:
    tag = images.ensure_image(spec)
    name = f"farm-shell-{uuid.uuid4().hex[:12]}"
    interactive = not command and sys.stdin.isatty()
    cmd = shell_command(
        tag, project, command,
        interactive=interactive,
        gpus=has_nvidia_runtime(),
        ca_bundle=images.host_ca_bundle(),
        uid=os.getuid(), gid=os.getgid(), name=name,
    )
    with proc.on_interrupt(lambda: wheels.remove_containers(name)):
        # An interactive shell keeps the terminal (foreground); a command runs in its own process group.
        return proc.run(cmd, env=passed_environment(), check=False, foreground=interactive).returncode
