"""Architecture flags of the project's own (``-gencode``/``-arch`` in ``extra_compile_args``): torch then adds
none, so the farm's ``TORCH_CUDA_ARCH_LIST`` (``--arch-list``, ``cuda-archs``) would be ignored. The project key
``project-arch-flags`` (:data:`KEY`) decides: ``refuse`` (the default), ``replace`` or ``keep``.

* Every CUDA build puts ``ci/nvcc/wrapper.py`` in front of nvcc (:func:`wrapper_env`, through ``PYTORCH_NVCC``,
  which torch writes verbatim into build.ninja): it refuses, replaces or keeps the flags at each compile, before
  nvcc runs, and refuses a compile with no architecture flag at all (torch drops its list when any nvcc flag
  merely contains ``arch``).
* The build's output is watched (:func:`watch_output`): the wrapper's refusal (ninja prints a failed edge's output
  at once) stops the build and becomes the farm's error; so does a printed nvcc line with flags of the project's
  own when setuptools runs nvcc without ninja (torch's ``PYTORCH_NVCC`` is ninja's alone).
* The audit checks the wheel against what nvcc was given (:func:`audited_target`): the farm's list; in ``replace``
  what the wrapper emitted (an architecture-specific SASS the project asked for in place of the plain one, the PTX
  plain); in ``keep`` the project's own flags as written (``-arch=all``/``all-major`` resolved for the cell's
  toolkit, ``-arch=native`` refused); both read from the compile lines ninja printed and the wrapper's own line for
  each compile, which also shows what nvcc read from ``NVCC_APPEND_FLAGS``; a failed ``sass``/``ptx`` check names
  the flags nvcc was given (:func:`arch_flags_advice`).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from ci import fsutil
from ci.errors import FarmError, UsageError
from ci.nvcc import wrapper
from ci.universe import archs
from ci.universe.shapes import Cell
from ci.universe.targets import Target

#: The project key and its values (``refuse`` first: the default).
KEY = "project-arch-flags"
MODES = wrapper.MODES
#: The wrapper's file (``ci/nvcc/wrapper.py``).
WRAPPER = Path(wrapper.__file__).resolve()
#: How an nvcc command starts: nvcc itself, the image's ccache wrapper, the farm's wrappers in ``ci/nvcc``.
NVCC_COMMANDS = ("nvcc", "nvcc-ccache", "nvcc-module-anchor", "nvcc/wrapper.py", "nvcc\\wrapper.py")


def torch_arch_flags(arch_list: str) -> set[str]:
    """The ``-gencode`` flags torch's extension builder gives nvcc for ``TORCH_CUDA_ARCH_LIST=arch_list``."""
    return set(wrapper.torch_arch_flags(arch_list))


def arch_list_of(target: Target) -> str:
    """The list torch compiles for: the project's own ``TORCH_CUDA_ARCH_LIST`` in build-env, else the cell's."""
    return target.project.build_env.get("TORCH_CUDA_ARCH_LIST") or target.cell.arch_list


def wrapper_env(target: Target, python: str, script: str, next_nvcc: str, *, windows: bool = False) -> dict[str, str]:
    """The variables that put the wrapper (``script``, run by ``python``, as the build sees both) in front of
    ``next_nvcc`` (the nvcc the build would run: nvcc, a compile cache in front of it, ``nvcc-module-anchor``).
    Empty for a CPU build."""
    if target.cpu:
        return {}
    quote = _windows_quote if windows else shlex.quote
    return {"PYTORCH_NVCC": f"{quote(python)} -I {quote(script)}", "FARM_NVCC_NEXT": next_nvcc,
            "FARM_NVCC_ARCH_LIST": arch_list_of(target), "FARM_NVCC_ARCH_MODE": target.project.arch_flags}


def behind_wrapper(cache_env: Mapping[str, str], build_env: Mapping[str, str]) -> dict[str, str]:
    """A compile cache's variables for a build whose nvcc runs through the wrapper (``build_env``): the cache's nvcc
    front becomes the wrapper's next command, not ``PYTORCH_NVCC``: the wrapper stays in front, where it sees the
    project's flags before the cache hashes them (a refused compile never reaches the cache)."""
    env = dict(cache_env)
    if "PYTORCH_NVCC" in env and "FARM_NVCC_NEXT" in build_env:
        env["FARM_NVCC_NEXT"] = env.pop("PYTORCH_NVCC")
    return env


