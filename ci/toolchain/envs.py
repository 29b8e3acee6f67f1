"""Python environments the farm owns: one per (Python, torch build), with the project's own build requirements
layered over it, kept between builds.

A classic target needs its own Python and its own torch; building them into
nox's session venvs would reinstall gigabytes whenever the target changes. The
farm keeps one *torch environment* per (torch release, flavour: PyPI's CUDA build
or a CPU-only ``+cpu`` build, the index it comes from, Python) under the cache folder
(``FARM_CACHE_DIR``, default ``~/.cache/cuda-ext-farm/envs``): :class:`TorchBuild`
names it, so every caller that wants the same torch (a build, an import test, a
release check, an sdist) gets the same folder, however it would spell the
requirement. It is created under a lock, marked complete last (an interrupted
install is removed and redone, never reused) and reused afterwards; a project's
own build requirements go into a small venv layered over it (:func:`layered_env`).

An environment whose requirements pip resolves (torch, a project's build requirements; not the hash-pinned tools)
is also keyed by pip's index configuration (:func:`index_config`: ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``,
``PIP_FIND_LINKS``, ``PIP_NO_INDEX`` and the same options of pip's configuration files): another index can serve
another build of the same version. The key is a hash, and the marker records the configuration with its
credentials masked (``ci/log.py``), so a password in an index URL reaches no folder name, no file and no log.
What an environment holds is asked of its interpreter (:func:`torch_metadata`), not read from a layer's metadata:
a layered venv imports the first torch on its path.

The import test runs in a *test environment*: a new, empty venv that sees only
the build environment's installed packages (through a ``.pth`` file, so torch
is not installed twice) and the wheel under test; nothing of the build (no
source tree, no build folder, no in-place library) is on its path.
"""

from __future__ import annotations

import configparser
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ci import fsutil, proc, settings, toolenv
from ci.errors import CommandFailed, MissingRequirement, UsageError
from ci.log import log, mask_data
from ci.toolchain import free_threaded
from ci.universe import pins, shapes
from ci.universe.targets import Target

#: The tools every build environment has, hash-pinned in ci/requirements/build.txt (the project's own
#: [build-system] requires come on top).
BUILD_TOOLS_LOCK = "build"
#: The .pth file that layers an environment on another one's packages.
BASE_PTH = "_farm_base_env.pth"


