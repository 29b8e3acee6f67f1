"""A project describes itself to the farm in its own ``pyproject.toml``.

The table is ``[tool.cuda-ext-farm]``; every key is optional when the project has
a ``[project] name``. A project you cannot edit is described by a separate file
(``--config FILE``) holding the same table (or its keys at the top level).

    [tool.cuda-ext-farm]
    version = 1                     # the schema of this table (a newer farm may read a newer one)
    name = "myext"                  # the distribution; default: [project] name
    import-name = "myext"           # the module the default smoke command imports; default: the name with _
    abi = "classic"                 # "classic" (bound to one torch release) | "stable" (LibTorch stable ABI)
    python-abi = "per-python"       # "per-python" | "abi3" (py_limited_api wheels); stable, or py_limited_api in
                                    # the project's setup.py/setup.cfg/bdist_wheel options, implies abi3
    torch = ["2.11", "2.13"]        # releases to cover, or a specifier (">=2.11"); default: newest per CUDA major
    python = ["3.11", "3.12"]       # or a specifier; default: every CPython the torch release has wheels for
    cuda = ["13"]                   # toolkit cells (version, name or major); default: see README
    cuda-archs = "8.0;9.0+PTX"      # TORCH_CUDA_ARCH_LIST for every target; default: the target torch's own list
    extra-cuda-archs = "8.9"        # architectures added to the default
    project-arch-flags = "refuse"   # -gencode/-arch flags of the project's own (setup.py): "refuse" | "replace"
                                    # (the farm's list in their place) | "keep" (the project's list is built)
    archs = ["x86_64", "aarch64"]   # Linux CPU architectures (aarch64: CUDA 13 cells, torch >= 2.11)
    build-env = { FORCE_CUDA = "1" }    # what tells the build to compile CUDA without a GPU (added to FORCE_CUDA=1)
    cuda-available-in-build = true  # a CUDA build sees torch.cuda.is_available() True (ci/builds/cuda_available.py)
    cxx-standard-check = true       # refuse a -std=c++17 (or older) pin torch's headers cannot take (README)
    cpu-env = {}                    # what a CPU-only build (--cpu) sets instead
    debug-env = {}                  # what a debug build (develop --debug) adds
    cuda-libraries = ["*"]          # libraries in the wheel that must hold CUDA code (globs)
    cpu-libraries = []              # libraries that must load under a CPU-only torch (globs)
    toolkit-libraries = ["cublas"]  # CUDA libraries the extension links: their PyPI wheels join the build's toolkit
    max-wheel-size = "100 MiB"      # the audit fails a larger wheel (PyPI's default file limit); bytes or "95 MiB"
    strip-debug = true              # libraries lose their DWARF (kept beside the wheel in debug/<build-id>.debug)
    compress-fatbin = true          # CUDA 13 cells compile with nvcc --compress-mode=size (Zstandard fatbins)
    variant-wheels = false          # release also writes PEP 825 variant wheels (experimental; docs/variants.md)
    pypi-cuda-majors = false        # one PyPI wheel with the CUDA libraries of every major PyPI's torch uses
    older-majors-sass = "per-generation"  # there, older majors' SASS: one per GPU generation | "torch" (torch's list)
    test-requires = ["pytest"]      # what the tests need besides the wheel (PEP 508 strings, as cibuildwheel's)
    test-extras = ["test"]          # extras of the project's own wheel installed with it for the tests
    os = ["linux", "windows"]       # the platforms built: os = ["linux"] opts out of Windows wheels

    [tool.cuda-ext-farm.commands]
    smoke = "python -c 'import myext'"   # import test, run in a clean environment with the wheel
    test = "pytest tests -m 'not cuda'"  # CPU tests
    gpu-test = "pytest tests"            # the GPU lane
    sanitizer = "python tests/smoke.py"  # workload run under compute-sanitizer
    multi-gpu = "pytest tests -m multigpu"
    bench = "python bench.py --out {out}"

Everything is validated here, once; an unknown key or a bad value stops with a
message naming the key. Only the standard library (and ``packaging``, which nox
itself needs) is used, so ``noxfile.py`` resolves a project before any virtual
environment exists.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from ci.universe import build_files, tomlvalues
from ci.universe.tomlvalues import TABLE, ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - nox brings tomli on 3.10
    import tomli as tomllib

SCHEMA_VERSION = 1
FARM_ROOT = Path(__file__).resolve().parents[2]

Abi = Literal["classic", "stable"]
PythonAbi = Literal["per-python", "abi3"]

COMMAND_NAMES = ("smoke", "test", "gpu-test", "sanitizer", "multi-gpu", "bench")
DEFAULT_BUILD_ENV: Mapping[str, str] = {"FORCE_CUDA": "1"}
#: Placeholders a build-env value or a command may use.
BUILD_PLACEHOLDERS = ("cuda", "cuda_major", "nvcc_version", "torch", "arch_list", "python", "git_commit")
COMMAND_PLACEHOLDERS = ("out", "wheel", "python", "project")


@dataclasses.dataclass(frozen=True)
class Commands:
    """Commands the farm runs for the project (argument lists; ``None``: not configured)."""

    smoke: tuple[str, ...]
    test: tuple[str, ...] | None = None
    gpu_test: tuple[str, ...] | None = None
    sanitizer: tuple[str, ...] | None = None
    multi_gpu: tuple[str, ...] | None = None
    bench: tuple[str, ...] | None = None

    def get(self, name: str) -> tuple[str, ...] | None:
        value: tuple[str, ...] | None = getattr(self, name.replace("-", "_"))
        return value


#: Linux CPU architectures a project is built for unless its table says ``archs = ["x86_64"]``.
LINUX_ARCHS = ("x86_64", "aarch64")
#: The platforms a project is built for unless its table says ``os = ["linux"]`` (Linux always: every command runs
#: there).
OSES = ("linux", "windows")
#: ``max-wheel-size`` by default: PyPI's default limit on one file.
DEFAULT_MAX_WHEEL_SIZE = 100 * 2**20


@dataclasses.dataclass(frozen=True)
class ProjectConfig:
    """A project as the farm sees it: read once, validated, frozen."""

    root: Path
    #: Where the configuration came from (``pyproject.toml`` or ``--config FILE``).
    source: Path
    name: str
    import_name: str
    abi: Abi
    python_abi: PythonAbi
    #: Torch releases asked for: explicit minors, or a specifier, or () for the default.
    torch: tuple[str, ...]
    torch_spec: SpecifierSet | None
    python: tuple[str, ...]
    python_spec: SpecifierSet | None
    requires_python: SpecifierSet | None
    cuda: tuple[str, ...]
    cuda_archs: str | None
    extra_cuda_archs: str | None
    build_env: Mapping[str, str]
    cpu_env: Mapping[str, str]
    debug_env: Mapping[str, str]
    cuda_libraries: tuple[str, ...]
    cpu_libraries: tuple[str, ...]
    #: CUDA toolkit libraries the extension links (``cublas``): their pinned PyPI wheels join the build's toolkit.
    toolkit_libraries: tuple[str, ...]
    commands: Commands
    #: ``[build-system] requires`` without torch (the farm installs the target's torch itself).
    build_requires: tuple[str, ...]
    #: Linux architectures (``archs``): aarch64 wheels come from the cells and torch releases that have them.
    archs: tuple[str, ...] = LINUX_ARCHS
    #: ``os``: the platforms with targets (``("linux",)``: no Windows wheels, jobs or coverage rows).
    oses: tuple[str, ...] = OSES
    #: ``max-wheel-size`` in bytes: the audit's ``wheel-size`` check fails a larger wheel.
    max_wheel_size: int = DEFAULT_MAX_WHEEL_SIZE
    #: ``strip-debug``: the build splits the libraries' debug sections off into ``debug/<build-id>.debug`` beside
    #: the wheel, and the audit's ``debug-info`` check fails a wheel that carries some (false: both off).
    strip_debug: bool = True
    #: ``cuda-available-in-build``: a CUDA build's Python sees ``torch.cuda.is_available()`` True (the builders have
    #: no GPU; a setup.py that asks it would leave CUDA out): ci/builds/cuda_available.py; false: torch's answer.
    cuda_available_in_build: bool = True
    #: ``cxx-standard-check``: a pin of an older C++ standard than the target torch's, on every path of the build
    #: files the backend reads, stops the build before anything is installed (ci/builds/standard.py); false: off.
    cxx_standard_check: bool = True
    #: ``compress-fatbin``: CUDA 13 cells' builds append ``--compress-mode=size`` to nvcc's flags
    #: (ci/linux/host.py: fatbin_compression_flags); false: nvcc's default, or the project's own mode.
    compress_fatbin: bool = True
    #: ``variant-wheels``: ``release`` also writes PEP 825 variant wheels (ci/release/variants.py; experimental).
    variant_wheels: bool = False
    #: ``pypi-cuda-majors``: ``release pypi-wheel`` builds the stable wheel once per CUDA major that PyPI's torch
    #: uses in the project's torch range and merges them into one wheel (ci/release/majors.py); stable ABI with
    #: ``cuda-libraries`` only.
    pypi_cuda_majors: bool = False
    #: ``project-arch-flags``: what the wrapper in front of nvcc (ci/nvcc/wrapper.py) does with architecture flags of
    #: the project's own: ``"refuse"`` (stop at the first compile), ``"replace"`` (the farm's list instead, with the
    #: architecture-specific targets the project asks for), ``"keep"`` (the project's list; the audit holds the
    #: wheel to it).
    arch_flags: str = "refuse"
    #: ``older-majors-sass``: with ``pypi-cuda-majors``, the builds of every CUDA major but the newest carry SASS
    #: for the oldest architecture of each GPU generation in torch's list (``"per-generation"``: 7.0 8.0 9.0 10.0
    #: 12.0 for torch 2.10, whose list adds 7.5 and 8.6), which runs on every GPU that torch runs on, or torch's
    #: whole list (``"torch"``). Why: ci/universe/archs.py ``per_generation``.
    older_majors_sass: str = "per-generation"
    #: ``test-requires``: requirements installed beside the wheel wherever its tests run (the clean CPU test
    #: environment, every GPU lane's, the release workflows' test jobs, which run the farm's ``test``/``test-gpu``).
    test_requires: tuple[str, ...] = ()
    #: ``test-extras``: extras of the wheel itself installed with it there (``pip install "<wheel>[test]"``).
    test_extras: tuple[str, ...] = ()
    #: The CPython floor of the project's abi3 wheel as its build says it (``bdist_wheel``'s ``py_limited_api =
    #: "cp39"`` in setup.py, setup.cfg or ``[tool.distutils.bdist_wheel]``): ``"3.9"``; None: not said.
    limited_api_floor: str | None = None

    @property
    def normalized_name(self) -> str:
        return canonicalize_name(self.name).replace("-", "_")

    @property
    def is_farm_itself(self) -> bool:
        return self.root.resolve() == FARM_ROOT


# --- reading ---------------------------------------------------------------------------------

_KEYS = {
    "version", "name", "import-name", "abi", "python-abi", "torch", "python", "cuda", "cuda-archs", "extra-cuda-archs",
    "build-env", "cpu-env", "debug-env", "cuda-libraries", "cpu-libraries", "commands", "toolkit-libraries",
    "archs", "max-wheel-size", "strip-debug", "compress-fatbin", "test-requires", "test-extras",
    "os", "variant-wheels", "pypi-cuda-majors", "older-majors-sass", "cuda-available-in-build",
    "cxx-standard-check", "project-arch-flags",
}


def load(project: Path | str | None = None, config: Path | str | None = None) -> ProjectConfig:
    """Read and validate the configuration of the project at ``project`` (default: the current folder, as
    cibuildwheel's; the command line has already made a relative path absolute against the caller's folder)."""
    root = Path(project).expanduser() if project else Path.cwd()
    if not root.exists():
        raise ConfigError("project folder does not exist", root, "pass the folder that holds its pyproject.toml")
    if not root.is_dir():
        raise ConfigError("project path is not a folder", root, "pass the folder that holds its pyproject.toml")
    root = root.resolve()
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() and not (root / "setup.py").is_file():
        raise ConfigError(
            "no pyproject.toml or setup.py in the project folder", root,
            "pass the root of a Python extension project (--project DIR)",
        )
    data: dict[str, Any] = _read_toml(pyproject) if pyproject.is_file() else {}
    source = pyproject
    # With --config the project's own pyproject.toml is only read for [project] (name, requires-python).
    table = _farm_table(data, pyproject) if config is None else None
    if config is not None:
        source = Path(config).expanduser().resolve()
        if not source.is_file():
            raise ConfigError("configuration file does not exist", source, "pass an existing TOML file to --config")
        extra = _read_toml(source)
        table = _farm_table(extra, source) if "tool" in extra else extra
        if table is None:
            raise ConfigError(f"the configuration file has no [tool.{TABLE}] table", source,
                              f"write the keys under [tool.{TABLE}], or at the top level of the file")
    if table is None:
        if not pyproject.is_file():
            raise ConfigError(
                "the project has no pyproject.toml", root,
                f"add one with a [tool.{TABLE}] table (at least name = \"...\") or pass --config FILE",
            )
        table = {}
    if not isinstance(table, dict):
        raise ConfigError(f"[tool.{TABLE}] must be a table", type(table).__name__, "write it as a TOML table")
    parsed = parse(table, root=root, source=source, pyproject=data)
    no_torch = build_files.cmake_without_torch(root, data)
    if no_torch is not None:
        backend, top = no_torch
        raise ConfigError(f"the project builds with CMake ({backend}) but its CMakeLists.txt has no "
                          "find_package(Torch)", top, "add find_package(Torch REQUIRED) with "
                          "torch.utils.cmake_prefix_path on CMAKE_PREFIX_PATH (README: a CMake project), then link "
                          "the torch target")
    return parsed


def _farm_table(data: Mapping[str, Any], source: Path) -> Any:
    """The farm's table of a TOML document; a near miss (``[tool.cuda_ext_farm]``) is an error, not silence."""
    tools = data.get("tool", {})
    if not isinstance(tools, dict):
        return None
    if TABLE in tools:
        return tools[TABLE]
    near = difflib.get_close_matches(TABLE, [str(k) for k in tools], n=1, cutoff=0.75)
    near += [k for k in tools if str(k).replace("_", "-").lower() == TABLE and k not in near]
    if near:
        raise ConfigError(f"{source.name} has [tool.{near[0]}], not [tool.{TABLE}]", near[0],
                          f"rename the table to [tool.{TABLE}]")
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("malformed TOML", f"{path}: {exc}", "fix the syntax at that line") from None
    except OSError as exc:
        raise ConfigError("cannot read the configuration", path, f"{exc.strerror}; check its permissions") from None