def _windows_quote(word: str) -> str:
    return f'"{word}"' if " " in word else word


# --- reading compile lines ----------------------------------------------------------------------------------


def nvcc_arch_flags(line: str) -> list[str] | None:
    """The architecture flags of an nvcc compile command line (``None``: the line is not one), each written as one
    ``-option=value`` word."""
    words = line.split()
    if not any(w.strip('"').removesuffix(".exe").endswith(NVCC_COMMANDS) for w in words[:5]) or "-c" not in words:
        return None
    return wrapper.find_flags(words).flags


#: How a printed nvcc command that runs through the wrapper starts: ninja's (``PYTORCH_NVCC``), or setuptools' own
#: compile through the toolkit folder whose ``bin/nvcc`` runs the wrapper (ci/nvcc/shim.py; on Windows setuptools
#: prints ``CUDA_HOME\\bin\\nvcc`` and Windows starts ``nvcc.exe``).
THROUGH_WRAPPER = ("nvcc/wrapper.py", "nvcc\\wrapper.py", "nvcc-front/bin/nvcc", "nvcc-front\\bin\\nvcc",
                   "nvcc-front\\bin\\nvcc.exe")


def through_wrapper(line: str) -> bool:
    """Whether a printed nvcc line runs through the farm's wrapper."""
    return any(w.strip('"').endswith(THROUGH_WRAPPER) for w in line.split()[:5])


def farms(flags: Iterable[str], arch_list: str) -> bool:
    """Whether ``flags`` make exactly the outputs ``TORCH_CUDA_ARCH_LIST=arch_list`` implies, as torch or CMake
    spells them (``--generate-code=arch=compute_90,code=[compute_90,sm_90]``: :func:`wrapper.gencode_pairs`), as the
    wrapper decides."""
    pairs = wrapper.gencode_pairs(flags)
    return pairs is not None and set(pairs) == torch_arch_flags(arch_list)


def _own(flags: list[str] | None, arch_list: str) -> list[str]:
    if not flags:
        return []
    return [] if farms(flags, arch_list) else list(dict.fromkeys(flags))


def own_arch_flags(line: str, arch_list: str) -> list[str]:
    """Every architecture flag on an nvcc compile line whose flags are not those ``TORCH_CUDA_ARCH_LIST=arch_list``
    implies: the project's own, which torch's are then not added to."""
    return _own(nvcc_arch_flags(line), arch_list)


def flags_in_output(output: str) -> list[str]:
    """Every architecture flag of the nvcc compile lines in a build's output (torch runs ``ninja -v``, which prints
    each finished command; setuptools without ninja prints each before running it), first seen first."""
    seen: dict[str, None] = {}
    for line in output.splitlines():
        for flag in nvcc_arch_flags(line) or ():
            seen.setdefault(flag)
    return list(seen)


# --- refusals -----------------------------------------------------------------------------------------------

#: The wrapper's refusal lines (``wrapper.OWN_FLAGS``, ``wrapper.NO_FLAGS``).
OWN_FLAGS = re.compile(r"cuda-ext-farm nvcc: own architecture flags: (?P<flags>.*?) \(the farm's list: "
                       r"(?P<list>[^)]*)\)")
NO_FLAGS = re.compile(r"cuda-ext-farm nvcc: no architecture flags: (?P<source>\S+) \(the farm's list: "
                      r"(?P<list>[^)]*)\)")


def own_arch_error(own: list[str], arch_list: str) -> UsageError:
    more = f" and {len(own) - 1} more" if len(own) > 1 else ""
    return UsageError("the project passes its own CUDA architecture flags to nvcc, so torch ignores "
                      "TORCH_CUDA_ARCH_LIST (the farm's architectures)", f"{own[0]}{more}",
                      f'set {KEY} = "replace" in [tool.cuda-ext-farm] to build the farm\'s list ({arch_list} here: '
                      f'cuda-archs or --arch-list choose it) in their place, or {KEY} = "keep" to build the '
                      "project's own list; or drop the flags from the extension's extra_compile_args (setup.py). "
                      "The build was stopped at its first nvcc")


def no_arch_error(source: str, arch_list: str) -> UsageError:
    return UsageError("an nvcc compile has no architecture flag, so nvcc would build for its default architecture "
                      "only: torch adds the farm's TORCH_CUDA_ARCH_LIST flags only when no nvcc flag of the "
                      "extension contains the letters 'arch' (-Xcompiler -march=native is enough to drop them)",
                      source, f'set {KEY} = "replace" in [tool.cuda-ext-farm] to give every compile the farm\'s list '
                      f"({arch_list} here), or remove the flag that contains 'arch' from the extension's nvcc "
                      "extra_compile_args. The build was stopped at its first nvcc")


