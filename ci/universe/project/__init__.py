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
                                    # ("3.13t": a free-threaded one; a list is exact)
    free-threaded = true            # without a python list: the free-threaded CPythons (cp313t) too; false opts out
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

The package holds the table's shape and its reading apart:

* here, the shape every part of the farm reads: :class:`ProjectConfig` (read once, validated, frozen), its
  :class:`Commands`, the defaults, and :func:`expand` (the placeholders of a build-env value or a command);
* ``reading``: :func:`~ci.universe.project.reading.load`, the project's files (``pyproject.toml`` or ``--config
  FILE``) to the table;
* ``validation``: :func:`~ci.universe.project.validation.parse`, the table to a :class:`ProjectConfig`, every
  key validated once: an unknown key or a bad value stops with a message naming the key.

Only the standard library (and ``packaging``, which nox itself needs) is used, so ``noxfile.py`` resolves a
project before any virtual environment exists.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

#: The schema of the table this farm reads (its ``version`` key).
SCHEMA_VERSION = 1
#: The farm's own checkout (this file is ci/universe/project/__init__.py).
FARM_ROOT = Path(__file__).resolve().parents[3]

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
#: ``free-threaded`` by default: the free-threaded CPythons are built unless a project opts out. Why: the farm builds
#: every CPython the torch release has wheels for, users of a free-threaded CPython can install nothing else (abi3
#: does not cover it), and a ``cp313t`` wheel costs one build per release and Python; an extension that does not
#: declare free-threading support (``Py_mod_gil``) still works there, the interpreter turning the GIL back on as it
#: imports it (with a warning; the audit names the declaration), so the default risks no wrong result.
DEFAULT_FREE_THREADED = True


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
    #: ``variant-wheels``: ``release`` also writes PEP 825 variant wheels (ci/release/variants/; experimental).
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
    #: ``free-threaded``: without a ``python`` list, the targets include each free-threaded CPython (``3.13t``) the
    #: torch release has wheels for and the project allows (ci/universe/targets/axes.py, where the default's reason
    #: is); a ``python`` list is exact, so this only opts out of the default.
    free_threaded: bool = DEFAULT_FREE_THREADED
    #: The CPython floor of the project's abi3 wheel as its build says it (``bdist_wheel``'s ``py_limited_api =
    #: "cp39"`` in setup.py, setup.cfg or ``[tool.distutils.bdist_wheel]``): ``"3.9"``; None: not said.
    limited_api_floor: str | None = None

    @property
    def normalized_name(self) -> str:
        return canonicalize_name(self.name).replace("-", "_")

    @property
    def is_farm_itself(self) -> bool:
        return self.root.resolve() == FARM_ROOT


def expand(template: str, values: Mapping[str, str]) -> str:
    """Fill ``{name}`` placeholders (already validated) with ``values``."""
    return re.sub(r"\{([a-z_]+)\}", lambda m: values.get(m.group(1), m.group(0)), template)