def parse(table: Mapping[str, Any], *, root: Path, source: Path, pyproject: Mapping[str, Any]) -> ProjectConfig:
    """Validate ``table`` (the ``[tool.cuda-ext-farm]`` mapping) into a :class:`ProjectConfig`; the keys are
    judged in one order, so a table with several bad values is always refused for the same one."""
    _check_keys(table, source)
    project_table = pyproject.get("project", {}) if isinstance(pyproject.get("project"), dict) else {}
    name, import_name = _names(table, project_table, source)
    abi = tomlvalues.choice(table, "abi", ("classic", "stable"), "classic")
    limited_api_floor = build_files.limited_api_floor(root, pyproject)
    python_abi = _python_abi(table, abi, limited_api_floor)
    torch, torch_spec = tomlvalues.versions(table, "torch", r"\d+\.\d+(\.\d+)?")
    python, python_spec = tomlvalues.versions(table, "python", r"3\.\d+")
    requires_python = _requires_python(project_table)
    cuda = tomlvalues.string_list(table, "cuda", ())
    cuda_archs = tomlvalues.string(table, "cuda-archs", None)
    extra_cuda_archs = tomlvalues.string(table, "extra-cuda-archs", None)
    # build-env adds to the default (FORCE_CUDA=1): a project's own variable does not drop it (FORCE_CUDA = "0" does).
    build_env = {**DEFAULT_BUILD_ENV, **tomlvalues.string_table(table, "build-env", {}, BUILD_PLACEHOLDERS)}
    cpu_env = tomlvalues.string_table(table, "cpu-env", {}, BUILD_PLACEHOLDERS)
    debug_env = tomlvalues.string_table(table, "debug-env", {}, BUILD_PLACEHOLDERS)
    cuda_libraries = tomlvalues.string_list(table, "cuda-libraries", ("*",))
    cpu_libraries = tomlvalues.string_list(table, "cpu-libraries", ())
    toolkit_libraries = _toolkit_libraries(table)
    archs = _archs(table)
    commands = _commands(table, import_name)
    return ProjectConfig(
        root=root, source=source, name=name, import_name=import_name, abi=abi, python_abi=python_abi,
        torch=torch, torch_spec=torch_spec, python=python, python_spec=python_spec,
        requires_python=requires_python, cuda=cuda, cuda_archs=cuda_archs, extra_cuda_archs=extra_cuda_archs,
        build_env=build_env,
        cpu_env=cpu_env, debug_env=debug_env, cuda_libraries=cuda_libraries, cpu_libraries=cpu_libraries,
        toolkit_libraries=toolkit_libraries, commands=commands, archs=archs,
        oses=tomlvalues.subset(table, "os", OSES, OSES, required="linux"),
        build_requires=_build_requires(pyproject),
        max_wheel_size=tomlvalues.size(table, "max-wheel-size", DEFAULT_MAX_WHEEL_SIZE),
        strip_debug=tomlvalues.boolean(table, "strip-debug", True),
        compress_fatbin=tomlvalues.boolean(table, "compress-fatbin", True),
        cuda_available_in_build=tomlvalues.boolean(table, "cuda-available-in-build", True),
        cxx_standard_check=tomlvalues.boolean(table, "cxx-standard-check", True),
        variant_wheels=tomlvalues.boolean(table, "variant-wheels", False),
        pypi_cuda_majors=_pypi_cuda_majors(table, abi, cuda_libraries),
        older_majors_sass=tomlvalues.choice(table, "older-majors-sass", ("per-generation", "torch"), "per-generation"),
        arch_flags=tomlvalues.choice(table, "project-arch-flags", ("refuse", "replace", "keep"), "refuse"),
        test_requires=tomlvalues.requirements(table, "test-requires"),
        test_extras=tomlvalues.extras(table, "test-extras"),
        limited_api_floor=limited_api_floor,
    )


