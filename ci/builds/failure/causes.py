"""The cause classes read from a failed build's output, each with where in the output its evidence lies.

Every reader returns a :class:`Found` (the offset of its decisive line, and the :class:`Cause`) or None; the
package's ``classify`` takes the one whose evidence comes last. The readers here: an unknown or unsupported CUDA
architecture, an empty architecture list, a missing header (a submodule's when it lies under one that is not
checked out), a missing library, torch's headers compiled as an older C++ standard than they need, a compiler error
(file and line), cibuildwheel's smoke command, the build script asking for a GPU, a Python error in the build
script (file and line). Resources (``resources``) and downloads (``download``) have modules of their own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

#: The project-side table a cause's advice names.
TABLE = "[tool.cuda-ext-farm]"


class Cause(NamedTuple):
    """One ``FarmError`` line's parts: what failed, the value that shows it, how to fix it."""

    what: str
    value: str
    fix: str


class Found(NamedTuple):
    """A cause and the offset in the output of the line that shows it."""

    at: int
    cause: Cause


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
#: A compiler's words for a feature of a newer C++ standard than the one it compiles as: gcc (``only available with
#: '-std=c++20'``, ``only available from C++20 onwards``), clang (``is a C++20 extension``), nvcc's front end (``is a
#: C++20 feature``), MSVC (``requires at least '/std:c++20'``).
NEWER_STANDARD = re.compile(r"(?:-std=c\+\+|/std:c\+\+|C\+\+|c\+\+)(?P<std>2[0-9a-c])\b(?: onwards|'| feature|"
                            r" extension|\u2019)|(?:-std=|/std:)c\+\+latest")
#: Where a compiler's path says the file is one of torch's headers.
TORCH_HEADER = re.compile(r"[/\\]torch[/\\]include[/\\]")
#: A Python traceback's frame line.
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
#: The exception line that closes a traceback: ``ValueError: ...``, ``SyntaxError: ...``, ``ModuleNotFoundError``.
EXCEPTION = re.compile(r"^(?P<name>(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)|SystemExit)"
                       r"(?::\s*(?P<message>.*))?$", re.MULTILINE)
#: The traceback torch's cpp_extension or scikit-build-core raise after a failed compile: the compiler's error
#: above it is the cause, the traceback only its consequence.
COMPILE_WRAPPER = re.compile(r"Error compiling objects for extension|CalledProcessError: Command '\[?'?[^']*"
                             r"(?:ninja|cmake|make)'")
#: What torch (and the CUDA runtime) say when asked for a device on a machine without one: a build script that asks
#: the GPU's memory or the current device (after torch.cuda.is_available(), True in the farm's CUDA builds).
NO_GPU = re.compile(r"Found no NVIDIA driver on your system|No CUDA GPUs are available|"
                    r"no CUDA-capable device is detected|CUDA driver initialization failed")


def relative(path: str, source: str) -> str:
    path, source = path.strip().replace("\\", "/"), source.replace("\\", "/")  # MSVC writes C:\src\a.cpp
    for prefix in (source.rstrip("/") + "/", "./") if source else ("./",):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def _first(patterns: Sequence[re.Pattern[str]], output: str) -> re.Match[str] | None:
    found = [m for m in (p.search(output) for p in patterns) if m is not None]
    return min(found, key=lambda m: m.start()) if found else None


def architecture(output: str) -> Found | None:
    # The last one: a traceback also shows the line that raised it (``Unknown CUDA arch ({arch})``).
    found = [m for m in UNKNOWN_ARCH.finditer(output) if "{" not in m.group(0)]
    if not found:
        return None
    match = found[-1]
    value = match.group(1) or match.group(2) or match.group(0)
    return Found(match.start(), Cause(
        "the build was asked for a CUDA architecture its toolkit or torch does not know", value,
        "pass --arch-list with architectures of the cell (the farm's matrix command lists them) or fix "
        f"cuda-archs in {TABLE}; a -gencode or -arch flag in setup.py asks for one too: drop it and let "
        "TORCH_CUDA_ARCH_LIST apply"))


