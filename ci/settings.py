"""Every user-facing setting of the farm, declared once, and the one resolver.

A :class:`Setting` names its environment variable, its flag (if a command has one), its ``[tool.cuda-ext-farm]`` key
(where the project table has one), its default and one line of help. :func:`resolve` turns the command line's
flags and the environment into a frozen :class:`Settings` (each value with where it came from: flag, env, project
or default) once, at the entry (``ci/cli.py``); commands receive it in their options. ``docs/settings.md`` is
generated from :data:`DECLARED` (:func:`markdown`; ``tests/unit/test_settings.py`` compares it, and rewrites
it with ``FARM_WRITE_DOCS=1``).

Modules below the entry that cannot be handed the object (the build tail's folder cascade, the toolkit's and the
image engine's lookups) ask :func:`current`: the settings the entry installed, else the process environment read
now. That accessor is chosen over threading the object through every call: the values are process-wide by nature
(they are environment variables), and the build code is shared with the Windows half and the tests, which call it
without an entry.

Internal variables (``kind="internal"``) are the ones the farm sets for its own children (the nox status file, the
launcher's program name, a GPU lane's name): declared so that every ``FARM_*`` name the code reads has a line in the
reference, marked as not for users.

Secrets: a setting declared ``secret`` (a token) is shown as ``***`` by :meth:`Settings.lines` (``--show-settings``),
and a URL's password as ``***`` in any value; the logger masks every other secret it is handed (``ci/log.py``).

Standard library only (``ci/cli.py``, and so ``noxfile.py``, imports it).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit


@dataclasses.dataclass(frozen=True)
class Setting:
    env: str
    help: str
    default: str = "none"
    #: the flag that overrides the variable, and the commands that have it (empty: every command with the flag)
    flag: str | None = None
    commands: tuple[str, ...] = ()
    #: the ``[tool.cuda-ext-farm]`` key that sets it for a project
    key: str | None = None
    #: "setting" (for users), "workflow" (set by the generated workflows), "internal" (set by the farm itself)
    kind: str = "setting"
    #: a family of variables: the name is a prefix (``FARM_PYTHON_3_12``)
    prefix: bool = False
    group: str = "general"
    #: its value is a secret (a token): never shown
    secret: bool = False
    #: the only values it takes (any case): another is refused when the settings are resolved, before anything runs
    choices: tuple[str, ...] = ()

    @property
    def dest(self) -> str | None:
        """The argparse destination of the flag."""
        return self.flag.lstrip("-").replace("-", "_") if self.flag else None


S = Setting
DECLARED: tuple[Setting, ...] = (
    # --- where things are --------------------------------------------------------------------------------------
    S("FARM_PROJECT", "the extension project's folder", "the current folder", flag="--project", group="folders"),
    S("FARM_WHEELHOUSE", "where finished wheels go (<target-id>/ folders)", "<project>/wheelhouse",
      flag="--wheelhouse", group="folders"),
    S("FARM_BUILD_DIR", "build and staging folders", "<cache>/build/<project>", flag="--build-dir", group="folders"),
    S("FARM_CACHE_DIR", "toolkits, environments, sysroots and tools", "$XDG_CACHE_HOME/cuda-ext-farm or "
      "~/.cache/cuda-ext-farm", group="folders"),
    S("FARM_TEST_RESULTS", "the GPU lanes' results folder", "<project>/test-results", flag="--out",
      commands=("test-gpu",), group="folders"),
    S("FARM_BENCH_RESULTS", "bench-builds' results folder", "<project>/bench-results", flag="--out",
      commands=("bench-builds",), group="folders"),
    S("FARM_RELEASE_DIR", "the release folder of release dry-run and assemble", "<build>/release", flag="--out",
      commands=("release",), group="folders"),
    S("FARM_SDIST_WHEEL_DIR", "where release wheel-from-sdist writes its wheel", "./sdist-wheel", group="folders"),
    S("FARM_NOX_ENVDIR", "the nox sessions' virtual environments", "<farm>/.nox, else <cache>/nox",
      group="folders"),
    # --- what is built -----------------------------------------------------------------------------------------
    S("TORCH_CUDA_ARCH_LIST", "the CUDA architectures of every target (torch's syntax, '9.0;10.0+PTX')",
      "the target torch's own (plus extra-cuda-archs)", flag="--arch-list", key="cuda-archs", group="build"),
    S("MAX_JOBS", "parallel compile jobs of the commands that compile", "the number of CPUs", flag="--max-jobs",
      group="build"),
    S("FARM_DEADLINE", "when the build stops starting compiles: a duration from now (5h30m, 90m, 3600s) or a time "
      "(23:30, 2026-01-31T23:30); the compiles running finish into the compile cache, the build exits 75 and the "
      "same command resumes", "none", flag="--deadline", commands=("build", "build-cuda"), group="build"),
    S("FARM_COMPILE_ADMISSION", "`off`: CUDA compiles start as ninja starts them (MAX_JOBS the CPUs, nvcc's own "
      "--threads), measured and recorded but not held back until their recorded memory fits", "on", group="build",
      choices=("on", "off")),
    S("SOURCE_DATE_EPOCH", "the time stamp of the wheel's entries (reproducible builds); builds set it from the "
      "commit", "1980-01-01 (the zip epoch)",
      group="build"),
    S("FARM_VARIANT_WHEELS", "1: release dry-run and assemble also write PEP 825 variant wheels into "
      "<release>/variants/ (experimental, docs/variants.md); 0: not even when the project asks", "off",
      flag="--variant-wheels", commands=("release",), key="variant-wheels", group="build"),
    S("FARM_SYSROOT", "`none`: link against the build machine's glibc instead of the bullseye sysroot", "the sysroot",
      group="build"),
    S("FARM_GLIBC_FLOOR", "the newest glibc the audit lets a wheel need (2.28)", "the route's floor", group="build"),
    S("FARM_COMPILE_CACHE", "the compile cache every route runs g++ and nvcc through: `ccache`, `sccache` or `off` "
      "(docs/compile-cache.md)", "the route's: ccache in containers and develop, none on host, cross and Windows "
      "builds", group="build"),
    S("FARM_CCACHE", "`off`: build without a compiler cache", "on when ccache or sccache is found", group="build"),
    S("FARM_CCACHE_REMOTE", "the compile cache's shared storage: redis://host:port, http://host:port/path (WebDAV), "
      "file:///path (ccache) or gha (sccache on GitHub Actions)", group="build"),
    S("FARM_SCCACHE_SCHEDULER", "an sccache-dist scheduler (http(s)://host:port): compiles go to its build servers "
      "(implies sccache)", group="build"),
    S("FARM_SCCACHE_TOKEN", "the scheduler's client token (its [client_auth] of type token); a secret", group="build",
      secret=True),
    S("FARM_CUDA_HOME", "a CUDA toolkit installed by other means (inside a builder image)", "the farm's own",
      group="build"),
    S("FARM_AARCH64_CXX", "the aarch64 cross C++ compiler", "Debian's aarch64-linux-gnu-g++ on PATH", group="build"),
    S("FARM_PYTHON_", "FARM_PYTHON_3_12 and the like (FARM_PYTHON_3_13t: a free-threaded one): the interpreter of that "
      "CPython version",
      "the running one, else python3.X on PATH (3.13t: built once from Debian's source)", prefix=True, group="build"),
    # --- containers --------------------------------------------------------------------------------------------
    S("FARM_BASE_IMAGE", "the base of every cell's builder image", "the cell's own", flag="--base-image",
      group="containers"),
    S("FARM_BASE_IMAGE_", "FARM_BASE_IMAGE_CU124 and the like: the base of one cell's image", "FARM_BASE_IMAGE",
      prefix=True, group="containers"),
    S("FARM_DOCKER", "the docker (or podman) client", "the first suitable docker on PATH", group="containers"),
    S("FARM_DEBIAN_MIRROR", "the Debian mirror of sysroots and bootstrapped bases", "the one /etc/apt uses",
      flag="--mirror", commands=("base-image",), group="containers"),
    S("FARM_CA_BUNDLE", "a CA bundle handed to image builds", "SSL_CERT_FILE, else none", group="containers"),
    S("FARM_VOLUME_NAMESPACE", "a separate set of cache volumes (cold-build timings)", group="containers"),
    S("FARM_CONTAINER_MEMORY", "docker's --memory (and --memory-swap) of the build container, e.g. 6g; MAX_JOBS and "
      "nvcc's --threads are chosen against it", "none (the host's memory)", group="containers"),
    S("FARM_REGISTRY", "the image registry of images pull/push/changed", "ghcr.io/<GITHUB_REPOSITORY>",
      flag="--registry", group="containers"),
    # --- Windows -----------------------------------------------------------------------------------------------
    S("FARM_MSVC_TOOLSET", "the MSVC toolset to activate (14.44)", "the cell's", flag="--toolset", group="windows"),
    S("FARM_VSWHERE", "a vswhere.exe other than the Visual Studio Installer's", group="windows"),
    S("FARM_TORCH_INDEX_URL", "the index torch is installed from on Windows", "PyTorch's index", group="windows"),
    # --- diagnostics -------------------------------------------------------------------------------------------
    S("FARM_DEBUG", "1: show Python tracebacks (and print the resolved settings)", "off", flag="--traceback",
      group="diagnostics"),
    # --- the generated workflows' inputs -----------------------------------------------------------------------
    S("FARM_DISPATCH_TARGETS", "release dispatch-plan: target ids (dispatch.yml's input)", kind="workflow",
      group="workflows"),
    S("FARM_DISPATCH_TORCH", "release dispatch-plan: a torch filter", kind="workflow", group="workflows"),
    S("FARM_DISPATCH_CUDA", "release dispatch-plan: a CUDA filter", kind="workflow", group="workflows"),
    S("FARM_DISPATCH_PYTHON", "release dispatch-plan: a Python filter", kind="workflow", group="workflows"),
    S("FARM_DISPATCH_OS", "release dispatch-plan: all, linux or windows", "all", kind="workflow", group="workflows"),
    S("FARM_DISPATCH_PUBLISH", "release dispatch-plan: true to publish (on a v* tag only)", "false",
      kind="workflow", group="workflows"),
    S("FARM_DISPATCH_SELECTED", "release dispatch-assemble: the plan's JSON list of ids", kind="workflow",
      group="workflows"),
    # --- set by the farm for its own children ------------------------------------------------------------------
    S("FARM_STATUS_FILE", "nox: where `python -m ci` writes its exit code", kind="internal", group="internal"),
    S("FARM_PROG", "the launcher's program name, used in messages", "python -m ci", kind="internal",
      group="internal"),
    S("FARM_CALLER_PYTHONPATH", "the caller's own PYTHONPATH, for the commands jit and doctor run", kind="internal",
      group="internal"),
    S("FARM_CALLER_PATH", "the PATH the user had when running the installed command: doctor finds the user's python "
      "there, not the farm's tool environment", kind="internal", group="internal"),
    S("FARM_LANE", "the GPU lane a test command runs in", kind="internal", group="internal"),
    S("FARM_QUICK", "1: a GPU lane's quick mode", kind="internal", group="internal"),
    S("FARM_TEST_WHEEL", "the farm's test suite: the built release wheel", kind="internal", group="internal"),
    S("FARM_NVCC", "the nvcc the module-anchor wrapper runs", kind="internal", group="internal"),
    S("FARM_NVCC_NEXT", "the command ci/nvcc/wrapper.py runs (nvcc, a compile cache in front of it, the anchor)",
      kind="internal", group="internal"),
    S("FARM_NVCC_THREADS", "nvcc's --threads the farm chose for a build short of memory (ci/nvcc/admission/)",
      kind="internal", group="internal"),
    S("FARM_COMPILE_RECORD", "the JSON-lines file ci/nvcc/admission/ records each compile in (work folder)",
      kind="internal", group="internal"),
    S("FARM_COMPILE_EXPECTED", "earlier builds' compile records ci/nvcc/admission/ expects needs from",
      kind="internal", group="internal"),
    S("FARM_COMPILE_ROOT", "the source copy ci/nvcc/admission/ names sources relative to", kind="internal",
      group="internal"),
    S("FARM_INSIDE_NVCC", "1 in nvcc's environment: the host compiler's front (ci/nvcc/host_front.py) is the compiler "
      "itself there (nvcc's compile is admitted and measured as a whole)", kind="internal", group="internal"),
    S("FARM_NVCC_ARCH_LIST", "the architecture list ci/nvcc/wrapper.py holds each compile to", kind="internal",
      group="internal"),
    S("FARM_NVCC_ARCH_MODE", "project-arch-flags as ci/nvcc/wrapper.py applies it (refuse, replace, keep)",
      kind="internal", group="internal"),
    S("FARM_TARGET_ARCH", "a cross build's target CPU", kind="internal", group="internal"),
    S("FARM_CC", "a builder image's C compiler (recorded in the image)", kind="internal", group="internal"),
    S("FARM_CXX", "a builder image's C++ compiler", kind="internal", group="internal"),
    S("FARM_CXX_REAL", "the compiler behind a builder image's C++ wrapper", kind="internal", group="internal"),
    S("FARM_GCC_VERSION", "a builder image's gcc version", kind="internal", group="internal"),
    S("FARM_VCVARS", "FARM_VCVARSALL, _ENV, _LOG, _EXIT: the vcvarsall.bat run's files (Windows)", prefix=True,
      kind="internal", group="internal"),
)
del S

BY_NAME: dict[str, Setting] = {s.env: s for s in DECLARED}


def declared(name: str) -> Setting | None:
    """The declaration of the variable ``name`` (a family's prefix included)."""
    if name in BY_NAME:
        return BY_NAME[name]
    return next((s for s in DECLARED if s.prefix and name.startswith(s.env)), None)


#: docker's memory units (``--memory 6g``): none and b are bytes.
MEMORY_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def memory_amount(given: str) -> int | None:
    """The bytes of an amount of memory in docker's form (``6g``, ``6144m``, ``1.5G``, ``512mb``), or None when
    ``given`` is not one: here, for the entry's check of FARM_CONTAINER_MEMORY (ci/cli.py, which runs in the
    launcher's and nox's Python, standard library and packaging only) and the container route's ``--memory``
    (ci/linux/container_compiles.py) alike."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([bkmgt]?)b?", given.strip().lower())
    return int(float(match.group(1)) * MEMORY_UNITS[match.group(2)]) if match else None


@dataclasses.dataclass(frozen=True)
class Resolved:
    value: str | None
    #: "flag", "env", "project" or "default"
    source: str


@dataclasses.dataclass(frozen=True)
class Settings:
    """The resolved settings: every declared variable that is not a family, with its value and source."""

    values: Mapping[str, Resolved]
    #: the process environment the settings were read from (the families' members are looked up here)
    environ: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)

    def get(self, name: str) -> str | None:
        found = self.values.get(name)
        if found is not None:
            return found.value
        if declared(name) is None:
            raise KeyError(f"{name} is not declared in ci/settings.py")
        return self.environ.get(name, "").strip() or None

    def source(self, name: str) -> str:
        found = self.values.get(name)
        return found.source if found is not None else ("env" if self.get(name) else "default")

    def given(self, name: str) -> str | None:
        """The value when the user gave it (flag, environment, project), else None."""
        return self.get(name) if self.source(name) != "default" else None

    def lines(self) -> list[str]:
        """One line per user-facing setting: ``NAME = value (source)``, cibuildwheel's preamble."""
        out = []
        for setting in DECLARED:
            if setting.kind != "setting" or setting.prefix:
                continue
            found = self.values[setting.env]
            shown = found.value if found.value is not None else setting.default
            if found.value is not None:
                shown = "***" if setting.secret else _without_password(found.value)
            out.append(f"{setting.env:22} = {shown} ({found.source})")
        return out


def _without_password(value: str) -> str:
    """``value`` with a URL's password (or a token given as its user name) shown as ``***``."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if "@" not in parts.netloc or not parts.scheme:
        return value
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, colon, _ = userinfo.partition(":")
    return value.replace(f"{parts.netloc}", f"{user}:***@{host}" if colon else f"***@{host}", 1)


def resolve(environ: Mapping[str, str], flags: Mapping[str, object] | None = None,
            project: Mapping[str, str] | None = None) -> Settings:
    """Flag, else environment variable, else project key, else default (None), for every declared variable.

    ``flags`` maps a variable's name to the value its flag was given (None or absent: not given)."""
    flags = flags or {}
    project = project or {}
    values: dict[str, Resolved] = {}
    for setting in DECLARED:
        if setting.prefix:
            continue
        flag = flags.get(setting.env)
        env = environ.get(setting.env, "").strip()
        if flag is not None and flag is not False:
            values[setting.env] = Resolved(str(flag) if flag is not True else "1", "flag")
        elif env:
            values[setting.env] = Resolved(env, "env")
        elif setting.key and project.get(setting.key):
            values[setting.env] = Resolved(project[setting.key], "project")
        else:
            values[setting.env] = Resolved(None, "default")
    return Settings(values, dict(environ))



_installed: Settings | None = None


def install(resolved: Settings | None) -> None:
    """At the entry: the settings every module below reads through :func:`current` (None when the command is done:
    a caller that runs the entry in its own process, a test, reads its environment again)."""
    global _installed
    _installed = resolved


def current() -> Settings:
    """The settings the entry resolved; without an entry (a library call, a test), the environment read now."""
    return _installed if _installed is not None else resolve(os.environ)


def value(name: str) -> str | None:
    """The resolved value of the declared variable ``name``."""
    return current().get(name)


def entry(command: str, args: str = "") -> str:
    """How the user runs ``command`` (with ``args``) the way they ran the farm: ``cuda-ext-farm build --cpu`` from the
    installed command, ``nox -s build -- --cpu`` in the farm's checkout, else ``python -m ci build --cpu``; hints
    name this, never a file of the farm."""
    resolved = current()
    if resolved.get("FARM_STATUS_FILE"):  # run by a nox session of the farm's noxfile
        return f"nox -s {command}" + (f" -- {args}" if args else "")
    prog = resolved.get("FARM_PROG") or "python -m ci"
    return f"{prog} {command}" + (f" {args}" if args else "")


def path_option(given: str | None, variable: str, default: Path) -> Path:
    """The one cascade for folders: option, else environment variable, else default."""
    chosen = given or value(variable)
    return Path(chosen).expanduser().resolve() if chosen else default


# --- the reference -------------------------------------------------------------------------------------------

GROUPS = {"folders": "Folders", "build": "What is built", "containers": "Containers and images",
          "windows": "Windows", "diagnostics": "Diagnostics", "workflows": "Set by the generated workflows",
          "internal": "Set by the farm for its own processes (not for users)"}


def _row(setting: Setting) -> str:
    name = f"`{setting.env}*`" if setting.prefix else f"`{setting.env}`"
    flag = f"`{setting.flag}`" + (f" ({', '.join(setting.commands)})" if setting.commands else "") \
        if setting.flag else ""
    key = f"`{setting.key}`" if setting.key else ""
    default = f"`{setting.default}`" if any(c in setting.default for c in "<$/") else setting.default
    return f"| {name} | {flag} | {key} | {default} | {setting.help} |"


def markdown(declared: Iterable[Setting] = DECLARED) -> str:
    """``docs/settings.md``: every declared variable, by group."""
    settings = list(declared)
    lines = ["# Settings", "",
             "<!-- generated from ci/settings.py by tests/unit/test_settings.py "
             "(FARM_WRITE_DOCS=1 pytest tests/unit/test_settings.py rewrites it); do not edit -->", "",
             "Every setting is resolved once, when a command starts: its flag, else its environment variable, else "
             "the project's `[tool.cuda-ext-farm]` key where there is one, else the default. "
             "`cuda-ext-farm <command> --show-settings` prints what was resolved and where each value came from, "
             "and exits (`FARM_DEBUG=1` prints it and runs the command). The project keys that have no variable "
             "(`torch`, `build-env`, `strip-debug`, `compress-fatbin`, `test-requires`, `test-extras`, ...) are listed "
             "in [options.md](options.md).", ""]
    for group, title in GROUPS.items():
        members = [s for s in settings if s.group == group]
        if not members:
            continue
        lines += [f"## {title}", "", "| variable | flag | project key | default | meaning |",
                  "| --- | --- | --- | --- | --- |", *map(_row, members), ""]
    return "\n".join(lines)
