"""Why a build failed, read from its own output: the cause class a failed build's last line names.

:func:`classify` is a pure function over the output the farm kept of the project's build (setup.py, the
compilers, the linker, pypa/build around them) and returns the :class:`Cause` the farm's ``FarmError`` line
shows: a network access (a build that downloads a prebuilt binary), an unknown or unsupported CUDA
architecture, a missing header (named as a submodule's when it lies under one that is not checked out), a
missing library, a compiler error (file and line), the build script asking for a GPU the builder does not have
(torch.cuda.is_available() is True in the farm's CUDA builds: ci/builds/cuda_available.py), a Python error in
the build script (file and line). An
output it does not recognise gives ``None``: the caller keeps its general line.

Classes are tried in that order: a download failure and an architecture refusal also end in a Python
traceback, and every compiler error ends in one (torch's ``Error compiling objects for extension``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ci.builds import arch_flags, project_source
from ci.errors import CommandFailed, FarmError

#: The project-side knob a network failure's advice names: ``build-env`` (``cpu-env`` in a ``--cpu`` build).
TABLE = "[tool.cuda-ext-farm]"


class Cause(NamedTuple):
    """One ``FarmError`` line's parts: what failed, the value that shows it, how to fix it."""

    what: str
    value: str
    fix: str


#: Messages of a network access that failed (urllib, requests, curl, getaddrinfo, sockets).
NETWORK = re.compile(
    r"urlopen error|Name or service not known|Temporary failure in name resolution|Connection refused|"
    r"Network is unreachable|No route to host|Could not resolve host|getaddrinfo failed|nodename nor servname|"
    r"Max retries exceeded with url|Failed to establish a new connection|Connection timed out|"
    r"NewConnectionError|ConnectionResetError|Connection reset by peer")
URL = re.compile(r"""(?:https?|ftp)://[^\s'"<>)\]]+""")
#: Links tools print to their own documentation (setuptools' and pip's deprecation notes).
DOC_LINK = re.compile(r"//(?:[\w-]+\.)*(?:pypa\.io|python\.org|readthedocs\.io)(?:/|$)|//github\.com/pypa/")
UNKNOWN_ARCH = re.compile(r"Unknown CUDA arch \(([^)]*)\)|Unsupported gpu architecture '([^']+)'|"
                          r"Unsupported gpu architecture")
#: gcc/clang (``file:line:col: fatal error: x.h: No such file or directory`` / ``'x.h' file not found``), nvcc's
#: EDG front end (``file(line): catastrophic error: cannot open source file "x.h"``), MSVC (C1083).
MISSING_HEADER = (
    re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? fatal error: (?P<header>[^:\n]+): No such file or "
               r"directory", re.MULTILINE),
    re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? fatal error: '(?P<header>[^'\n]+)' file not found",
               re.MULTILINE),
    re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\): catastrophic error: cannot open source file "
               r"\"(?P<header>[^\"\n]+)\"", re.MULTILINE),
    re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\): fatal error C1083: Cannot open include file: "
               r"'(?P<header>[^'\n]+)'", re.MULTILINE),
)
MISSING_LIBRARY = re.compile(r"cannot find -l(?P<name>[A-Za-z0-9_.+-]+)|"
                             r"LINK : fatal error LNK1181: cannot open input file '(?P<win>[^'\n]+)'")
COMPILER_ERROR = (
    # gcc/clang: "csrc/a.cpp:12:5: error: ..." (not the notes, warnings, or "In file included from")
    re.compile(r"^(?P<file>[^\s:][^:\n]*\.(?:c|cc|cpp|cxx|cu|cuh|h|hh|hpp|hxx|inl)):(?P<line>\d+):(?:\d+:)? "
               r"(?:fatal )?error: (?P<message>.+)$", re.MULTILINE),
    # nvcc's front end: "csrc/k.cu(12): error: ..." (also "error #20: ...")
    re.compile(r"^(?P<file>[^\s(][^(\n]*\.(?:cu|cuh|c|cc|cpp|cxx|h|hpp))\((?P<line>\d+)\): error(?: #\d+(?:-D)?)?: "
               r"(?P<message>.+)$", re.MULTILINE),
    # MSVC: "csrc\a.cpp(12): error C2065: ..."
    re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\)(?:: |\s*: )error (?P<message>C\d+: .+)$", re.MULTILINE),
)
#: A Python traceback's frame line.
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
#: The exception line that closes a traceback: ``ValueError: ...``, ``SyntaxError: ...``, ``ModuleNotFoundError``.
EXCEPTION = re.compile(r"^(?P<name>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)|SystemExit)"
                       r"(?::\s*(?P<message>.*))?$", re.MULTILINE)