def empty_arch_list(output: str, source: str) -> Found | None:
    """torch's ``_get_cuda_arch_flags`` found no architecture: TORCH_CUDA_ARCH_LIST was empty when the extension
    compiled (a build script that wrote it from the GPUs it saw), and torch's own fallback, the visible GPUs, had
    none (``arch_list[-1] += '+PTX'`` raises IndexError)."""
    start = output.rfind("Traceback (most recent call last):")
    block = output[start:] if start >= 0 else ""
    if "_get_cuda_arch_flags" not in block or not re.search(r"^IndexError: list index out of range", block, re.M):
        return None
    raised = python_error(output, source)
    return Found(start, Cause(
        "torch found no CUDA architecture to compile for: TORCH_CUDA_ARCH_LIST was empty when the extension "
        "compiled, and the builder has no GPU for torch to ask",
        raised.cause.value if raised is not None else "IndexError: list index out of range",
        "let the farm's TORCH_CUDA_ARCH_LIST stand (choose it with cuda-archs or --arch-list): a build script that "
        "writes it from the visible GPUs gets the farm's list from torch.cuda.device_count() and "
        f"get_device_capability() while cuda-available-in-build is on (the default in {TABLE}), and none with "
        "cuda-available-in-build = false"))


def header(output: str, source: str, empty_submodules: Sequence[str]) -> Found | None:
    match = _first(MISSING_HEADER, output)
    if match is None:
        return None
    name = match.group("header").strip()
    where = f"{relative(match.group('file'), source)}:{match.group('line')}"
    top = name.split("/")[0]
    for sub in empty_submodules:
        if top == sub.rstrip("/").split("/")[-1] or name.startswith(sub.rstrip("/") + "/") or top in sub.split("/"):
            return Found(match.start(), Cause(
                "a header is missing: it lies in a git submodule that is not checked out",
                f"{where}: {name} (submodule {sub})",
                "run `git submodule update --init --recursive` in the project's folder, then build again"))
    return Found(match.start(), Cause(
        "a header is missing", f"{where}: {name}",
        "add the folder that holds it to the extension's include_dirs (an absolute path: torch's ninja compiles in "
        "build/), or install the library that provides it; a vendored library may be a git submodule: git "
        "submodule update --init --recursive"))


def library(output: str, linkable: Sequence[str]) -> Found | None:
    match = MISSING_LIBRARY.search(output)
    if match is None:
        return None
    name = match.group("name") or match.group("win") or ""
    if name in linkable:
        return Found(match.start(), Cause(
            "the linker cannot find a CUDA library", f"-l{name}",
            f'add toolkit-libraries = ["{name}"] to {TABLE}: the farm then puts its pinned wheel on the linker\'s '
            "path"))
    cuda = f" (a CUDA library: add it to toolkit-libraries of {TABLE}; the farm links {', '.join(linkable)})" \
        if linkable else ""
    return Found(match.start(), Cause("the linker cannot find a library",
                                      f"-l{name}" if match.group("name") else name,
                                      f"install it or add its folder to the extension's library_dirs{cuda}"))


def compiler(output: str, source: str) -> Found | None:
    """The first compiler error (the ones after it often follow from it)."""
    match = _first(COMPILER_ERROR, output)
    if match is None:
        return None
    message = match.group("message").strip()
    return Found(match.start(), Cause(
        "the compiler failed", f"{relative(match.group('file'), source)}:{match.group('line')}: {message[:200]}",
        "fix that line (the compiler's full message is above)"))


def newer_standard(output: str, source: str, pins: Sequence[tuple[int, str]] = ()) -> Found | None:
    """The first compiler error lies in torch's headers and says a newer C++ standard is needed there (C++20 from
    torch 2.12): the build compiled torch's headers as an older standard, which the project asked for. ``pins``:
    the standards the project's build files name, with where (``(17, "-std=c++17 in setup.py line 41")``): the
    older ones are named."""
    first = compiler(output, source)
    if first is None:
        return None
    match = _first(COMPILER_ERROR, output)
    assert match is not None
    following = output[match.start():match.start() + 2000].split("\n")[:6]  # the error and its notes
    newer = next((m for text in following for m in NEWER_STANDARD.finditer(text)), None)
    if not TORCH_HEADER.search(match.group("file")) or newer is None:
        return None
    needed = {"2a": "20", "2b": "23", "2c": "26"}.get(newer.group("std") or "", newer.group("std") or "20")
    older = [where for std, where in pins if std < int(needed)]
    named = f"the project's {', '.join(older)}" if older else "the project's -std flag (or CMAKE_CXX_STANDARD, " \
        "cxx_std_NN)"
    return Found(first.at, Cause(
        f"torch's headers need C++{needed}, and the build compiled them as an older standard", first.cause.value,
        f"{named} overrides the standard torch's cpp_extension passes: drop it or raise it to C++{needed}"))