def _check_keys(table: Mapping[str, Any], source: Path) -> None:
    """Only the keys this farm knows, in the schema version it reads."""
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown key in [tool.{TABLE}] of {source.name}", unknown[0],
                          f"known keys are {', '.join(sorted(_KEYS))}")
    version = table.get("version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ConfigError(f"[tool.{TABLE}] version is not supported", version,
                          f"this farm reads version = {SCHEMA_VERSION}; upgrade the farm or fix the key")


def _names(table: Mapping[str, Any], project_table: Mapping[str, Any], source: Path) -> tuple[str, str]:
    """The distribution's name (the table's, else ``[project] name``) and the module its smoke test imports."""
    where = f"[tool.{TABLE}]"
    name = tomlvalues.string(table, "name", project_table.get("name"))
    if not name:
        raise ConfigError(f"the project has no name ({where} name or [project] name)", source,
                          f'add name = "your-package" to {where}')
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name):
        raise ConfigError(f"{where} name is not a valid distribution name", name, "use letters, digits, . _ -")
    import_name = tomlvalues.string(table, "import-name", canonicalize_name(name).replace("-", "_"))
    if not import_name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", import_name):
        raise ConfigError(f"{where} import-name is not a Python module name", import_name, "use a dotted module name")
    return name, import_name