def refusal(output: str, sources: Iterable[str] = ()) -> FarmError | None:
    """The farm's error for the wrapper's refusal in ``output`` (None: it refused nothing); ``sources``: the
    folders the build compiled in (the farm's copy, a container's /project), written relative to them."""
    own = OWN_FLAGS.search(output)
    if own is not None:
        return own_arch_error(own["flags"].split(), own["list"])
    none = NO_FLAGS.search(output)
    if none is None:
        return None
    source = none["source"]
    for folder in sources:
        source = source.removeprefix(folder.rstrip("/") + "/")
    return no_arch_error(source, none["list"])


def watch_output(target: Target, sources: Iterable[str] = ()) -> Callable[[str], FarmError | None] | None:
    """A watcher for the build's output lines (None: a CPU build): the wrapper's refusal stops the build, and so
    does a compile that ran nvcc without the wrapper (setuptools without ninja prints each command before running
    it) with flags of the project's own, unless the project keeps them. ``sources``: as :func:`refusal`'s."""
    if target.cpu:
        return None
    arch_list, mode = arch_list_of(target), target.project.arch_flags
    folders = tuple(sources)

    def watch(line: str) -> FarmError | None:
        refused = refusal(line, folders)
        if refused is not None or mode == "keep" or through_wrapper(line):
            return refused
        own = own_arch_flags(line, arch_list)
        if own and mode == "replace":
            return UsageError(f'{KEY} = "replace" needs torch\'s ninja build: this one runs nvcc itself, where the '
                              "farm cannot replace the flags", own[0],
                              "let BuildExtension use ninja (use_ninja=True, the default), or drop the flags from "
                              "the extension's extra_compile_args")
        return own_arch_error(own, arch_list) if own else None

    return watch


# --- what the audit holds the wheel to ----------------------------------------------------------------------

#: nvcc's ``-arch`` values that name no architecture: a list of the toolkit's own (``all``, ``all-major``) or the
#: build machine's GPUs (``native``).
TOOLKIT_LISTS = ("all", "all-major")
NATIVE = "native"


class HeldArchs(NamedTuple):
    """What nvcc flags put in an object: SASS per architecture (``9.0a``) and the PTX a newer GPU can JIT (the
    newest asked for; empty: none). Not a ``TORCH_CUDA_ARCH_LIST``: that grammar has no PTX without its SASS
    (``9.0+PTX`` is both), which the wrapper's replacement of ``9.0+PTX`` for a project that asks for ``sm_90a``
    emits (SASS ``sm_90a``, PTX ``compute_90``)."""

    sass: tuple[str, ...]
    ptx: str


def archs_from_flags(flags: Iterable[str], cell: Cell) -> HeldArchs:
    """The SASS and PTX that nvcc ``flags`` of ``cell``'s toolkit ask for (``sm_90a`` -> ``9.0a``). ``-arch=sm_XY``
    alone means SASS and PTX of XY, as nvcc reads it; ``-arch=all``/``all-major``: what that toolkit's nvcc builds for
    them (:func:`toolkit_list`); ``-arch=native`` is refused (:func:`native_error`)."""
    flags = list(flags)
    sass: set[str] = set()
    ptx: set[str] = set()
    with_code = any(f.startswith(("-code=", "--gpu-code=")) for f in flags)
    for flag in flags:
        option, _, value = flag.partition("=")
        if option == "-gencode":
            value = value.partition("code=")[2]  # arch=compute_XY names the virtual architecture, not an output
        elif option in ("-arch", "--gpu-architecture"):
            if value == NATIVE:
                raise native_error(flag, cell.arch_list)
            if value in TOOLKIT_LISTS:
                listed = toolkit_list(value, cell.cuda, flag)
                sass.update(listed.sass)
                ptx.add(listed.ptx)
                continue
            if with_code:
                continue
            value = f"{value},compute_{value[3:]}" if value.startswith("sm_") else value
        for kind, num in re.findall(r"(sm|compute)_(\d+[af]?)", value):
            (sass if kind == "sm" else ptx).add(_dotted(num))
    return HeldArchs(tuple(sorted(sass, key=_arch_key)), max(ptx, key=_arch_key) if ptx else "")