def python_error(output: str, source: str) -> Found | None:
    """The last traceback's exception, at the innermost frame in the project's own files (else the innermost);
    not the traceback a failed compile ends with (its compiler error is the cause)."""
    start = output.rfind("Traceback (most recent call last):")
    syntax = re.search(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)\n(?:.*\n){0,3}?\s*(?P<name>SyntaxError|'
                       r"IndentationError|TabError): (?P<message>.*)$", output, re.MULTILINE)
    if start < 0 and syntax is None:
        return None
    if syntax is not None and (start < 0 or syntax.start() > start):
        at, file, line, name, message = syntax.start(), syntax["file"], syntax["line"], syntax["name"], \
            syntax["message"]
    else:
        block = output[start:]
        frames = list(FRAME.finditer(block))
        exc = EXCEPTION.search(block, frames[-1].end() if frames else 0)
        if not frames or exc is None or COMPILE_WRAPPER.search(exc.group(0)):
            return None
        # The project's frames: under its folder, or setup.py itself (setuptools runs it as a string of code).
        prefix = source.rstrip("/") + "/" if source else None
        own = [f for f in frames if f["file"] == "<string>" or (prefix and f["file"].startswith(prefix))]
        frame = (own or frames)[-1]
        at, file, line, name, message = start, frame["file"], frame["line"], exc["name"], exc["message"] or ""
    if file == "<string>":  # setuptools' build backend runs setup.py as a string of code
        file = "setup.py"
    return Found(at, Cause("the build script raised a Python error", f"{relative(file, source)}:{line}: {name}: "
                           f"{message.strip()[:200]}".rstrip(": "),
                           "fix the build script at that line (its traceback is above)"))


#: cibuildwheel's heading of its test step (container builds run the project's smoke command there, after the build).
TEST_STEP = "Testing wheel..."


def test_step(output: str, source: str) -> Found | None:
    """The wheel was built and repaired, and the smoke command cibuildwheel ran against it raised: not the build
    script's error (its ``File "<string>"`` frame is the command's ``python -c``, not setup.py)."""
    step = output.rfind(TEST_STEP)
    traceback = output.rfind("Traceback (most recent call last):")
    if step < 0 or traceback < step:
        return None
    raised = python_error(output[step:], source)
    value = raised.cause.value.replace("setup.py:", "<command>:", 1) if raised is not None else \
        "its output is above"
    return Found(traceback, Cause(
        "the wheel's smoke command failed in cibuildwheel's test step (the wheel itself was built)", value,
        f"fix the wheel or the smoke command ([tool.cuda-ext-farm.commands] smoke in {TABLE}); the command's "
        "traceback is above"))


def gpu_query(output: str, source: str) -> Found | None:
    """The build script asked for a GPU (its memory, the current device): the builder has none.
    torch.cuda.is_available() is True in the farm's CUDA builds, and device_count()/get_device_capability() answer
    from the farm's architecture list, so a script that asks more than those asks it here too."""
    found = list(NO_GPU.finditer(output))
    if not found:
        return None
    raised = python_error(output, source)
    return Found(found[-1].start(), Cause(
        "the build script asked for a GPU, and the builder has none",
        raised.cause.value if raised is not None else found[-1].group(0),
        "take the architectures from TORCH_CUDA_ARCH_LIST (the farm sets it: cuda-archs, --arch-list) rather than "
        "from the device; a script that asks the device only when torch.cuda.is_available() (True in the farm's "
        f"CUDA builds) can have torch's answer instead: cuda-available-in-build = false in {TABLE}, with CUDA "
        "compiled when FORCE_CUDA=1 (build-env)"))