def _python_abi(table: Mapping[str, Any], abi: str, limited_api_floor: str | None) -> PythonAbi:
    """``python-abi``: abi3 for a stable-ABI project, and wherever the build says py_limited_api (the project
    describes itself)."""
    python_abi: PythonAbi = tomlvalues.choice(table, "python-abi", ("per-python", "abi3"),
                                              "abi3" if abi == "stable" or limited_api_floor else "per-python")
    if abi == "stable" and python_abi != "abi3":
        raise ConfigError(f"[tool.{TABLE}] python-abi must be abi3 for a stable-ABI project", python_abi,
                          'remove python-abi or set it to "abi3"')
    return python_abi


def _requires_python(project_table: Mapping[str, Any]) -> SpecifierSet | None:
    """``[project] requires-python`` (None: not declared)."""
    if not isinstance(project_table.get("requires-python"), str):
        return None
    try:
        return SpecifierSet(project_table["requires-python"])
    except InvalidSpecifier:
        raise ConfigError("[project] requires-python is not a version specifier",
                          project_table["requires-python"], 'write it like ">=3.10"') from None


def _toolkit_libraries(table: Mapping[str, Any]) -> tuple[str, ...]:
    """``toolkit-libraries``: CUDA libraries by the name the linker knows them by."""
    toolkit_libraries = tomlvalues.string_list(table, "toolkit-libraries", ())
    bad = [lib for lib in toolkit_libraries if not re.fullmatch(r"[a-z][a-z0-9_]*", lib)]
    if bad:
        raise ConfigError(f"[tool.{TABLE}] toolkit-libraries names a library by something else than its name", bad[0],
                          'write the library as the linker names it, without lib or .so: ["cublas"]')
    return toolkit_libraries