#: What torch (and the CUDA runtime) say when asked for a device on a machine without one: a build script that asks
#: the GPU's capability, name or memory (after torch.cuda.is_available(), True in the farm's CUDA builds).
NO_GPU = re.compile(r"Found no NVIDIA driver on your system|No CUDA GPUs are available|"
                    r"no CUDA-capable device is detected|CUDA driver initialization failed")
#: pypa/build's advice after a failed backend: options of its own command line, which the farm does not take.
INNER_TIPS = re.compile(r"pass --env-dir and --sdist-extract-dir|build\.pypa\.io/en/stable/how-to/troubleshooting")
#: Variables a build script reads that usually switch between a download and a local build.
SWITCH_WORDS = ("FORCE", "BUILD", "LOCAL", "SKIP", "NO_DOWNLOAD", "SOURCE", "COMPILE", "PREBUILT", "OFFLINE")


def hidden(line: str) -> bool:
    """Whether an output line is an inner tool's advice the farm's user cannot follow (pypa/build's
    ``--env-dir`` tip): such a line is not echoed."""
    return bool(INNER_TIPS.search(line))


def _relative(path: str, source: str) -> str:
    path, source = path.strip().replace("\\", "/"), source.replace("\\", "/")  # MSVC writes C:\src\a.cpp
    for prefix in (source.rstrip("/") + "/", "./") if source else ("./",):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def _first(patterns: Sequence[re.Pattern[str]], output: str) -> re.Match[str] | None:
    found = [m for m in (p.search(output) for p in patterns) if m is not None]
    return min(found, key=lambda m: m.start()) if found else None


def switches(build_script: str) -> list[str]:
    """Environment variables the build script reads (``os.environ.get("X")``, ``os.getenv("X")``,
    ``os.environ["X"]``) whose names look like a download/build switch."""
    names = re.findall(r"""(?:environ\.get|getenv|environ)\s*[\[(]\s*['"]([A-Za-z_][A-Za-z0-9_]*)['"]""",
                       build_script)
    return [n for n in dict.fromkeys(names) if any(w in n.upper() for w in SWITCH_WORDS)
            and not n.upper().endswith(("_URL", "_PATH", "_DIR", "_HOME", "_ROOT"))]


def network(output: str, build_script: str, *, cpu: bool) -> Cause | None:
    matches = list(NETWORK.finditer(output))
    if not matches:
        return None
    last = matches[-1]  # the final exception says the most: <urlopen error [Errno -2] Name or service not known>
    line = output[output.rfind("\n", 0, last.start()) + 1:].split("\n", 1)[0].strip()
    # The address: a URL on the first failing line or the lines before it (the script announcing its download),
    # not a tool's link to its documentation.
    before = output[:matches[0].end()].splitlines()[-200:]
    urls = [u for text in before for u in URL.findall(text) if not DOC_LINK.search(u)]
    key = "cpu-env" if cpu else "build-env"
    named = switches(build_script)
    example = named[0] if named else "THE_PROJECTS_VARIABLE"
    hint = (f"the build script reads {', '.join(named)}: " if named else
            "projects that download a prebuilt binary usually have a variable that forces a local build (look "
            "for os.environ in setup.py); ")
    return Cause("the build tried to reach the network (a download during the build)",
                 f"{urls[-1] + ': ' if urls else ''}{line[:200]}",
                 f"{hint}set it in {key} of {TABLE}, e.g. {key} = {{ {example} = \"1\" }}, so the farm "
                 "compiles the project instead")


