"""Every key of ``[tool.cuda-ext-farm]``, declared once: its default and what it means in a line, the page with the
details where there is one. ``validation`` accepts these keys and no other; ``docs/options.md`` is generated from
them (:func:`markdown`; ``tests/unit/universe/test_options_doc.py`` keeps it current).

Standard library only.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    default: str
    meaning: str
    #: the page (relative to docs/) with the details
    details: str = ""


_RELEASING = "releasing.md#one-pypi-wheel-across-cuda-majors"

KEYS: tuple[Key, ...] = (
    Key("version", "`1`", "the schema version of the table"),
    Key("name", "`[project] name`", "the distribution's name (required without `[project]`)"),
    Key("import-name", "the name, with `_`", "the module the default smoke test imports"),
    Key("abi", '`"classic"`', '`"classic"`: one wheel per torch release; `"stable"`: LibTorch\'s stable ABI, one abi3 '
        "wheel per CUDA toolkit that serves every later torch"),
    Key("python-abi", '`"per-python"`; `"abi3"` for `abi = "stable"` or a build that says `py_limited_api`',
        '`"abi3"`: one `py_limited_api` wheel per torch release instead of one per CPython'),
    Key("torch", "the newest release of each CUDA major of `cuda` (of every cell without `cuda`)",
        'releases (`["2.11", "2.13"]`) or a specifier (`">=2.11"`)'),
    Key("python", "every CPython the torch release has wheels for",
        'versions (`["3.11", "3.12"]`, `"3.13t"` for a free-threaded CPython) or a specifier; `[project] '
        "requires-python` narrows it too; a list is exact"),
    Key("free-threaded", "`true`", "without a `python` list, the free-threaded CPythons the torch release has wheels "
        "for (`cp313-cp313t` wheels, also for an abi3 project: abi3 does not cover them); `false` opts out",
        "free-threaded.md"),
    Key("cuda", "classic: the release cell of each torch's CUDA major; stable: every cell",
        'toolkit cells: `"13.0"`, `"cu132"`, or a major (`"13"`: its release cell; alone it also picks the torch '
        "releases built with CUDA 13)"),
    Key("cuda-archs", "the target torch's own list", '`TORCH_CUDA_ARCH_LIST` for every target (`"8.0;9.0+PTX"`); '
        "`cuda-ext-farm matrix` shows each target's list and where it comes from; an empty list is refused"),
    Key("extra-cuda-archs", "none", 'architectures added to the default (`"8.9;12.0+PTX"`)'),
    Key("project-arch-flags", '`"refuse"`', "what to do with architecture flags the project gives nvcc itself "
        '(`-gencode`, `-arch`): `"refuse"` them, `"replace"` them with the farm\'s list, or `"keep"` them'),
    Key("archs", '`["x86_64", "aarch64"]`', "Linux CPU architectures (aarch64: the CUDA 13 cells, torch 2.11 and "
        'newer); `["x86_64"]` opts out of aarch64'),
    Key("os", '`["linux", "windows"]`', 'the platforms built; `["linux"]` opts out of Windows'),
    Key("build-env", '`{ FORCE_CUDA = "1" }`', "variables of a CUDA build (placeholders `{cuda}`, `{cuda_major}`, "
        "`{nvcc_version}`, `{torch}`, `{arch_list}`, `{python}`, `{git_commit}`); a variable named here replaces "
        "the farm's"),
    Key("cpu-env", "`{}`", "what a `--cpu` build sets instead"),
    Key("debug-env", "`{}`", "what `develop --debug` adds"),
    Key("cuda-available-in-build", "`true`", "the build's Python sees `torch.cuda.is_available()` True (the builders "
        "have no GPU); `false`: torch's own answer"),
    Key("cxx-standard-check", "`true`", "a pin of an older C++ standard than the target torch's headers need stops "
        "the build before anything is installed"),
    Key("cuda-libraries", '`["*"]`', "libraries (globs over the wheel's paths) that must hold CUDA code in a CUDA "
        "build"),
    Key("cpu-libraries", "`[]`", "libraries that must load without any CUDA library"),
    Key("strip-debug", "`true`", "debug info leaves the wheel for `wheelhouse/<target>/debug/<build-id>.debug`"),
    Key("compress-fatbin", "`true`", "CUDA 13 cells compile with `--compress-mode=size` (CUDA 12 cells keep LZ4 for "
        "older drivers)"),
    Key("variant-wheels", "`false`", "`release` also writes PEP 825 variant wheels (experimental)", "variants.md"),
    Key("pypi-cuda-majors", "`false`", "one PyPI wheel across the CUDA majors of the project's torch range (stable "
        "ABI with `cuda-libraries`)", _RELEASING),
    Key("older-majors-sass", '`"per-generation"`', "with `pypi-cuda-majors`: the older majors' builds carry one SASS "
        'per GPU generation (PTX for GPUs new in their toolkit); `"torch"`: torch\'s whole list', _RELEASING),
    Key("max-wheel-size", '`"100 MiB"`', 'the audit fails a larger wheel; bytes, or a size like `"95 MiB"`'),
    Key("toolkit-libraries", "`[]`", 'CUDA libraries the extension links (`["cublas"]`): their PyPI wheels join the '
        "build's toolkit"),
    Key("test-requires", "none", "requirements installed beside the wheel wherever its tests run"),
    Key("test-extras", "none", 'extras of the project\'s own wheel installed with it (`["test"]`)'),
    Key("commands.smoke", '`python -c "import <import-name>"`', "the import test, in a clean environment with the "
        "wheel"),
    Key("commands.test", "none", "CPU tests (`cuda-ext-farm test`, `run test`)"),
    Key("commands.gpu-test", "`commands.test`", "the `default` and `ptx-jit` GPU lanes"),
    Key("commands.sanitizer", "none", "the workload run under compute-sanitizer"),
    Key("commands.multi-gpu", "none", "the lane for two or more GPUs"),
    Key("commands.bench", "none", "`cuda-ext-farm run bench`, and the `bench` GPU lane (`{out}`: the results folder)"),
)

#: The table's own keys (``commands`` is a table of its own).
TABLE_KEYS = frozenset(k.name.split(".")[0] for k in KEYS)


def markdown() -> str:
    """``docs/options.md``: one table, a line a key."""
    lines = ["# Project options", "",
             "<!-- generated from ci/universe/project/keys.py by tests/unit/universe/test_options_doc.py "
             "(FARM_WRITE_DOCS=1 rewrites it); do not edit -->", "",
             "The `[tool.cuda-ext-farm]` table of the project's `pyproject.toml` (or the same keys in a file given "
             "with `--config FILE`, for a project you cannot edit). An unknown key or a bad value stops every command "
             "with one line that names it, before anything is made. Settings the command line and the environment "
             "give (`--arch-list`, `TORCH_CUDA_ARCH_LIST`, folders): [settings.md](settings.md).", "",
             "| key | default | meaning |", "| --- | --- | --- |"]
    for key in KEYS:
        more = f" ([details]({key.details}))" if key.details else ""
        lines.append(f"| `{key.name}` | {key.default} | {key.meaning}{more} |")
    lines += ["", "Commands are strings (split like a shell) or lists; `python`/`pytest` at their start mean the "
              "interpreter under test; they run in a new empty folder, so name the project's files with `{project}` "
              "(`{wheel}`, `{python}` and `{out}` are there too)."]
    return "\n".join(lines) + "\n"