def _archs(table: Mapping[str, Any]) -> tuple[str, ...]:
    """``archs``: some of the Linux CPU architectures the farm builds, at least one."""
    archs = tomlvalues.string_list(table, "archs", LINUX_ARCHS)
    unknown_archs = [a for a in archs if a not in LINUX_ARCHS]
    if unknown_archs or not archs:
        raise ConfigError(f"[tool.{TABLE}] archs names an architecture the farm does not build",
                          unknown_archs[0] if unknown_archs else "[]", f"use some of {', '.join(LINUX_ARCHS)}")
    return archs


def _commands(table: Mapping[str, Any], import_name: str) -> Commands:
    """``[tool.cuda-ext-farm.commands]``; the smoke command defaults to importing the module, gpu-test to test."""
    commands_table = table.get("commands", {})
    if not isinstance(commands_table, dict):
        raise ConfigError(f"[tool.{TABLE}] commands must be a table", type(commands_table).__name__,
                          f"write [tool.{TABLE}.commands] with smoke/test/... keys")
    unknown = sorted(set(commands_table) - set(COMMAND_NAMES))
    if unknown:
        raise ConfigError(f"unknown key in [tool.{TABLE}.commands]", unknown[0],
                          f"known commands are {', '.join(COMMAND_NAMES)}")
    parsed = {key: tomlvalues.command(commands_table, key, COMMAND_PLACEHOLDERS) for key in COMMAND_NAMES}
    smoke = parsed["smoke"] or ("python", "-c", f"import {import_name}")
    return Commands(
        smoke=smoke, test=parsed["test"], gpu_test=parsed["gpu-test"] or parsed["test"],
        sanitizer=parsed["sanitizer"], multi_gpu=parsed["multi-gpu"], bench=parsed["bench"],
    )


