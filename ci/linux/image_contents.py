"""What a built builder image holds, read back from it: the host compilers ``docker/detect-toolchain.sh``
recorded there (``Toolchain``: ``ci/linux/container.py`` hands them to cibuildwheel as CC/CXX), and the size of each
layer (``nox -s images`` prints and saves them: what a CI job's disk must hold).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ci import proc, toolenv
from ci.linux.images import TOOLCHAIN_ENV, ImageError, ImageSpec, docker_cli, gcc_major, is_debian_base
from ci.log import log


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """The host compiler an image holds, as detect-toolchain.sh found it there."""

    cc: str
    #: What the build calls for C++: a ccache front for ``cxx_real``.
    cxx: str
    cxx_real: str
    version: str = ""


_TOOLCHAIN_KEYS = {"FARM_CC": "cc", "FARM_CXX": "cxx", "FARM_CXX_REAL": "cxx_real", "FARM_GCC_VERSION": "version"}


def parse_toolchain(text: str, source: str) -> Toolchain:
    """The KEY=value lines detect-toolchain.sh writes; ``source`` names them in the error."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in _TOOLCHAIN_KEYS:
            values[_TOOLCHAIN_KEYS[key]] = value
    missing = [key for key, field in _TOOLCHAIN_KEYS.items() if field not in values and key != "FARM_GCC_VERSION"]
    if missing:
        raise ImageError(f"the toolchain record lacks {', '.join(missing)}", source,
                         "rebuild the image (python -m ci images <cell> --rebuild): docker/detect-toolchain.sh "
                         "writes it")
    return Toolchain(**values)


@functools.cache
def image_toolchain(tag: str) -> Toolchain:
    """The compiler paths ``tag`` recorded at build time (a throw-away container reads the file)."""
    result = proc.run([docker_cli(), "run", "--rm", "--entrypoint", "cat", tag, TOOLCHAIN_ENV],
                      capture=True, check=False)
    if result.returncode != 0:
        raise ImageError("the builder image has no toolchain record", f"{tag}:{TOOLCHAIN_ENV}",
                         "rebuild it with this farm's docker/Dockerfile (python -m ci images <cell> --rebuild)",
                         details=result.stderr.strip())
    return parse_toolchain(result.stdout, f"{tag}:{TOOLCHAIN_ENV}")


def debian_toolchain(major: int) -> Toolchain:
    """What detect-toolchain.sh records on the farm's Debian bases
    (tests/integration/test_manylinux_layout.py checks it):
    for rendering a cell's build without its image at hand (unit tests). Builds read the image."""
    return Toolchain(cc=f"/usr/bin/gcc-{major}", cxx=f"/usr/lib/ccache/g++-{major}", cxx_real=f"/usr/bin/g++-{major}")


def planned_toolchain(spec: ImageSpec) -> Toolchain:
    """The toolchain ``spec``'s image will record, known without building it only on the farm's Debian bases."""
    if not is_debian_base(spec.base_image):
        raise ImageError("the compiler paths of a non-Debian base are read from its built image", spec.tag,
                         "build the image first (python -m ci images <cell>) and read them with image_toolchain")
    return debian_toolchain(gcc_major(spec.cell))


# --- layer sizes ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Layer:
    size: int
    created_by: str


def layers(tag: str) -> list[Layer]:
    """``tag``'s layers, base first, with their sizes in bytes (``docker history``)."""
    result = proc.run([docker_cli(), "history", "--no-trunc", "--human=false", "--format", "{{json .}}", tag],
                      capture=True, what=f"docker history of {tag} failed")
    found = []
    for line in result.stdout.splitlines():
        if line.strip():
            entry = json.loads(line)
            found.append(Layer(size=int(entry.get("Size") or 0), created_by=str(entry.get("CreatedBy", ""))))
    return found[::-1]


#: BuildKit's history line of a RUN step: ``RUN |<n> ARG=value ... /bin/sh -c <the command>`` (values unquoted).
_RUN_LINE = re.compile(r"^RUN (?:\|\d+ .*?)?/bin/sh -c ", re.DOTALL)


def step_text(created_by: str, width: int = 100) -> str:
    """A layer's Dockerfile step, short: the build arguments BuildKit prefixes to RUN lines are left out."""
    text = _RUN_LINE.sub("RUN ", created_by).replace("# buildkit", "").strip()
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def size_text(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


def layers_path(tag: str) -> Path:
    """Where :func:`report_layers` keeps ``tag``'s sizes: the farm's cache, beside the toolkits and environments
    (``FARM_CACHE_DIR``), one JSON file per image tag."""
    return toolenv.cache_root() / "images" / (tag.replace("/", "_").replace(":", "_") + ".layers.json")


def report_layers(tag: str) -> Path:
    """Print ``tag``'s non-empty layers with their sizes and save them as JSON (for sizing a CI job's disk).
   """
    found = layers(tag)
    total = sum(layer.size for layer in found)
    table = Table(title=f"layers of {tag}")
    table.add_column("#", justify="right")
    table.add_column("size", justify="right")
    table.add_column("share", justify="right")
    table.add_column("step")
    for index, layer in enumerate(found):
        if layer.size:
            table.add_row(str(index), size_text(layer.size), f"{layer.size / max(total, 1):.0%}",
                          escape(step_text(layer.created_by) or "(base image)"))
    table.add_row("", size_text(total), "100%", "total")
    log.result(table)
    path = layers_path(tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"image": tag, "size": total,
                                "layers": [dataclasses.asdict(layer) for layer in found]}, indent=1) + "\n")
    log.info(f"layer sizes saved to {path}")
    return path
