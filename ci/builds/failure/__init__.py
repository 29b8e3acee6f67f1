"""Why a build failed, read from its own output: the cause class a failed build's last line names.

:func:`classify` is a pure function over the output the farm kept of the project's build (setup.py, the compilers,
the linker, pypa/build, cibuildwheel around them), except that the advice for a full disk or memory measures the
machine. One precedence decides among the classes:

1. **Resources** (``resources``), wherever they appear: no space left on device or a disk quota (the folder and its
   free bytes), a compiler killed for memory (the parallel jobs and the machine's memory, ``--max-jobs``). They make
   every later step fail in its own words, so what comes after them is not the cause.
2. **The cause whose evidence comes last** among the rest (``causes``, ``download``): a download that failed (fatal
   only: a ccache warning, a "building from source" line or a caught download's traceback is not), a compiler
   cache that failed (sccache's server and its remote storage), an unknown CUDA architecture, an empty one, a
   missing header (a submodule's when it lies under one not checked out), a missing library, torch's headers
   compiled as an older C++ standard, a compiler error, cibuildwheel's smoke command, the build script asking for
   a GPU, a Python error in the build script, a pure-Python wheel cibuildwheel stopped at (``pure``: the variables
   the setup.py decides ``ext_modules`` from). A ccache warning followed by a compiler error is the compiler's;
   a download failure that ends the build is the download's. On the same line the more specific class wins.
3. Else a compile that failed without a recognised error line (torch's ``Error compiling objects``), else ``None``:
   the caller keeps its general line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ci.builds import arch_flags, project_source, standard
from ci.builds.failure import causes, download, pure, resources
from ci.builds.failure.causes import Cause
from ci.errors import CommandFailed, FarmError, UsageError

#: pypa/build's advice after a failed backend: options of its own command line, which the farm does not take.
INNER_TIPS = re.compile(r"pass --env-dir and --sdist-extract-dir|build\.pypa\.io/en/stable/how-to/troubleshooting")


def hidden(line: str) -> bool:
    """Whether an output line is an inner tool's advice the farm's user cannot follow (pypa/build's
    ``--env-dir`` tip): such a line is not echoed."""
    return bool(INNER_TIPS.search(line))


def classify(output: str, *, source: str = "", build_script: str = "", cpu: bool = False,
             linkable: Sequence[str] = (), empty_submodules: Sequence[str] = (),
             pins: Sequence[tuple[int, str]] = (), host_folder: Path | None = None,
             memory: int | None = None) -> Cause | None:
    """The cause class of a failed build, from its ``output`` (``None``: not recognised).

    ``source``: the folder the build ran in (paths in the answer are relative to it); ``build_script``: the text of
    its setup.py (to name the variable a download can be switched off with); ``cpu``: a ``--cpu`` build (its
    variables are ``cpu-env``, not ``build-env``); ``linkable``: the CUDA libraries ``toolkit-libraries`` can add;
    ``empty_submodules``: ``.gitmodules`` folders that are empty in the build's copy; ``pins``: the C++ standards
    the project's build files name, for the advice of torch's headers compiled as an older one; ``host_folder``:
    the build's folder on this machine (where a full disk is measured; ``source`` is where the build saw it,
    ``/project`` in a container); ``memory``: the build's memory limit (a container's ``--memory``), else the
    machine's (or its cgroup's) is named."""
    for resource in (resources.disk(output, source, host_folder), resources.memory(output, total=memory)):
        if resource is not None:
            return resource.cause
    # In the order that wins a tie (the same line read by two classes: a missing header is also a compiler error).
    found = [f for f in (
        causes.test_step(output, source), download.network(output, build_script, cpu=cpu),
        download.compiler_cache(output),
        causes.architecture(output), causes.empty_arch_list(output, source),
        causes.header(output, source, empty_submodules), causes.library(output, linkable),
        causes.newer_standard(output, source, pins), causes.compiler(output, source),
        causes.gpu_query(output, source), causes.python_error(output, source),
        pure.stopped(output, build_script, cpu=cpu),
    ) if f is not None]
    if found:
        return max(enumerate(found), key=lambda item: (item[1].at, -item[0]))[1].cause
    # torch's wrapper of a failed compile and setuptools' own say nothing more than the compiler above.
    if re.search(r"Error compiling objects for extension|error: command '[^']+' failed", output):
        return Cause("the compiler failed", "see its output above", "fix the first error the compiler printed above")
    return None


def explain(general: CommandFailed, output: str, *, build: str, source: str = "", build_script: str = "",
            cpu: bool = False, linkable: Sequence[str] = (), empty_submodules: Sequence[str] = (),
            pins: Sequence[tuple[int, str]] = (), host_folder: Path | None = None,
            memory: int | None = None) -> FarmError:
    """The error a failed build ends with: ``general`` (the farm's own line) with the cause :func:`classify` reads
    from ``output`` in its place when there is one (``ci/nvcc/wrapper.py``'s refusal first); ``build`` names
    the build (``the wheel build of <target>``)."""
    refused = arch_flags.refusal(output, [source] if source else [])
    if refused is not None:
        return refused
    cause = classify(output, source=source, build_script=build_script, cpu=cpu, linkable=linkable,
                     empty_submodules=empty_submodules, pins=pins, host_folder=host_folder, memory=memory)
    if cause is None:
        return general
    # A build that compiled nothing did what the project asked: bad input (2), not a failed command.
    kind = UsageError if cause.what == pure.WHAT else CommandFailed
    return kind(f"{build} failed: {cause.what}", cause.value, f"{cause.fix}; nothing was written to the wheelhouse")


def explain_build(general: CommandFailed, output: str, *, build: str, source: Path, paths_from: str | None = None,
                  cpu: bool = False, linkable: Sequence[str] = (), memory: int | None = None) -> FarmError:
    """:func:`explain` for a build of the project copy at ``source`` (its setup.py, empty submodule folders and
    pins of an older C++ standard are read from there); ``paths_from``: where the build saw that copy
    (``/project`` in a container), default ``source``; ``memory``: the container's memory limit."""
    try:
        script = (source / "setup.py").read_text(errors="replace")
    except OSError:
        script = ""
    empty = [p for p in project_source.gitmodules_paths(source)
             if not (source / p).is_dir() or not any((source / p).iterdir())]
    try:
        pins = [(pin.std, str(pin)) for pin in standard.scan(source)]
    except (OSError, ValueError):  # a build file that cannot be read: the advice names the flags in general
        pins = []
    return explain(general, output, build=build, source=paths_from or str(source), build_script=script, cpu=cpu,
                   linkable=linkable, empty_submodules=empty, pins=pins, host_folder=source, memory=memory)