def toolkit_list(value: str, cuda: str, flag: str = "") -> HeldArchs:
    """What nvcc of CUDA ``cuda`` builds for ``-arch=all`` (SASS of every architecture it compiles, the list of
    ``nvcc --list-gpu-code``) or ``-arch=all-major`` (SASS of the oldest and of each ``X.0``), both with PTX of the
    newest ``X.0`` (CUDA 13.0: 12.0, not 12.1), read from the farm's table of each toolkit's architectures
    (ci/universe/archs.py), which a test holds to a real nvcc: the audit of a container build has no nvcc of that
    toolkit on the host to ask."""
    known = archs.toolkit_archs(cuda)
    if known is None:
        raise UsageError(f"the farm does not know which architectures CUDA {cuda}'s nvcc builds for the project's "
                         f"nvcc flag ({KEY} = \"keep\" keeps it as written)", flag or f"-arch={value}",
                         "name the architectures in setup.py (-gencode=arch=compute_XY,code=sm_XY for each), or set "
                         f'{KEY} = "replace" in [tool.cuda-ext-farm] to build the farm\'s list')
    majors = tuple(a for a in known if a.endswith(".0"))
    sass = known if value == "all" else tuple(dict.fromkeys((known[0], *majors)))
    return HeldArchs(sass, majors[-1] if majors else known[-1])


def native_error(flag: str, arch_list: str) -> UsageError:
    """``-arch=native`` kept: nvcc builds for the GPUs of the machine that compiles (on a builder without one, for
    its default architecture), which no other build of the same sources reproduces."""
    return UsageError(f'{KEY} = "keep" keeps an nvcc flag that builds for the GPU of the machine that compiles '
                      "(on a builder without one, nvcc's default architecture), which no other build reproduces",
                      flag, "name the architectures in setup.py (-gencode=arch=compute_XY,code=sm_XY for each, or "
                      f'-arch=all-major), or set {KEY} = "replace" in [tool.cuda-ext-farm] to build the farm\'s list '
                      f"({arch_list} here: cuda-archs or --arch-list choose it)")


def _dotted(num: str) -> str:
    digits, suffix = num.rstrip("af"), num[len(num.rstrip("af")):]
    return f"{digits[:-1]}.{digits[-1]}{suffix}"


def _arch_key(arch: str) -> tuple[int, int, str]:
    major, _, minor = arch.partition(".")
    return int(major), int(minor.rstrip("af") or 0), minor[len(minor.rstrip("af")):]


#: How the wrapper's line for a compile it let through (``wrapper.COMPILED``) starts, and where its flags end.
COMPILED_START = wrapper.COMPILED.partition("{")[0]
APPENDED = "; NVCC_APPEND_FLAGS: "


def emitted_flags(output: str) -> list[str]:
    """Every architecture flag nvcc ran with, read from the wrapper's line for each compile it let through
    (:data:`wrapper.COMPILED`): those it gave nvcc on the command line (in ``replace`` the farm's, not the
    project's that ninja's line shows) and those nvcc reads from ``NVCC_APPEND_FLAGS``, which no printed command
    shows. First seen first."""
    seen: dict[str, None] = {}
    for line in output.splitlines():
        start = line.find(COMPILED_START)
        if start < 0 or APPENDED not in line:
            continue
        head, _, appended = line[start + len(COMPILED_START):].partition(APPENDED)
        given = head.partition(": ")[2].split()
        for flag in (*wrapper.find_flags(given).flags, *wrapper.find_flags(appended.split()).flags):
            seen.setdefault(flag)
    return list(seen)


def _holding(target: Target, held: HeldArchs) -> Target:
    """``target`` whose wheel must hold ``held``: set as they are, not through an arch list's grammar or its range
    check (nvcc already compiled them; a ``-arch=all`` list has 8.8, which torch's extension builder refuses)."""
    if not held.sass and not held.ptx:
        return target
    return dataclasses.replace(target, cell=dataclasses.replace(target.cell, sass_archs=held.sass, ptx_arch=held.ptx))


#: The architecture flags of the last build of a work folder that printed compile lines (:func:`remember_flags`).
#: The folder is emptied when the build's key changes (ci/builds/build_key.py), so what it holds is this key's.
FLAGS_FILE = "arch-flags.txt"
KEPT = "cuda-ext-farm: architecture flags of the kept work folder's compiles (none ran in this build): "


