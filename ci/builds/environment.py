"""The environment a project's build runs with, composed in one place for every route: the host build (x86_64 and
the aarch64 cross build), the container build (``CIBW_ENVIRONMENT``) and the Windows build (``CIBW_ENVIRONMENT``).

Layers, each over the one before:

1. the **caller's** environment: the one the farm was started with, as the entry resolved it
   (``settings.current().environ``); a host build inherits all of it, a container or Windows build only the flag
   variables of :data:`APPENDED` (the rest of a host's environment means nothing in an image);
2. the **farm's settings** for the target: the toolkit, ``TORCH_CUDA_ARCH_LIST``, ``MAX_JOBS``, the compilers;
3. the **project's** ``build-env`` (``cpu-env`` in a ``--cpu`` build), which replaces a farm setting it names
   (``TORCH_CUDA_ARCH_LIST``, ``CC``: the project describes itself);
4. the farm's **final** variables, computed from what the first three ask for: the sysroot's compiler wrappers
   around the ``CC``/``CXX`` asked for, the nvcc wrapper in front of the ``PYTORCH_NVCC`` asked for.

The variables that hold lists take every layer's part instead of the last one: the flags of :data:`APPENDED` in the
order caller, project, farm (nvcc and gcc take the last of a repeated option, so the farm's deterministic
``-frandom-seed``/``-objtemp``/``-ffile-prefix-map`` and ``--compress-mode`` hold whatever else is set), the search
paths of :data:`PREPENDED` in the order farm, project, caller (``ci/buildsite`` first on ``PYTHONPATH``, the
toolkit's libraries first on ``LIBRARY_PATH``). So the same ``[tool.cuda-ext-farm]`` table builds the same code on
every route.
"""

from __future__ import annotations

from collections.abc import Mapping

from ci.errors import UsageError
from ci.nvcc import wrapper
from ci.universe.targets import Target

#: Flag variables: the caller's, the project's and the farm's parts, joined by a space in that order.
APPENDED = ("NVCC_APPEND_FLAGS", "CPPFLAGS")
#: Search-path variables: the farm's, the project's and the caller's parts in that order, with their separator
#: (``None``: the build machine's path separator).
PREPENDED: Mapping[str, str | None] = {"PYTHONPATH": None, "LIBRARY_PATH": None, "PATH": None, "LDFLAGS": " "}


def _joined(parts: tuple[str | None, ...], separator: str) -> str:
    return separator.join(p.strip() for p in parts if p and p.strip())


def compose(caller: Mapping[str, str], farm: Mapping[str, str], project: Mapping[str, str], *,
            inherit: bool = True, pathsep: str = ":") -> dict[str, str]:
    """The variables a build sets over ``caller`` (the layers of the module docstring, but the final one).

    ``farm``: the farm's settings and its own parts of the list variables; ``project``: the project's build-env,
    placeholders already filled. ``inherit``: whether the build starts from ``caller`` (a host build); without it
    (a container, a Windows build's ``CIBW_ENVIRONMENT``) only the caller's flag variables carry over.
    ``pathsep``: the build machine's path separator."""
    lists = {*APPENDED, *PREPENDED}
    env = {k: v for k, v in farm.items() if k not in lists}
    env |= {k: v for k, v in project.items() if k not in lists}
    for name in APPENDED:
        value = _joined((caller.get(name), project.get(name), farm.get(name)), " ")
        if value:
            env[name] = value
    for name, separator in PREPENDED.items():
        value = _joined((farm.get(name), project.get(name), caller.get(name) if inherit else None),
                        separator or pathsep)
        if value and (name in farm or name in project):
            env[name] = value
    return env


# --- the farm's own flags -------------------------------------------------------------------------------------


def nvcc_has_random_seed(nvcc_version: str) -> bool:
    """nvcc 12.8 and newer take ``-frandom-seed``; older ones need ``ci/nvcc/nvcc-module-anchor``."""
    parts = [int(p) for p in nvcc_version.split(".")[:2] if p.isdigit()]
    return [*parts, 0, 0][:2] >= [12, 8]


