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

Before anything else it **folds** into the argument list what nvcc would read from its environment
(:func:`fold`): ``NVCC_PREPEND_FLAGS`` before the arguments, ``NVCC_APPEND_FLAGS`` after them (split as nvcc splits
them: :func:`split_flags`), and ``NVCC_CCBIN`` as ``-ccbin`` when no ``-ccbin``/``--compiler-bindir`` is given,
and removes those variables from the next command's environment. nvcc compiles exactly what it compiled before
(the same sub-commands, checked with ``nvcc --dryrun`` against nvcc 13.0), but a compile cache behind this script
(ccache, sccache) hashes the command line and never those variables: folded, the farm's flags (``-objtemp``,
``-frandom-seed``, ``--compress-mode``), the project's ``build-env`` and the caller's shell are part of every
cache key. The architecture decision below works on the folded list.

Each compile it lets through prints one line (:data:`COMPILED`): the architecture flags nvcc runs with and the
flags that came from ``NVCC_APPEND_FLAGS`` (the project's and the farm's), which no printed command shows.

A compile with no architecture flag at all is refused in ``refuse`` and ``keep`` (:data:`NO_FLAGS`; nvcc would
compile for its default architecture) and given the farm's list in ``replace``. Anything that is not a compile
(``--version``, a device link, CMake's probes of the compiler) runs unchanged, and so does a compile with exactly
the farm's flags, as torch or CMake writes them (:func:`gencode_pairs`): the objects are those nvcc alone makes.

Run as ``python -I wrapper.py <nvcc arguments>``, standard library only (it runs inside containers and on
Windows). Environment: ``FARM_NVCC_NEXT``, the command to run (nvcc, a compile cache in front of it, or
``nvcc-module-anchor``), a shell-quoted word list on POSIX, one path on Windows; ``FARM_NVCC_ARCH_LIST``, the
list the farm's flags come from; ``FARM_NVCC_ARCH_MODE``, the mode (unset: ``refuse``); the variables of
:data:`FOLDED`. A flag variable with an unbalanced double quote stops the compile with one line
(:data:`UNBALANCED`; nvcc itself would say only ``Stray '"' character``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import NamedTuple

MODES = ("refuse", "replace", "keep")
#: nvcc's architecture options; ``-gencode``'s long form is written as ``-gencode``.
OPTIONS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code")
#: The variables nvcc reads flags from besides its command line: put before its arguments, and after them.
PREPEND, APPEND = "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"
FLAG_VARIABLES = (PREPEND, APPEND)
#: nvcc's host compiler when no ``-ccbin``/``--compiler-bindir`` is given (a path, taken verbatim).
CCBIN = "NVCC_CCBIN"
CCBIN_OPTIONS = ("-ccbin", "--compiler-bindir")
#: Everything :func:`fold` moves onto the command line (and out of the next command's environment).
FOLDED = (*FLAG_VARIABLES, CCBIN)
#: The line an unbalanced quote in a flag variable prints (then the script exits :data:`BAD_VARIABLE`).
UNBALANCED = ("cuda-ext-farm nvcc: error: {name} has an unbalanced double quote ({value}): close it, or write a "
              "flag with spaces as \"-Xcompiler=-a -b\" (nvcc splits {name} at spaces outside double quotes)")
BAD_VARIABLE = 2
#: The line a refused compile prints (then the script exits 3: nvcc never ran).
OWN_FLAGS = "cuda-ext-farm nvcc: own architecture flags: {flags} (the farm's list: {arch_list})"
NO_FLAGS = "cuda-ext-farm nvcc: no architecture flags: {source} (the farm's list: {arch_list})"
REFUSED = 3
#: The line each compile it lets through prints (ninja shows it in the build's log): the architecture flags nvcc
#: gets and the flags it reads from NVCC_APPEND_FLAGS, which no compile line would show otherwise.
COMPILED = "cuda-ext-farm nvcc: {source}: {flags}; NVCC_APPEND_FLAGS: {appended}"
#: An architecture-specific target: ``90a`` (one GPU) or ``100f`` (a family, CUDA 12.9 and newer).
SPECIFIC = re.compile(r"(?:sm|compute)_(\d+)([af])\b")
#: A ``-gencode`` flag (as :func:`find_flags` writes it) of one virtual architecture and its outputs.
GENCODE = re.compile(r"-gencode=arch=(compute_\w+),code=\[?([\w,]+)\]?")


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


class UnbalancedQuote(ValueError):
    """A flag variable whose double quotes do not pair up (nvcc refuses it: ``Stray '"' character``)."""

    def __init__(self, name: str, value: str) -> None:
        super().__init__(UNBALANCED.format(name=name, value=value))
        self.name, self.value = name, value


def split_flags(value: str, name: str = APPEND) -> list[str]:
    """The words nvcc makes of a flag variable's ``value``: split at spaces and tabs outside double quotes, each
    word kept as written (quotes and backslashes too: nvcc reads such a word on its command line exactly as it read
    it in the variable); inside quotes ``\\"`` does not close them. Raises :class:`UnbalancedQuote` (``name``: the
    variable, for its message)."""
    words: list[str] = []
    word: str | None = None
    quoted = False
    i = 0
    while i < len(value):
        char = value[i]
        if quoted and value.startswith('\\"', i):
            char, i = '\\"', i + 1
        elif char == '"':
            quoted = not quoted
        elif char in " \t" and not quoted:
            if word is not None:
                words.append(word)
            word, i = None, i + 1
            continue
        word, i = (word or "") + char, i + 1
    if quoted:
        raise UnbalancedQuote(name, value)
    return [*words, word] if word is not None else words


def has_ccbin(args: Sequence[str]) -> bool:
    return any(a in CCBIN_OPTIONS or a.startswith(tuple(f"{o}=" for o in CCBIN_OPTIONS)) for a in args)


class Folded(NamedTuple):
    """An nvcc argument list with its environment's flags folded in, and where ``NVCC_APPEND_FLAGS``' words are."""

    args: list[str]
    appended: range


def fold(args: Sequence[str], env: Mapping[str, str]) -> Folded:
    """``args`` as nvcc would run them with ``env``'s :data:`FOLDED` variables: ``NVCC_PREPEND_FLAGS`` first,
    ``NVCC_APPEND_FLAGS`` last, ``-ccbin NVCC_CCBIN`` after them where no host compiler option is given."""
    before = split_flags(env.get(PREPEND, ""), PREPEND)
    after = split_flags(env.get(APPEND, ""), APPEND)
    folded = [*before, *args, *after]
    start = len(before) + len(args)
    if env.get(CCBIN) and not has_ccbin(folded):
        folded += ["-ccbin", env[CCBIN]]
    return Folded(folded, range(start, start + len(after)))


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


def cmake_probe(args: Sequence[str], cwd: str) -> bool:
    """One of CMake's probes of the compiler, compiled with CMake's default architecture before the project's
    flags exist: the compiler's identification (its source in ``CMakeFiles/<version>/CompilerIdCUDA``) and every
    ``try_compile`` (run in ``CMakeFiles/CMakeScratch/TryCompile-*``, ``CMakeFiles/CMakeTmp`` before CMake 3.25),
    whose source may be one of CMake's own modules (``CMakeCUDACompilerABI.cu``): refused, CMake would take the
    toolkit's library folder from no link line, and its links would miss ``-lcudadevrt``."""
    return any("/CMakeFiles/" in f"{path}/".replace("\\", "/") for path in (source_of(args), cwd))


def is_compile(args: Sequence[str], cwd: str = "") -> bool:
    """A compile of a project's CUDA source (``-c``, or ninja's ``--generate-dependencies-with-compile``), not a
    device link, a query or one of CMake's probes (:func:`cmake_probe`; ``cwd``: the folder nvcc runs in)."""
    return ("-c" in args or "--compile" in args) and not cmake_probe(args, cwd)


def gencode_pairs(flags: Iterable[str]) -> list[str] | None:
    """``-gencode`` flags written as torch writes them, one per output (``-gencode=arch=compute_90,code=sm_90``),
    sorted. CMake writes its architectures (``CMAKE_CUDA_ARCHITECTURES``, ``CUDAARCHS``) as
    ``--generate-code=arch=compute_90,code=[compute_90,sm_90]``, others quote the list (``"code=sm_90,compute_90"``):
    nvcc compiles the same for each. ``None`` where a flag is not a ``-gencode`` (``-arch``, ``-code``)."""
    pairs: set[str] = set()
    for flag in flags:
        match = GENCODE.fullmatch(flag.replace('"', ""))
        if match is None:
            return None
        pairs.update(f"-gencode=arch={match.group(1)},code={code}" for code in match.group(2).split(",") if code)
    return sorted(pairs)


def cmake_architectures(arch_list: str) -> str:
    """``CMAKE_CUDA_ARCHITECTURES`` (the ``CUDAARCHS`` variable CMake initialises it from) for the farm's list,
    in the list's order: ``9.0`` is SASS only (``90-real``), ``9.0+PTX`` SASS and PTX (``90``); CMake's flags for
    it hold exactly :func:`torch_arch_flags`' outputs (:func:`gencode_pairs`)."""
    items = [i.strip() for i in arch_list.replace(",", ";").replace(" ", ";").split(";") if i.strip()]
    names = [i.removesuffix("+PTX").replace(".", "") + ("" if i.endswith("+PTX") else "-real") for i in items]
    return ";".join(dict.fromkeys(names))


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
    """What to run (the arguments), or the line that refuses the compile; ``dropped``: the indexes of the input's
    words left out (``replace`` takes the project's architecture flags out)."""

    args: list[str]
    refusal: str = ""
    dropped: frozenset[int] = frozenset()


def decide(args: Sequence[str], mode: str, arch_list: str, cwd: str = "") -> Decision:
    """The arguments nvcc runs with under ``mode``, given the farm's ``arch_list`` (empty: no check); ``args``:
    folded (:func:`fold`), so flags from the environment count as the project's own too; ``cwd``: the folder nvcc
    runs in. The farm's outputs as any spelling writes them (:func:`gencode_pairs`) run unchanged."""
    unchanged = Decision(list(args))
    if not arch_list or not is_compile(args, cwd):
        return unchanged
    found = find_flags(args)
    if gencode_pairs(found.flags) == torch_arch_flags(arch_list) or (mode == "keep" and found.flags):
        return unchanged
    if mode == "replace":
        dropped = frozenset(found.positions)
        kept = [a for i, a in enumerate(args) if i not in dropped]
        return Decision([*kept, *replacement(arch_list, found.flags)], dropped=dropped)
    if not found.flags:
        return Decision([], NO_FLAGS.format(source=source_of(args), arch_list=arch_list))
    return Decision([], OWN_FLAGS.format(flags=" ".join(dict.fromkeys(found.flags)), arch_list=arch_list))


def next_command(value: str) -> list[str]:
    if not value:
        return ["nvcc"]
    return [value] if os.name == "nt" else shlex.split(value)


def admission() -> ModuleType:
    """The ``admission`` package beside this file (run as ``python -I wrapper.py``, the farm's package is not
    importable): loaded by its path, and registered before it runs so that its relative imports resolve."""
    try:
        from ci.nvcc import admission as module
    except ImportError:
        folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "admission")
        spec = importlib.util.spec_from_file_location("farm_nvcc_admission", os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str]) -> int:
    env = dict(os.environ)
    try:
        folded = fold(argv, env)
    except UnbalancedQuote as exc:
        print(exc, file=sys.stderr, flush=True)
        return BAD_VARIABLE
    mode = env.get("FARM_NVCC_ARCH_MODE", "refuse") or "refuse"
    cwd = os.getcwd()
    decision = decide(folded.args, mode, env.get("FARM_NVCC_ARCH_LIST", ""), cwd)
    if decision.refusal:
        print(decision.refusal, file=sys.stderr, flush=True)
        return REFUSED
    if env.get("FARM_NVCC_ARCH_LIST") and is_compile(folded.args, cwd):
        appended = " ".join(folded.args[i] for i in folded.appended if i not in decision.dropped)
        print(COMPILED.format(source=source_of(folded.args), flags=" ".join(find_flags(decision.args).flags) or
                              "none", appended=appended or "none"), file=sys.stderr, flush=True)
    command = [*next_command(env.get("FARM_NVCC_NEXT", "")), *decision.args]
    for name in FOLDED:  # on the command line now: nvcc must not read them a second time
        env.pop(name, None)
    env["FARM_INSIDE_NVCC"] = "1"  # its host compiler (-ccbin $CC: ci/nvcc/host_front.py) runs as part of it
    if env.get("FARM_COMPILE_RECORD") and is_compile(decision.args, cwd):  # admitted and measured (the package)
        flags = find_flags(decision.args).flags
        # counted as torch writes them (one output a flag), as the plan counts them: CMake's
        # code=[compute_90,sm_90] is two
        archs = len(gencode_pairs(flags) or set(flags)) or 1
        return int(admission().run(command, env, source_of(decision.args), archs))
    threads = env.get("FARM_NVCC_THREADS", "")
    if threads.isdigit() and is_compile(decision.args, cwd):  # develop: the plan's --threads without a record
        command = admission().need.with_threads(command, int(threads))
    if os.name != "nt":
        os.execvpe(command[0], command, env)  # nvcc in this process: ninja's signals reach it
    return subprocess.call(command, env=env)  # Windows: exec would end this process first


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
