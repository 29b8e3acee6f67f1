"""Architecture flags the project passes nvcc itself (``-gencode``/``-arch`` in ``extra_compile_args``): torch then
adds none of its own, so the farm's ``TORCH_CUDA_ARCH_LIST`` (``--arch-list``, ``cuda-archs``) is ignored.

They are found before the long compile, in every route:

* host and Windows builds poll ``build/temp*/build.ninja`` in the source copy (:func:`watch_build_ninja`: torch
  writes it, then starts ninja, which prints a command only when it finished) and read printed nvcc lines
  (:func:`stop_on_own_arch_flags`: setuptools without ninja prints each before running it);
* container builds put ``ci/nvcc/nvcc-arch-guard`` in front of nvcc (:func:`arch_guard_env`, through
  ``PYTORCH_NVCC``, which torch writes verbatim into build.ninja): the first compile with flags of the project's
  own fails at once with one line (:data:`ARCH_GUARD`), before nvcc ran; ninja prints a failed edge's output at
  once, the line watcher stops the build, and :func:`guard_refusal` gives the same error from the kept output.

A project that sets ``TORCH_CUDA_ARCH_LIST`` in its build-env is not stopped (:func:`early_stop_arch_list`);
when its wheel then fails the audit's ``sass``/``ptx`` checks, :func:`arch_flags_advice` names the flags nvcc
was given, read from the build's output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from ci.errors import FarmError, UsageError
from ci.universe.targets import Target

#: ``ci/nvcc/nvcc-arch-guard``'s name.
ARCH_GUARD_SCRIPT = "nvcc-arch-guard"
#: How an nvcc command starts: nvcc itself, the image's ccache wrapper, the farm's wrappers in ``ci/nvcc``.
NVCC_COMMANDS = ("nvcc", "nvcc-ccache", "nvcc-module-anchor", ARCH_GUARD_SCRIPT)
#: nvcc's architecture options: ``-gencode=arch=…,code=…`` (or with a space), ``--generate-code``, ``-arch``,
#: ``--gpu-architecture``, ``-code``, ``--gpu-code``.
ARCH_OPTIONS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code")


def torch_arch_flags(arch_list: str) -> set[str]:
    """The ``-gencode`` flags torch's extension builder gives nvcc for ``TORCH_CUDA_ARCH_LIST=arch_list``."""
    flags = set()
    for item in arch_list.replace(",", ";").replace(" ", ";").split(";"):
        base = item.strip().removesuffix("+PTX")
        if not base:
            continue
        num = base.replace(".", "")
        flags.add(f"-gencode=arch=compute_{num},code=sm_{num}")
        if item.strip().endswith("+PTX"):
            flags.add(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def nvcc_arch_flags(line: str) -> list[str] | None:
    """The architecture flags of an nvcc compile command line (``None``: the line is not one), each written as one
    ``-option=value`` word."""
    words = line.split()
    if not any(w.strip('"').removesuffix(".exe").endswith(NVCC_COMMANDS) for w in words[:3]) \
            or "-c" not in words:
        return None
    found: list[str] = []
    for i, word in enumerate(words):
        option, _, value = word.partition("=")
        if option in ARCH_OPTIONS:
            if not value and i + 1 < len(words):
                value = words[i + 1]
            found.append(f"{option}={value}".replace("--generate-code=", "-gencode="))
    return found


def ninja_arch_flags(text: str) -> list[str] | None:
    """The architecture flags of the nvcc compiles a ``build.ninja`` written by torch describes (``cuda_cflags``
    and ``cuda_post_cflags``); None: not (yet) a complete file with CUDA compiles."""
    lines = text.splitlines()
    if not any(line.startswith("build ") for line in lines):
        return None
    flags = [line.partition("=")[2] for line in lines if line.startswith(("cuda_cflags =", "cuda_post_cflags ="))]
    if not flags:
        return None
    return nvcc_arch_flags("nvcc -c " + " ".join(flags))


def _own(flags: list[str] | None, arch_list: str) -> list[str]:
    if not flags:
        return []
    wanted = torch_arch_flags(arch_list)
    return [] if set(flags) == wanted else [f for f in flags if f not in wanted] or flags


def own_arch_flags(line: str, arch_list: str) -> list[str]:
    """Architecture flags on an nvcc compile line that ``TORCH_CUDA_ARCH_LIST=arch_list`` did not ask for: the
    project's own (torch then adds none of its own, so the farm's architectures are ignored)."""
    return _own(nvcc_arch_flags(line), arch_list)


def own_arch_error(own: list[str], arch_list: str) -> UsageError:
    more = f" and {len(own) - 1} more" if len(own) > 1 else ""
    return UsageError("the project passes its own CUDA architecture flags to nvcc, so torch ignores "
                      "TORCH_CUDA_ARCH_LIST (the farm's architectures)", f"{own[0]}{more}",
                      "drop the -gencode/-arch flags from the extension's extra_compile_args (setup.py) and let "
                      "torch's TORCH_CUDA_ARCH_LIST apply: cuda-archs in [tool.cuda-ext-farm] or --arch-list "
                      f"choose the architectures ({arch_list} here); the build was stopped before its long compile")


def early_stop_arch_list(target: Target) -> str | None:
    """The architecture list a build's nvcc flags are held against (the cell's: ``--arch-list``, ``cuda-archs``);
    None: no early stop, for a CPU build, and for a project that sets ``TORCH_CUDA_ARCH_LIST`` in its build-env
    (it chose its architectures itself and is not second-guessed; the audit's ``sass``/``ptx`` checks still
    judge the wheel, and name the flags nvcc was given: :func:`arch_flags_advice`)."""
    if target.cpu or "TORCH_CUDA_ARCH_LIST" in target.project.build_env:
        return None
    return target.cell.arch_list


#: The one line ``ci/nvcc/nvcc-arch-guard`` prints when it refuses a compile (then it exits 3, nvcc never ran).
ARCH_GUARD = re.compile(r"cuda-ext-farm nvcc-arch-guard: own architecture flags: (?P<flags>[^(]*?)\s*"
                        r"\(TORCH_CUDA_ARCH_LIST=(?P<list>[^)]*)\)")


def arch_guard_env(arch_list: str, script: str, next_nvcc: str) -> dict[str, str]:
    """The variables that put ``ci/nvcc/nvcc-arch-guard`` (at ``script``, as the build sees it) in front of
    ``next_nvcc`` (the ``PYTORCH_NVCC`` the build had: nvcc, its ccache wrapper or ``nvcc-module-anchor``):
    a compile with flags other than those ``arch_list`` implies fails at once, before nvcc runs."""
    return {"PYTORCH_NVCC": script, "FARM_ARCH_GUARD_NVCC": next_nvcc,
            "FARM_ARCH_GUARD_FLAGS": " ".join(sorted(torch_arch_flags(arch_list))),
            "FARM_ARCH_GUARD_LIST": arch_list}


def guard_refusal(output: str) -> FarmError | None:
    """The farm's error for the guard's line in ``output`` (None: the guard refused nothing)."""
    match = ARCH_GUARD.search(output)
    if match is None:
        return None
    return own_arch_error(match["flags"].split(), match["list"])


def stop_on_own_arch_flags(arch_list: str) -> Callable[[str], FarmError | None]:
    """A watcher for the build's output lines: the first nvcc command line printed (setuptools without ninja
    prints each before running it) that carries architecture flags of the project's own stops the build, and so
    does the line of ``ci/nvcc/nvcc-arch-guard`` (container builds: ninja prints a failed edge's output at once)."""

    def watch(line: str) -> FarmError | None:
        refused = guard_refusal(line)
        if refused is not None:
            return refused
        own = own_arch_flags(line, arch_list)
        return own_arch_error(own, arch_list) if own else None

    return watch


def watch_build_ninja(source: Path, arch_list: str) -> Callable[[], FarmError | None]:
    """A watcher polled while the build runs: torch writes ``build/temp*/build.ninja`` under ``source`` and starts
    ninja at once (which prints a command only when it finished): its nvcc flags are read from there, and flags
    of the project's own stop the build within moments of its first nvcc."""
    seen: dict[Path, float] = {}

    def poll() -> FarmError | None:
        for ninja in source.glob("build/temp*/build.ninja"):
            try:
                stamp = ninja.stat().st_mtime
                if seen.get(ninja) == stamp:
                    continue
                text = ninja.read_text(errors="replace")
            except OSError:
                continue
            flags = ninja_arch_flags(text)
            if flags is None:
                continue  # not complete yet: read again on the next poll
            seen[ninja] = stamp
            own = _own(flags, arch_list)
            if own:
                return own_arch_error(own, arch_list)
        return None

    return poll


# --- the audit's sass/ptx failure names the flags nvcc was given ------------------------------------------------


def flags_in_output(output: str) -> list[str]:
    """Every architecture flag of the nvcc compile lines in a build's output (torch runs ``ninja -v``, which prints
    each finished command; setuptools without ninja prints each before running it), first seen first."""
    seen: dict[str, None] = {}
    for line in output.splitlines():
        for flag in nvcc_arch_flags(line) or ():
            seen.setdefault(flag)
    return list(seen)


def arch_flags_advice(output: str, target: Target) -> str:
    """What a failed ``sass``/``ptx`` check adds when the build's nvcc compiles were not given the flags the cell's
    list implies (the early stop was off: the project sets ``TORCH_CUDA_ARCH_LIST`` in build-env, or a watcher
    missed them): the flags of the project's own and what to do, or that build-env's list replaced the farm's.
    Empty: nothing to add (no nvcc line in the output, or exactly the cell's flags)."""
    seen = flags_in_output(output)
    cell = target.cell.arch_list
    if target.cpu or not seen or set(seen) == torch_arch_flags(cell):
        return ""
    listed = target.project.build_env.get("TORCH_CUDA_ARCH_LIST")
    if listed and set(seen) == torch_arch_flags(listed):
        return (f"nvcc compiled for TORCH_CUDA_ARCH_LIST={listed}, which build-env of [tool.cuda-ext-farm] sets: "
                f"remove it there and let the farm's list apply ({cell} here: cuda-archs in [tool.cuda-ext-farm] or "
                "--arch-list choose it)")
    own = _own(seen, listed or cell)
    also = " and remove TORCH_CUDA_ARCH_LIST from build-env of [tool.cuda-ext-farm]" if listed else ""
    return (f"nvcc compiled with architecture flags of the project's own: {' '.join(own)}: drop them from the "
            f"extension's extra_compile_args (setup.py){also} and let torch's TORCH_CUDA_ARCH_LIST apply ({cell} "
            "here: cuda-archs in [tool.cuda-ext-farm] or --arch-list choose it)")


def advice_from_log(log_file: Path, target: Target) -> str:
    """:func:`arch_flags_advice` for the build output kept in ``log_file`` (``build-output.log``)."""
    try:
        return arch_flags_advice(log_file.read_text(errors="replace"), target)
    except OSError:
        return ""