def architecture(output: str) -> Cause | None:
    # The last one: a traceback also shows the line that raised it (``Unknown CUDA arch ({arch})``).
    found = [m for m in UNKNOWN_ARCH.finditer(output) if "{" not in m.group(0)]
    if not found:
        return None
    match = found[-1]
    value = match.group(1) or match.group(2) or match.group(0)
    return Cause("the build was asked for a CUDA architecture its toolkit or torch does not know", value,
                 "pass --arch-list with architectures of the cell (the farm's matrix command lists them) or fix "
                 f"cuda-archs in {TABLE}; a -gencode or -arch flag in setup.py asks for one too: drop it and let "
                 "TORCH_CUDA_ARCH_LIST apply")


def header(output: str, source: str, empty_submodules: Sequence[str]) -> Cause | None:
    match = _first(MISSING_HEADER, output)
    if match is None:
        return None
    name = match.group("header").strip()
    where = f"{_relative(match.group('file'), source)}:{match.group('line')}"
    top = name.split("/")[0]
    for sub in empty_submodules:
        if top == sub.rstrip("/").split("/")[-1] or name.startswith(sub.rstrip("/") + "/") or top in sub.split("/"):
            return Cause("a header is missing: it lies in a git submodule that is not checked out",
                         f"{where}: {name} (submodule {sub})",
                         "run `git submodule update --init --recursive` in the project's folder, then build again")
    return Cause("a header is missing", f"{where}: {name}",
                 "add the folder that holds it to the extension's include_dirs (an absolute path: torch's ninja "
                 "compiles in build/), or install the library that provides it; a vendored library may be a git "
                 "submodule: git submodule update --init --recursive")


def library(output: str, linkable: Sequence[str]) -> Cause | None:
    match = MISSING_LIBRARY.search(output)
    if match is None:
        return None
    name = match.group("name") or match.group("win") or ""
    if name in linkable:
        return Cause("the linker cannot find a CUDA library", f"-l{name}",
                     f'add toolkit-libraries = ["{name}"] to {TABLE}: the farm then puts its pinned wheel on '
                     "the linker's path")
    cuda = f" (a CUDA library: add it to toolkit-libraries of {TABLE}; the farm links {', '.join(linkable)})" \
        if linkable else ""
    return Cause("the linker cannot find a library", f"-l{name}" if match.group("name") else name,
                 f"install it or add its folder to the extension's library_dirs{cuda}")


def compiler(output: str, source: str) -> Cause | None:
    match = _first(COMPILER_ERROR, output)
    if match is None:
        return None
    message = match.group("message").strip()
    return Cause("the compiler failed", f"{_relative(match.group('file'), source)}:{match.group('line')}: "
                 f"{message[:200]}", "fix that line (the compiler's full message is above)")


def python_error(output: str, source: str) -> Cause | None:
    """The last traceback's exception, at the innermost frame in the project's own files (else the innermost)."""
    start = output.rfind("Traceback (most recent call last):")
    syntax = re.search(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)\n(?:.*\n){0,3}?\s*(?P<name>SyntaxError|'
                       r"IndentationError|TabError): (?P<message>.*)$", output, re.MULTILINE)
    if start < 0 and syntax is None:
        return None
    if syntax is not None and (start < 0 or syntax.start() > start):
        file, line, name, message = syntax["file"], syntax["line"], syntax["name"], syntax["message"]
    else:
        block = output[start:]
        frames = list(FRAME.finditer(block))
        exc = EXCEPTION.search(block, frames[-1].end() if frames else 0)
        if not frames or exc is None:
            return None
        own = [f for f in frames if source and f["file"].startswith(source.rstrip("/") + "/")]
        frame = (own or frames)[-1]
        file, line, name, message = frame["file"], frame["line"], exc["name"], exc["message"] or ""
    if file == "<string>":  # setuptools' build backend runs setup.py as a string of code
        file = "setup.py"
    return Cause("the build script raised a Python error", f"{_relative(file, source)}:{line}: {name}: "
                 f"{message.strip()[:200]}".rstrip(": "),
                 "fix the build script at that line (its traceback is above)")


#: cibuildwheel's heading of its test step (container builds run the project's smoke command there, after the build).
TEST_STEP = "Testing wheel..."