def _pypi_cuda_majors(table: Mapping[str, Any], abi: str, cuda_libraries: tuple[str, ...]) -> bool:
    """``pypi-cuda-majors``: only a stable-ABI project (one binary per major serves every torch of that major)
    that names its CUDA libraries (they are what is built per major; the rest of the wheel is shared)."""
    on = tomlvalues.boolean(table, "pypi-cuda-majors", False)
    if on and abi != "stable":
        raise ConfigError(f"[tool.{TABLE}] pypi-cuda-majors needs a stable-ABI project", f"abi = {abi!r}",
                          'set abi = "stable" (a classic wheel is bound to one torch, so to one CUDA major) or drop '
                          "pypi-cuda-majors")
    if on and ("cuda-libraries" not in table or cuda_libraries in ((), ("*",))):
        raise ConfigError(f"[tool.{TABLE}] pypi-cuda-majors needs cuda-libraries", "cuda-libraries",
                          'name the libraries that hold CUDA code (cuda-libraries = ["pkg/_C_cuda.*"]); the rest of '
                          "the wheel is shared by every major")
    return on


def _build_requires(pyproject: Mapping[str, Any]) -> tuple[str, ...]:
    from packaging.requirements import InvalidRequirement, Requirement

    requires = pyproject.get("build-system", {}).get("requires", [])
    kept: list[str] = []
    for item in requires if isinstance(requires, list) else []:
        try:
            req = Requirement(str(item))
        except InvalidRequirement:
            raise ConfigError("[build-system] requires has an invalid requirement", item,
                              "fix it (PEP 508 syntax)") from None
        if canonicalize_name(req.name) != "torch":
            kept.append(str(req))
    return tuple(kept)


def expand(template: str, values: Mapping[str, str]) -> str:
    """Fill ``{name}`` placeholders (already validated) with ``values``."""
    return re.sub(r"\{([a-z_]+)\}", lambda m: values.get(m.group(1), m.group(0)), template)