def remember_flags(output: str, work: Path) -> str:
    """Keep the architecture flags of a build's compile lines in ``work`` (:data:`FLAGS_FILE`) for a later build of
    the same folder whose ninja has no work and prints none; for such a build, the line that names the kept ones
    (:data:`KEPT`, read by :func:`audited_target`), which the build's output gains. Empty: nothing to add."""
    seen = list(dict.fromkeys([*flags_in_output(output), *emitted_flags(output)]))
    kept = work / FLAGS_FILE
    if seen:
        fsutil.atomic_write_text(kept, " ".join(seen) + "\n")
        return ""
    try:
        flags = kept.read_text().split()
    except OSError:
        return ""
    return KEPT + " ".join(flags) if flags else ""


def kept_flags(output: str) -> list[str]:
    """The flags a :data:`KEPT` line of the build's output names (empty if none)."""
    for line in output.splitlines():
        if line.startswith(KEPT):
            return line[len(KEPT):].split()
    return []


def audited_target(target: Target, output: str) -> Target:
    """``target`` with the architectures its wheel must hold, those nvcc was given: the farm's list; in
    ``replace``, what the wrapper emits (:func:`wrapper.replacement`: an architecture-specific SASS the project asked
    for in place of the plain one, the PTX plain); in ``keep``, every architecture flag of the compile lines in the
    build's ``output`` and of the wrapper's lines (:func:`emitted_flags`), the project's and torch's alike
    (unchanged when none was printed). A kept ``-arch=native`` is refused here (:func:`native_error`)."""
    mode = target.project.arch_flags
    if target.cpu or mode == "refuse":
        return target
    seen = list(dict.fromkeys([*flags_in_output(output), *emitted_flags(output)])) or kept_flags(output)
    if mode == "keep":
        return _holding(target, archs_from_flags(seen, target.cell)) if seen else target
    own = [f for f in seen if f not in torch_arch_flags(target.cell.arch_list)]
    if not wrapper.specific_targets(own):
        return target
    return _holding(target, archs_from_flags(wrapper.replacement(target.cell.arch_list, own), target.cell))


def whose_list(target: Target) -> str:
    """What the build report says of the architectures' origin."""
    return {"refuse": "the farm's", "replace": "the farm's, in place of the project's own",
            "keep": "the project's own (setup.py)"}[target.project.arch_flags]


def arch_flags_advice(output: str, target: Target) -> str:
    """What a failed ``sass``/``ptx`` check adds when the build's nvcc compiles were not given the flags the cell's
    list implies: the flags of the project's own and what to do, or that build-env's list replaced the farm's (in
    ``replace`` too: the wrapper builds that list). Empty: nothing to add (no nvcc line in the output, or exactly
    the cell's flags, or ``keep``: the audit holds the wheel to the project's flags)."""
    seen = flags_in_output(output)
    cell = target.cell.arch_list
    listed = target.project.build_env.get("TORCH_CUDA_ARCH_LIST")
    if target.cpu or not seen or target.project.arch_flags == "keep":
        return ""
    replaced = target.project.arch_flags == "replace" and listed and listed != cell
    if replaced or (listed and farms(seen, listed) and torch_arch_flags(listed) != torch_arch_flags(cell)):
        return (f"nvcc compiled for TORCH_CUDA_ARCH_LIST={listed}, which build-env of [tool.cuda-ext-farm] sets: "
                f"remove it there and let the farm's list apply ({cell} here: cuda-archs in [tool.cuda-ext-farm] or "
                "--arch-list choose it)")
    if farms(seen, cell) or target.project.arch_flags != "refuse":
        return ""
    own = _own(seen, listed or cell)
    also = " and remove TORCH_CUDA_ARCH_LIST from build-env of [tool.cuda-ext-farm]" if listed else ""
    return (f"nvcc compiled with architecture flags of the project's own: {' '.join(own)}: set {KEY} = \"replace\" "
            f"in [tool.cuda-ext-farm]{also}, or drop them from the extension's extra_compile_args (setup.py), and "
            f"let the farm's list apply ({cell} here: cuda-archs in [tool.cuda-ext-farm] or --arch-list choose it)")


def read_log(log_file: Path) -> str:
    """The build output kept in ``log_file`` (``build-output.log``; empty if it cannot be read)."""
    try:
        return log_file.read_text(errors="replace")
    except OSError:
        return ""