def test_step(output: str, source: str) -> Cause | None:
    """The wheel was built and repaired, and the smoke command cibuildwheel ran against it raised: not the build
    script's error (its ``File "<string>"`` frame is the command's ``python -c``, not setup.py)."""
    step = output.rfind(TEST_STEP)
    if step < 0 or output.rfind("Traceback (most recent call last):") < step:
        return None
    raised = python_error(output[step:], source)
    value = raised.value.replace("setup.py:", "<command>:", 1) if raised is not None else "its output is above"
    return Cause("the wheel's smoke command failed in cibuildwheel's test step (the wheel itself was built)", value,
                 f"fix the wheel or the smoke command ([tool.cuda-ext-farm.commands] smoke in {TABLE}); the "
                 "command's traceback is above")


def gpu_query(output: str, source: str) -> Cause | None:
    """The build script asked for a GPU (its capability, to pick architectures, say): the builder has none.
    torch.cuda.is_available() is True in the farm's CUDA builds, so a script that asks the device only when it is
    available asks it here too."""
    if not NO_GPU.search(output):
        return None
    raised = python_error(output, source)
    return Cause("the build script asked for a GPU, and the builder has none",
                 raised.value if raised is not None else NO_GPU.findall(output)[-1],
                 "take the architectures from TORCH_CUDA_ARCH_LIST (the farm sets it: cuda-archs, --arch-list) "
                 "rather than from the device; a script that asks the device only when torch.cuda.is_available() "
                 f"(True in the farm's CUDA builds) can have torch's answer instead: cuda-available-in-build = false "
                 f"in {TABLE}, with CUDA compiled when FORCE_CUDA=1 (build-env)")


def classify(output: str, *, source: str = "", build_script: str = "", cpu: bool = False,
             linkable: Sequence[str] = (), empty_submodules: Sequence[str] = ()) -> Cause | None:
    """The cause class of a failed build, from its ``output`` (``None``: not recognised).

    ``source``: the folder the build ran in (paths in the answer are relative to it); ``build_script``: the text of
    its setup.py (to name the variable a download can be switched off with); ``cpu``: a ``--cpu`` build (its
    variables are ``cpu-env``, not ``build-env``); ``linkable``: the CUDA libraries ``toolkit-libraries`` can add;
    ``empty_submodules``: ``.gitmodules`` folders that are empty in the build's copy."""
    for found in (network(output, build_script, cpu=cpu), architecture(output),
                  header(output, source, empty_submodules), library(output, linkable), compiler(output, source)):
        if found is not None:
            return found
    # torch's wrapper of a failed compile and setuptools' own say nothing more than the compiler above.
    if re.search(r"Error compiling objects for extension|error: command '[^']+' failed", output):
        return Cause("the compiler failed", "see its output above",
                     "fix the first error the compiler printed above")
    return test_step(output, source) or gpu_query(output, source) or python_error(output, source)


def explain(general: CommandFailed, output: str, *, build: str, source: str = "", build_script: str = "",
            cpu: bool = False, linkable: Sequence[str] = (), empty_submodules: Sequence[str] = ()) -> FarmError:
    """The error a failed build ends with: ``general`` (the farm's own line) with the cause :func:`classify` reads
    from ``output`` in its place when there is one (``ci/nvcc/wrapper.py``'s refusal first); ``build`` names
    the build (``the wheel build of <target>``)."""
    refused = arch_flags.refusal(output, [source] if source else [])
    if refused is not None:
        return refused
    cause = classify(output, source=source, build_script=build_script, cpu=cpu, linkable=linkable,
                     empty_submodules=empty_submodules)
    if cause is None:
        return general
    return CommandFailed(f"{build} failed: {cause.what}", cause.value, f"{cause.fix}; nothing was written to the "
                         "wheelhouse")


def explain_build(general: CommandFailed, output: str, *, build: str, source: Path, paths_from: str | None = None,
                  cpu: bool = False, linkable: Sequence[str] = ()) -> FarmError:
    """:func:`explain` for a build of the project copy at ``source`` (its setup.py and empty submodule folders are
    read from there); ``paths_from``: where the build saw that copy (``/project`` in a container), default
    ``source``."""
    try:
        script = (source / "setup.py").read_text(errors="replace")
    except OSError:
        script = ""
    empty = [p for p in project_source.gitmodules_paths(source)
             if not (source / p).is_dir() or not any((source / p).iterdir())]
    return explain(general, output, build=build, source=paths_from or str(source), build_script=script, cpu=cpu,
                   linkable=linkable, empty_submodules=empty)