@dataclasses.dataclass(frozen=True)
class PythonEnv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    @property
    def bin_dir(self) -> Path:
        return self.python.parent

    def site_packages(self) -> Path:
        out = proc.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       capture=True, log=False).stdout
        return Path(out.strip().splitlines()[-1])

    def version(self) -> str:
        out = proc.run([self.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                       capture=True, log=False).stdout
        return out.strip()

    def visible_sites(self) -> list[Path]:
        """Its own site-packages, then those of the environments it is layered on (``_farm_base_env.pth``),
        in order: a venv layered on this one must name them all (a .pth line adds a folder, not its .pth)."""
        own = self.site_packages()
        pth = own / BASE_PTH
        layered = [Path(line) for line in pth.read_text().split("\n") if line.strip()] if pth.is_file() else []
        return [own, *layered]


def find_interpreter(version: str, env: Mapping[str, str] | None = None) -> Path:
    """A working CPython ``version`` (``3.12``; ``3.13t``: a free-threaded one): ``FARM_PYTHON_3_12`` (a path), the
    running interpreter, ``python3.12`` on PATH, a pyenv installation, or ``py -3.12`` on Windows; a free-threaded
    one that none of these has is built once from Debian's source (ci/toolchain/free_threaded.py). Each candidate is
    run once: a pyenv shim of a version that is installed but not selected fails, and the next candidate is tried;
    a GIL build never stands for a free-threaded one, nor the other way round."""
    env = settings.current().environ if env is None else env
    variable = "FARM_PYTHON_" + version.replace(".", "_")
    explicit = env.get(variable, "").strip()
    if explicit:
        if not Path(explicit).is_file():
            raise UsageError(f"{variable} is not a file", explicit, f"point it at a CPython {version} or unset it")
        return Path(explicit)
    if free_threaded.running_label() == version:
        return Path(getattr(sys, "_base_executable", None) or sys.executable)
    minor = version.removesuffix("t")
    candidates: list[list[str]] = []
    if os.name == "nt":  # pragma: no cover - Windows launcher
        candidates.append(["py", f"-{version}"])
    candidates.append([f"python{version}"])
    pyenv = Path(env.get("PYENV_ROOT") or Path.home() / ".pyenv")
    pattern = f"versions/{minor}.*t" if version.endswith("t") else f"versions/{minor}.*"  # pyenv's 3.13.5t
    for folder in sorted(pyenv.glob(pattern), key=lambda p: shapes.version_key(p.name.rstrip("t")), reverse=True):
        candidates.append([str(folder / "bin" / f"python{version}")])
    for cmd in candidates:
        exe = shutil.which(cmd[0]) or (cmd[0] if Path(cmd[0]).is_file() else None)
        if exe is None:
            continue
        out = proc.run([exe, *cmd[1:], "-c", free_threaded.LABEL_PROBE], capture=True, check=False, log=False)
        lines = out.stdout.split()
        if out.returncode == 0 and lines[:1] == [version]:
            return Path(lines[1])
    if version.endswith("t") and sys.platform == "linux" and minor in free_threaded.SOURCES:
        return free_threaded.ensure(minor)
    raise MissingRequirement(
        "no CPython interpreter of this version on the machine", version,
        f"install it (pyenv install, python.org, apt), set {variable}=/path/to/python{version}, pick another "
        f"target with --python, or build in the target's container ({settings.entry('build-cuda')})",
    )


#: A torch build's flavour: ``cuda`` (the build PyPI serves of that release, a CUDA one on Linux x86_64 and
#: Windows: its major is the matrix's) or ``cpu`` (a ``+cpu`` build: PyTorch's CPU index, a local folder).
FLAVORS = ("cuda", "cpu")


@dataclasses.dataclass(frozen=True)
class TorchBuild:
    """The torch an environment holds: its release, flavour, and the index it comes from (None: pip's own)."""

    version: str
    flavor: str = "cuda"
    index_url: str | None = None
    #: ``index_url`` as an extra index beside pip's own (``--extra-index-url``), not instead of it.
    extra_index: bool = False

    @property
    def requirement(self) -> str:
        # The local CPU wheel torch==X+cpu also satisfies torch==X: the CUDA flavour excludes it explicitly.
        return f"torch=={self.version}+cpu" if self.flavor == "cpu" else shapes.torch_requirement(self.version)

    def pip_args(self) -> list[str]:
        option = "--extra-index-url" if self.extra_index else "--index-url"
        return [*([option, self.index_url] if self.index_url else []), self.requirement]

    @property
    def name(self) -> str:
        where = f"-{hashlib.sha256(self.index_url.encode()).hexdigest()[:6]}" if self.index_url else ""
        return f"torch{self.version}-{self.flavor}{where}"

    @classmethod
    def of(cls, requirement: str, index_url: str | None = None) -> TorchBuild:
        """The build a requirement the farm writes names: ``torch==2.13.0+cpu`` (cpu), ``torch==2.11.0,!=2.11.0+cpu``
        (cuda)."""
        match = re.fullmatch(r"torch==([0-9][0-9a-z.]*?)(\+cpu)?(?:,!=\1\+cpu)?", requirement.replace(" ", ""))
        if match is None:
            raise UsageError("not a torch requirement the farm writes", requirement,
                             "pass torch==X (the CUDA build) or torch==X+cpu")
        return cls(match.group(1), "cpu" if match.group(2) else "cuda", index_url)


def parse_index_versions(text: str) -> tuple[str, ...]:
    """The versions of ``pip index versions``'s ``Available versions: 2.11.0, 2.10.0+cpu, ...`` line."""
    found = re.search(r"^Available versions:(.*)$", text, re.M)
    return tuple(v.strip() for v in found.group(1).split(",") if v.strip()) if found else ()


def offered_torch(python: str, index_url: str | None) -> tuple[str, ...]:
    """The torch versions pip can install for CPython ``python`` on this machine, from ``index_url`` or from pip's own
    configuration (its indexes and find-links folders, what :func:`ensure_env`'s pip sees). ``pip index versions``
    reads the index pages only: nothing is downloaded."""
    # A free-threaded CPython (3.13t) is pip's --python-version 3.13 with the ABI cp313t.
    threaded = ["--implementation", "cp", "--abi", f"cp{python[:-1].replace('.', '')}t"] if python.endswith("t") else []
    cmd = [sys.executable, "-m", "pip", "index", "versions", "torch", "--python-version", python.removesuffix("t"),
           *threaded, "--only-binary=:all:", *(["--index-url", index_url] if index_url else [])]
    result = proc.run(cmd, env=pip_env(), capture=True, check=False)
    versions = parse_index_versions(result.stdout)
    if versions or "No matching distribution" in result.stdout + result.stderr:
        return versions
    log.details((result.stdout + result.stderr).rstrip()[-3000:])
    raise CommandFailed("pip could not list the torch versions of its indexes", index_url or "pip's indexes",
                        "its output is above; check the network or the index")


def env_key(python: str, requirements: Sequence[str], index: Mapping[str, str] | None = None) -> str:
    """The hash of an environment's folder name: its Python, requirements and (where pip resolves any) pip's index
    configuration; none (a machine without one) keeps the key it had before the index counted."""
    data: dict[str, object] = {"python": python, "requirements": sorted(requirements)}
    if index:
        data["index"] = dict(index)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


#: pip's options that decide where a requirement comes from.
INDEX_OPTIONS = ("index-url", "extra-index-url", "find-links", "no-index")


def _pip_config_files(environ: Mapping[str, str]) -> list[Path]:
    """The configuration files pip reads (its own locations, in its order), those that exist."""
    given = environ.get("PIP_CONFIG_FILE", "").strip()
    if given == os.devnull:
        return []  # pip loads none at all
    home = Path.home()
    if os.name == "nt":  # pragma: no cover - Windows hosts
        files = [Path(environ.get("ProgramData", "C:/ProgramData")) / "pip" / "pip.ini", home / "pip" / "pip.ini",
                 Path(environ.get("APPDATA", str(home))) / "pip" / "pip.ini"]
    else:
        dirs = [d for d in (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) if d]
        files = [*(Path(d) / "pip" / "pip.conf" for d in dirs), Path("/etc/pip.conf"), home / ".pip" / "pip.conf",
                 home / "Library" / "Application Support" / "pip" / "pip.conf",
                 Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"]
    files += [Path(given)] if given else []
    return [f for f in files if f.is_file()]


def index_config(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """pip's index configuration as the farm's installs see it: :data:`INDEX_OPTIONS` in its configuration files
    (``[global]``, ``[install]``) and its variables (``PIP_INDEX_URL``, ...), by where each was set."""
    environ = settings.current().environ if environ is None else environ
    found: dict[str, str] = {}
    for path in _pip_config_files(environ):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError):
            found[str(path)] = "unreadable"  # pip refuses it too; a fix changes the key
            continue
        for section in ("global", "install"):
            for option in INDEX_OPTIONS:
                if parser.has_option(section, option):
                    found[f"{path}:{section}.{option}"] = " ".join(parser.get(section, option).split())
    for option in INDEX_OPTIONS:
        variable = "PIP_" + option.upper().replace("-", "_")
        if environ.get(variable, "").strip():
            found[variable] = " ".join(environ[variable].split())
    return found


def pip_env() -> dict[str, str]:
    """pip settings for the farm's installs: no machine-wide constraints file re-pinning what the farm pinned."""
    return {"PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _made_once(root: Path, create: Callable[[PythonEnv], None], record: Mapping[str, object],
               reusing: str = "") -> PythonEnv:
    """The environment at ``root``, made by ``create`` once under a lock and marked complete last; a half-made
    one (killed, failed) is removed, never reused."""
    env = PythonEnv(root)
    with fsutil.locked(root.with_name(root.name + ".lock"), f"the Python environment {root.name}"):
        marker = root / ".farm-complete"
        if marker.is_file() and env.python.exists():
            log.reuse(f"the environment {root}{reusing}")
            return env
        shutil.rmtree(root, ignore_errors=True)
        try:
            create(env)
            fsutil.atomic_write_json(marker, mask_data(dict(record)))
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
    return env


def ensure_env(name: str, python: str, requirements: Sequence[str], locks: Sequence[str] = ()) -> PythonEnv:
    """Create (or reuse) the environment ``name`` for ``python`` holding ``requirements`` and the hash-pinned
    ``locks`` (ci/requirements/<lock>.txt)."""
    interpreter = find_interpreter(python)
    keyed = [*requirements, *(pins.lock_path(lock).read_text() for lock in locks)]
    index = index_config() if requirements else {}  # the hash-pinned tools are the same bytes from any index
    root = toolenv.cache_root() / "envs" / f"{name}-py{python}-{env_key(python, keyed, index)}"

    def create(env: PythonEnv) -> None:
        proc.run([interpreter, "-m", "venv", env.root], what="creating a virtual environment failed",
                 hint=f"check that {interpreter} has the venv module (Debian: apt-get install python3-venv)")
        for lock in locks:
            proc.run([env.python, "-m", "pip", "install", "--quiet", *pins.requirement_args(lock)],
                     env=pip_env(), what=f"installing the hash-pinned {lock} tools failed",
                     hint="a hash mismatch means a file changed on the index; otherwise check the network")
        if requirements:
            proc.run([env.python, "-m", "pip", "install", "--quiet", *requirements], env=pip_env(),
                     what="installing the build environment failed",
                     hint="pip's message is above; check the network, an index mirror or the requirement")

    return _made_once(root, create, {"python": python, "requirements": list(requirements), "index": index})


def build_python(target_python: str, abi3: bool) -> str:
    """The CPython that builds a target: its own, or for abi3 wheels the running one when it is new enough
    (an abi3 wheel does not depend on the interpreter that built it)."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if abi3 and not shapes.is_free_threaded(target_python) and \
            (sys.version_info.major, sys.version_info.minor) >= shapes.version_key(target_python):
        return running
    return target_python


def torch_env(python: str, torch: TorchBuild | None) -> PythonEnv:
    """The environment of ``torch`` (None: none) for CPython ``python`` with the hash-pinned build tools: one folder
    per (torch release, flavour, index, Python), whoever asks."""
    if torch is None:
        return ensure_env("notorch", python, [], locks=(BUILD_TOOLS_LOCK,))
    return ensure_env(torch.name, python, torch.pip_args(), locks=(BUILD_TOOLS_LOCK,))


def build_env(python: str, torch: TorchBuild | None, extra: Sequence[str] = ()) -> PythonEnv:
    """The build environment of a target: its torch's environment (:func:`torch_env`) with the project's own build
    requirements layered over it (those the farm's lock already holds are not installed twice)."""
    locked = set(pins.pinned_in(pins.lock_path(BUILD_TOOLS_LOCK)))
    base = torch_env(python, torch)
    own = [r for r in dict.fromkeys(extra) if requirement_name(r) not in locked and requirement_name(r) != "torch"]
    return layered_env(base, base.root.name.rsplit("-py", 1)[0] + "-project", python, own) if own else base


def layered_env(base: PythonEnv, name: str, python: str, requirements: Sequence[str]) -> PythonEnv:
    """A small venv holding ``requirements`` over ``base``'s packages (a .pth file), so a project's own build
    requirements (scikit-build-core, setuptools-scm, ...) cost their own size, not a second torch of several GB.
    ``base``'s command-line tools (ninja, which torch's extension builder runs from PATH) are linked in."""
    index = index_config()
    key = env_key(python, [base.root.name, *requirements], index)
    root = toolenv.cache_root() / "envs" / f"{name}-py{python}-{key}"

    def create(env: PythonEnv) -> None:
        proc.run([base.python, "-m", "venv", "--without-pip", env.root], what="creating a virtual environment failed")
        (env.site_packages() / BASE_PTH).write_text("".join(f"{p}\n" for p in base.visible_sites()))
        # The base's pip, seen through the .pth, installs into this venv; torch is already satisfied.
        proc.run([env.python, "-m", "pip", "install", "--quiet", *requirements], env=pip_env(),
                 what="installing the project's build requirements failed",
                 hint="pip's message is above; check the network, an index mirror or the requirement")
        for tool in sorted(base.bin_dir.iterdir()) if os.name != "nt" else ():  # Windows: no symlinks
            if not (env.bin_dir / tool.name).exists() and not tool.name.startswith(("python", "activate", "pip")):
                (env.bin_dir / tool.name).symlink_to(tool)

    return _made_once(root, create, {"python": python, "base": str(base.root), "requirements": list(requirements),
                                     "index": index}, reusing=f" (over {base.root.name})")


def requirement_name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]).lower()


#: Where the environment's interpreter finds torch (without importing it), and when those files last changed.
_LOCATE_TORCH = """import importlib.util, json, os
spec = importlib.util.find_spec("torch")
folder = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
files = [os.path.join(folder, n) for n in ("__init__.py", "version.py")] if folder else []
print(json.dumps(folder and [folder, *[os.stat(f).st_mtime_ns for f in files if os.path.exists(f)]]))
"""
#: What that torch says of itself, imported.
_ASK_TORCH = """import json, torch
abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda,
                  "cxx11_abi": None if abi is None else str(int(bool(abi)))}))
"""


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


def _sites_stamp(env: PythonEnv) -> list[object]:
    """What decides where ``env``'s interpreter finds a package, cheaply: its site folders (its own, those its
    ``_farm_base_env.pth`` layers on) with their times (an install or removal changes a folder's entries), and
    PYTHONPATH."""
    own = [*sorted(env.root.glob("lib*/python*/site-packages")), env.root / "Lib" / "site-packages"]
    layered = [Path(line) for site in own if (site / BASE_PTH).is_file()
               for line in (site / BASE_PTH).read_text().split("\n") if line.strip()]
    return [str(env.python), settings.current().environ.get("PYTHONPATH", ""),
            *[(str(site), site.stat().st_mtime_ns) for site in [*own, *layered] if site.is_dir()]]


def _locate_torch(env: PythonEnv) -> list[object]:
    """Where ``env``'s interpreter finds torch, and its files' times (:data:`_LOCATE_TORCH`)."""
    located = proc.run([env.python, "-c", _LOCATE_TORCH], capture=True, check=False, log=False)
    lines = located.stdout.strip().splitlines()
    where: list[object] | None = json.loads(lines[-1]) if located.returncode == 0 and lines else None
    if not where:
        raise MissingRequirement("torch is not installed in the build environment", env.root,
                                 "remove that folder; the next build makes it again")
    return where


def torch_metadata(env: PythonEnv) -> dict[str, str | None]:
    """The torch ``env``'s interpreter imports: its version, CUDA version and C++ ABI (``cxx11_abi``: "1", "0").
    The interpreter finds it (a layered venv's own torch before its base's) and answers; importing torch takes
    seconds, so the answers are kept in the cache folder: where torch is, while ``env``'s site folders are
    unchanged (:func:`_sites_stamp`), and what it said, while its files are."""
    probes = toolenv.cache_root() / "torch-probes"
    located = probes / f"sites-{_digest(_sites_stamp(env))}.json"
    if located.is_file():
        where: list[object] = json.loads(located.read_text())
    else:
        where = _locate_torch(env)
        fsutil.atomic_write_json(located, where)
    kept = probes / f"{_digest(where)}.json"
    if kept.is_file():
        found: dict[str, str | None] = json.loads(kept.read_text())
        return found
    asked = proc.run([env.python, "-c", _ASK_TORCH], capture=True, check=False, log=False)
    if asked.returncode != 0:
        log.details(asked.stderr.rstrip()[-3000:])
        raise MissingRequirement("the build environment's torch does not import", where[0],
                                 "its error is above; remove the environment's folder, the next build makes it again")
    found = json.loads(asked.stdout.strip().splitlines()[-1])
    fsutil.atomic_write_json(kept, found)
    return found


def cpu_build_torch(version: str, python: str) -> TorchBuild:
    """The torch a CPU-only build of ``version`` uses: its ``+cpu`` build where pip can get one (a local folder,
    PyTorch's CPU index in pip's configuration; the environment is a fifth of the CUDA one's size), else PyPI's
    (CUDA) build, the environment the CUDA builds of that release share."""
    cpu = TorchBuild(version, "cpu")
    made = toolenv.cache_root() / "envs"
    if any(made.glob(f"{cpu.name}-py{python}-*/.farm-complete")) or f"{version}+cpu" in _offered(python):
        return cpu
    return TorchBuild(version)


@functools.cache
def _offered(python: str) -> tuple[str, ...]:
    return offered_torch(python, None)


def target_env(target: Target) -> PythonEnv:
    """The build environment of ``target``: the CUDA build of its torch, or for a CPU-only build
    :func:`cpu_build_torch`'s."""
    python = build_python(target.python, target.abi3)
    torch = cpu_build_torch(target.torch, python) if target.cpu else TorchBuild(target.torch)
    return build_env(python, torch, target.project.build_requires)


def test_env(base: PythonEnv, folder: Path) -> PythonEnv:
    """A new venv in ``folder`` that sees ``base``'s packages (torch) and nothing else of the build."""
    env = PythonEnv(folder)
    # No pip or setuptools of its own: Python 3.11's venv brings setuptools 65, which would shadow the one torch
    # requires (torch 2.13 needs setuptools >= 77.0.3, and `pip check` says so). `python -m pip` runs the base
    # environment's pip, seen through the .pth, and installs into this venv.
    proc.run([base.python, "-m", "venv", "--without-pip", folder], what="creating the test environment failed")
    site = env.site_packages()
    (site / BASE_PTH).write_text("".join(f"{p}\n" for p in base.visible_sites()))
    return env