def deterministic_nvcc_flags(seed: str, nvcc_version: str = "13") -> str:
    """nvcc flags for byte-identical objects. ``-objtemp``: intermediate files are named after the object,
    not ``tmpxft_<pid>_...`` (those names land in the library); ``-frandom-seed`` (nvcc 12.8 and newer):
    cudafe++ otherwise names the anonymous namespaces of a file that defines no external function or
    variable after the file's modification time and its own process id (older nvcc: the farm's container
    builds run nvcc through ``ci/nvcc/nvcc-module-anchor`` instead). One seed for every file of a target is
    safe: those names also carry the file's name and a hash of its path."""
    # --threads 0: one nvcc compiles its architectures in parallel, so a rebuild after a one-file change
    # (one translation unit, seven architectures) uses every core too.
    return "-objtemp --threads 0" + (f" -frandom-seed={seed}" if nvcc_has_random_seed(nvcc_version) else "")


#: nvcc's Zstandard fatbin compression (``--compress-mode``, nvcc 12.8 and newer). Only CUDA 13 cells get it by
#: default: a CUDA 13 runtime needs driver r580 or newer, which reads such fatbins, while a CUDA 12.x wheel runs on
#: drivers back to r525 (minor-version compatibility) and a compressed mode needs a CUDA 12.4 driver (r550) or
#: newer: older ones would find no kernel image. PyTorch made the same choice (CUDA 13 wheels only, pytorch#161316);
#: CUDA 12 cells keep nvcc's default LZ4 fatbins, which every driver reads.
FATBIN_COMPRESSION = "--compress-mode=size"
FATBIN_COMPRESSION_MAJOR = 13


def fatbin_compression_flags(target: Target) -> str:
    """``--compress-mode=size`` for a CUDA 13 cell's build unless the project says ``compress-fatbin = false``
    (nvcc takes the last ``--compress-mode``: appended, the farm's would override a project's own mode)."""
    if target.cpu or not target.project.compress_fatbin or target.cell.cuda_major < FATBIN_COMPRESSION_MAJOR:
        return ""
    return FATBIN_COMPRESSION


def farm_flags(target: Target, nvcc_version: str | None, source: str | None = None) -> dict[str, str]:
    """The farm's parts of :data:`APPENDED` for ``target``: nvcc's deterministic and compression flags, and where
    the source folder's path varies between builds (``source``: the host's work folder; a container's /project
    and a Windows build need none) the mapping that writes it as ``.`` into debug info and ``__FILE__`` (gcc, and
    nvcc's host compiler). ``nvcc_version`` None: a build without a toolkit (PyPI's CUDA 13 is assumed)."""
    # Quoted: setuptools splits these like a shell, and nvcc its *_FLAGS variables (a path may hold spaces).
    # CPPFLAGS, not CFLAGS: setuptools *adds* CPPFLAGS to Python's compile flags, where CFLAGS would replace
    # them (and drop -DNDEBUG and the optimisation level the project expects).
    mapping = f'"-ffile-prefix-map={source}=."' if source else ""
    nvcc = " ".join(filter(None, (deterministic_nvcc_flags(target.id, nvcc_version or "13"),
                                  f"-Xcompiler={mapping}" if mapping else "", fatbin_compression_flags(target))))
    return {"NVCC_APPEND_FLAGS": nvcc, **({"CPPFLAGS": mapping} if mapping else {})}


def check_nvcc_flags(env: Mapping[str, str], whose: str) -> None:
    """nvcc's flag variables in ``env`` split as nvcc splits them (``ci/nvcc/wrapper.py``, which folds them into
    each compile's command line), or one error naming the variable (``whose``: where its value came from)."""
    for name in wrapper.FLAG_VARIABLES:
        try:
            wrapper.split_flags(env.get(name, ""), name)
        except wrapper.UnbalancedQuote as exc:
            raise UsageError(f"{name} ({whose}) has an unbalanced double quote", exc.value,
                             f"close the quote, or write a flag with spaces in one pair of quotes "
                             f'(-Xcompiler="-O2 -g"): nvcc splits {name} at spaces outside double quotes') from None
