"""In front of nvcc in every CUDA build the farm runs: the architecture flags of each compile, held against the
farm's list.

torch turns ``TORCH_CUDA_ARCH_LIST`` (the farm's list: ``--arch-list``, ``cuda-archs``) into ``-gencode`` flags,
unless the project passes architecture flags of its own (``extra_compile_args["nvcc"]``), or any nvcc flag merely
contains the letters ``arch`` (``-Xcompiler -march=native``): then torch adds none, and nvcc compiles for what the
project says, or for its own default architecture. ninja prints a command only when it finished, so such a build
would compile for a long time before anyone could read its flags. torch writes ``PYTORCH_NVCC`` verbatim into
``build.ninja`` as its nvcc, so the farm sets it to ``python -I <this file>`` on every route (host, the aarch64
cross build, containers, Windows), and this script decides at each compile, before nvcc runs, by the project key
``project-arch-flags``:

* ``refuse`` (the default): a compile whose architecture flags are not exactly the farm's fails at once with one
  line (:data:`OWN_FLAGS`) the farm reads and turns into its error;
* ``replace``: the project's ``-gencode``/``--generate-code``/``-arch``/``-code`` flags are removed and the farm's
  applied; an architecture-specific target the project asks for (``sm_90a``, ``sm_100f``) takes the place of the
  farm's plain one for that architecture, since such kernels compile for nothing else;
* ``keep``: the project's own list is built (the audit then checks the wheel against that list).

Each compile it lets through prints one line (:data:`COMPILED`): the architecture flags nvcc runs with and the
flags nvcc reads from ``NVCC_APPEND_FLAGS`` (the project's and the farm's), which no printed command shows.

A compile with no architecture flag at all is refused in ``refuse`` and ``keep`` (:data:`NO_FLAGS`; nvcc would
compile for its default architecture) and given the farm's list in ``replace``. Anything that is not a compile
(``--version``, a device link) runs unchanged, and so does a compile with exactly the farm's flags: the objects
are those nvcc alone makes.

Run as ``python -I wrapper.py <nvcc arguments>``, standard library only (it runs inside containers and on
Windows). Environment: ``FARM_NVCC_NEXT``, the command to run (nvcc, a compile cache in front of it, or
``nvcc-module-anchor``), a shell-quoted word list on POSIX, one path on Windows; ``FARM_NVCC_ARCH_LIST``, the
list the farm's flags come from; ``FARM_NVCC_ARCH_MODE``, the mode (unset: ``refuse``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import NamedTuple

MODES = ("refuse", "replace", "keep")
#: nvcc's architecture options; ``-gencode``'s long form is written as ``-gencode``.
OPTIONS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code")
#: The variables nvcc reads flags from besides its command line.
FLAG_VARIABLES = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
#: The line a refused compile prints (then the script exits 3: nvcc never ran).
OWN_FLAGS = "cuda-ext-farm nvcc: own architecture flags: {flags} (the farm's list: {arch_list})"
NO_FLAGS = "cuda-ext-farm nvcc: no architecture flags: {source} (the farm's list: {arch_list})"
REFUSED = 3
#: The line each compile it lets through prints (ninja shows it in the build's log): the architecture flags nvcc
#: gets and the flags it reads from NVCC_APPEND_FLAGS, which no compile line would show otherwise.
COMPILED = "cuda-ext-farm nvcc: {source}: {flags}; NVCC_APPEND_FLAGS: {appended}"
#: An architecture-specific target: ``90a`` (one GPU) or ``100f`` (a family, CUDA 12.9 and newer).
SPECIFIC = re.compile(r"(?:sm|compute)_(\d+)([af])\b")


def torch_arch_flags(arch_list: str) -> list[str]:
    """The ``-gencode`` flags torch's extension builder gives nvcc for ``TORCH_CUDA_ARCH_LIST=arch_list``, in its
    order (``sorted(set(...))``)."""
    flags = set()
    for item in arch_list.replace(",", ";").replace(" ", ";").split(";"):
        base = item.strip().removesuffix("+PTX")
        if not base:
            continue
        num = base.replace(".", "")
        flags.add(f"-gencode=arch=compute_{num},code=sm_{num}")
        if item.strip().endswith("+PTX"):
            flags.add(f"-gencode=arch=compute_{num},code=compute_{num}")
    return sorted(flags)


class Found(NamedTuple):
    """The architecture flags of an argument list, each as one ``-option=value`` word, and the indexes of the
    words that carried them."""

    flags: list[str]
    positions: list[int]


def find_flags(args: Sequence[str]) -> Found:
    """The architecture flags in ``args`` (``-gencode arch=...`` as two words or ``-gencode=arch=...`` as one)."""
    flags: list[str] = []
    positions: list[int] = []
    skip = False
    for i, word in enumerate(args):
        if skip:
            skip = False
            continue
        option, equals, value = word.partition("=")
        if option not in OPTIONS:
            continue
        positions.append(i)
        if not equals and i + 1 < len(args):
            value = args[i + 1]
            positions.append(i + 1)
            skip = True
        flags.append(f"{'-gencode' if option == '--generate-code' else option}={value}")
    return Found(flags, positions)


def is_compile(args: Sequence[str]) -> bool:
    """A compile of a CUDA source (``-c``, or ninja's ``--generate-dependencies-with-compile``), not a device link
    or a query."""
    return "-c" in args or "--compile" in args


def specific_targets(flags: Iterable[str]) -> dict[str, str]:
    """The architecture-specific targets among ``flags``: ``{"90": "90a"}`` for ``sm_90a``."""
    return {m.group(1): m.group(1) + m.group(2) for flag in flags for m in SPECIFIC.finditer(flag)}


def replacement(arch_list: str, own: Iterable[str]) -> list[str]:
    """The farm's flags for ``arch_list``, each architecture the project asked an architecture-specific target of
    compiled for that target instead (SASS; PTX of a specific target runs on no other GPU, so PTX stays plain)."""
    specific = specific_targets(own)
    flags = []
    for flag in torch_arch_flags(arch_list):
        match = re.fullmatch(r"-gencode=arch=compute_(\d+),code=sm_(\d+)", flag)
        if match and match.group(1) in specific:
            num = specific[match.group(1)]
            flag = f"-gencode=arch=compute_{num},code=sm_{num}"
        flags.append(flag)
    return flags


def source_of(args: Sequence[str]) -> str:
    return next((a for a in args if a.endswith((".cu", ".cpp", ".cc", ".c"))), "?")


class Decision(NamedTuple):
    """What to run (the arguments, the flag variables' values), or the line that refuses the compile."""

    args: list[str]
    env: dict[str, str]
    refusal: str = ""


def decide(args: Sequence[str], env: dict[str, str], mode: str, arch_list: str) -> Decision:
    """The arguments nvcc runs with under ``mode``, given the farm's ``arch_list`` (empty: no check)."""
    unchanged = Decision(list(args), {})
    if not arch_list or not is_compile(args):
        return unchanged
    found = find_flags(args)
    in_env = {name: find_flags(shlex.split(env.get(name, ""))) for name in FLAG_VARIABLES}
    own = [*found.flags, *(f for name in FLAG_VARIABLES for f in in_env[name].flags)]
    if sorted(set(own)) == torch_arch_flags(arch_list) or (mode == "keep" and own):
        return unchanged
    if mode == "replace":
        kept = [a for i, a in enumerate(args) if i not in set(found.positions)]
        cleaned = {name: shlex.join(w for i, w in enumerate(shlex.split(env[name])) if i not in set(f.positions))
                   for name, f in in_env.items() if f.flags}
        return Decision([*kept, *replacement(arch_list, own)], cleaned)
    if not own:
        return Decision([], {}, NO_FLAGS.format(source=source_of(args), arch_list=arch_list))
    return Decision([], {}, OWN_FLAGS.format(flags=" ".join(dict.fromkeys(own)), arch_list=arch_list))


def next_command(value: str) -> list[str]:
    if not value:
        return ["nvcc"]
    return [value] if os.name == "nt" else shlex.split(value)


def main(argv: Sequence[str]) -> int:
    env = dict(os.environ)
    mode = env.get("FARM_NVCC_ARCH_MODE", "refuse") or "refuse"
    decision = decide(argv, env, mode, env.get("FARM_NVCC_ARCH_LIST", ""))
    if decision.refusal:
        print(decision.refusal, file=sys.stderr, flush=True)
        return REFUSED
    if env.get("FARM_NVCC_ARCH_LIST") and is_compile(argv):
        appended = decision.env.get("NVCC_APPEND_FLAGS", env.get("NVCC_APPEND_FLAGS", ""))
        print(COMPILED.format(source=source_of(argv), flags=" ".join(find_flags(decision.args).flags) or "none",
                              appended=appended or "none"), file=sys.stderr, flush=True)
    command = [*next_command(env.get("FARM_NVCC_NEXT", "")), *decision.args]
    if os.name != "nt":
        os.execvpe(command[0], command, {**env, **decision.env})  # nvcc in this process: ninja's signals reach it
    return subprocess.call(command, env={**env, **decision.env})  # Windows: exec would end this process first


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
