"""The project's sdist: written once without the CUDA torch, checked for the files its build needs, proven by
building a wheel from it, found again by the release's assemble step.

* :func:`build_sdist`: setuptools' ``sdist`` compiles nothing, so it does not get the release target's CUDA torch
  (gigabytes). It runs ``python -m build --sdist --no-isolation --skip-dependency-check`` (the dependency check
  would ask for the torch of ``[build-system] requires``) first in a build environment *without* torch: the farm's
  pinned build tools and the project's other build requirements. A ``setup.py`` that imports torch at the top fails
  there with ``No module named 'torch'``, and the sdist is written again in an environment with a CPU-only torch
  (``torch==<release target's>+cpu``, or ``cpu_torch``; from ``torch_index``, e.g.
  https://download.pytorch.org/whl/cpu, or pip's own index). The project's files are copied (those git lists, as
  for a wheel build) into a temporary folder first: the checkout is not written to (no ``*.egg-info``), and a stale
  ``*.egg-info/SOURCES.txt`` of a working checkout, which setuptools reads back, cannot add files a fresh clone
  lacks. A setuptools-scm project is the exception: its file list and version come from git, so its sdist is
  written in the checkout itself.
* :func:`check_sdist`: the sdist's members against what its build reads. Without a ``MANIFEST.in``, setuptools
  ships the sources ``setup.py`` lists and never a header, and a ``setup.py`` that lists ``.cu`` files only where it
  finds CUDA drops those on a machine without it; ``pip install <sdist>`` then fails with ``fatal error: x.h``.
* :func:`build_wheel_from_sdist`: the farm's host build (``python -m ci build``, ``ci/linux/host.py``) of the release
  target on the unpacked sdist, audited like any build, on one architecture.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ci.errors import CommandFailed, UsageError
from ci.log import log

if TYPE_CHECKING:
    from ci.toolchain.envs import PythonEnv
    from ci.universe.project import ProjectConfig

#: What a C, C++ or CUDA compiler reads: sources and headers (and the textual includes of templates).
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cu", ".h", ".hh", ".hpp", ".hxx", ".h++", ".cuh",
                   ".inl", ".inc", ".ipp", ".tpp", ".tcc")
#: ``#include "x"``: the quoted form, which looks next to the including file first (``<x>`` is a library's).
LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)
#: What a ``setup.py`` that imports torch at the top prints in an environment without torch.
NO_TORCH = re.compile(r"No module named '?torch\b")
#: Folders whose C/C++/CUDA files an sdist that ships none is not asked for.
NOT_BUILT = frozenset({"test", "tests", "testing", "example", "examples", "benchmark", "benchmarks", "bench", "doc",
                       "docs", "fixtures"})


# --- building ------------------------------------------------------------------------------------------------


def build_sdist(config: ProjectConfig, dest: Path, *, cpu_torch: str | None = None, torch_index: str | None = None,
                check: bool = True) -> Path:
    """Write the project's sdist into ``dest`` without the CUDA torch (see the module's doc), check it
    (:func:`check_sdist`) and return its path."""
    from ci import proc
    from ci.toolchain import envs
    from ci.universe.targets import platforms

    python = platforms.current_python()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="farm-sdist-") as tmp:
        out = Path(tmp) / "dist"
        if _uses_setuptools_scm(config):
            source = config.root
            log.info("setuptools-scm: the sdist is written in the project's folder (its files and version "
                     "come from git)")
        else:
            source = Path(tmp) / config.root.name
            count = copy_project(config.root, source)
            log.info(f"{count} files of {config.root} copied to {source}")
        env = envs.build_env(python, None, config.build_requires)
        first = _run_sdist(env, source, out, capture=True)
        if first.returncode != 0:
            text = (first.stdout + first.stderr).rstrip()
            if not NO_TORCH.search(text):
                log.details(text[-6000:])
                raise proc.failure(first.args, first.returncode, "building the sdist failed")
            version = _cpu_torch_version(config, cpu_torch)
            log.note("setup.py needs torch to write its sdist", "(No module named 'torch'): "
                     f"again with a CPU-only torch (torch=={version}+cpu)")
            env = cpu_torch_env(config, python, version, torch_index)
            _run_sdist(env, source, out, capture=False)
        made = sorted(out.glob("*.tar.gz"))
        if len(made) != 1:
            raise CommandFailed("the sdist build did not produce exactly one archive",
                                ", ".join(p.name for p in made) or "none", "its output is above")
        log.note("sdist", f"{made[0].name} in {time.monotonic() - started:.1f} s ({_torch_label(env)})",
                 style="green")
        if check:  # before it reaches dest: a refused sdist is not left behind
            check_sdist(config, made[0])
        dest.mkdir(parents=True, exist_ok=True)
        final = dest / made[0].name
        shutil.copy2(made[0], final)
    return final


def _run_sdist(env: PythonEnv, source: Path, out: Path, *, capture: bool) -> subprocess.CompletedProcess[str]:
    from ci import proc
    from ci.toolchain import envs

    cmd: list[str | Path] = [env.python, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check",
                             "--outdir", out, source]
    return proc.run(cmd, env=envs.pip_env(), capture=capture, check=not capture, what="building the sdist failed")


def _torch_label(env: PythonEnv) -> str:
    from ci.errors import FarmError
    from ci.toolchain import envs

    try:
        return f"torch {envs.torch_metadata(env)['version']}"
    except FarmError:
        return "no torch"


def _uses_setuptools_scm(config: ProjectConfig) -> bool:
    from ci.toolchain import envs

    return any(envs.requirement_name(r) == "setuptools-scm" for r in config.build_requires)


def _cpu_torch_version(config: ProjectConfig, cpu_torch: str | None) -> str:
    from ci.universe import matrix, targets

    return matrix.get_torch(cpu_torch).version if cpu_torch else targets.default_target(config).torch


def cpu_torch_env(config: ProjectConfig, python: str, version: str, torch_index: str | None) -> PythonEnv:
    """The farm's build tools, ``torch==<version>+cpu`` (from ``torch_index`` as an extra index when given) and the
    project's own build requirements (layered, as in ``envs.build_env``)."""
    from ci.errors import CommandFailed
    from ci.toolchain import envs

    try:
        return envs.build_env(python, envs.TorchBuild(version, "cpu", torch_index, extra_index=True),
                              config.build_requires)
    except CommandFailed as exc:
        # PyPI has no CPU-only torch: say where one comes from instead of pip's "check the network".
        raise CommandFailed(f"setup.py imports torch to write the sdist, and no torch=={version}+cpu was found",
                            torch_index or "pip's own indexes",
                            "pass --torch-index https://download.pytorch.org/whl/cpu, or --cpu-torch VERSION of a "
                            "CPU torch pip can reach (a stable-ABI project: any release at or above its floor)") \
            from exc


def copy_project(root: Path, dest: Path) -> int:
    """Copy the project's files (``project_source.read_tree``: what git lists, or all but build outputs) to ``dest``,
    its in-tree links made again as links (a link to a folder of headers is the folder, as in a build's copy)."""
    from ci.builds import project_source, tail

    outputs = tail.Outputs.resolve(root)
    tree = project_source.read_tree(root, (outputs.build_root, outputs.wheelhouse))
    for name in tree.files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    for name, written in tree.links.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(written, dest / name, target_is_directory=(root / name).is_dir())
    return len(tree.files) + len(tree.links)


# --- checking ------------------------------------------------------------------------------------------------


def sdist_members(sdist: Path) -> list[str]:
    """The files of an sdist, relative to its top folder (``name-version/``)."""
    try:
        with tarfile.open(sdist) as tar:
            names = [m.name for m in tar.getmembers() if m.isfile()]
    except (OSError, tarfile.TarError) as exc:
        raise UsageError("not a readable sdist", sdist, f"pass a .tar.gz written by the sdist build ({exc})") from None
    tops = {PurePosixPath(n).parts[0] for n in names}
    if len(tops) != 1 or any(len(PurePosixPath(n).parts) < 2 for n in names):
        raise UsageError("the sdist does not hold one top folder", f"{sdist.name}: {', '.join(sorted(tops))}",
                         "build it with python -m build --sdist")
    return sorted(str(PurePosixPath(*PurePosixPath(n).parts[1:])) for n in names)


def is_native(name: str) -> bool:
    return name.lower().endswith(NATIVE_SUFFIXES)


def include_candidates(including: str, written: str, include_dirs: Sequence[str]) -> list[str]:
    """Where ``#include "written"`` in ``including`` may come from, in order: the including file's folder, then its
    parent folders up to the project root (standing in for ``-I`` flags we cannot read without running setup.py:
    ``-Icsrc`` lets ``csrc/cpu/x.cpp`` include ``"common.h"`` from ``csrc/``), then every ``include`` folder."""
    folder = PurePosixPath(including).parent
    bases = [str(folder), *(str(p) for p in folder.parents), *include_dirs]
    found: list[str] = []
    for base in dict.fromkeys(bases):
        path = posixpath.normpath(written if base in (".", "") else posixpath.join(base, written))
        if not path.startswith("../") and path not in found:
            found.append(path)
    return found


@dataclasses.dataclass(frozen=True)
class Needed:
    """A project file the sdist's build needs, and why."""

    path: str
    why: str
    header: bool


def needed_files(members: Iterable[str], project_files: Iterable[str], read: Callable[[str], str]) -> list[Needed]:
    """The project's files the sdist lacks though its build reads them, headers first.

    Three rules, over the project's own files (what git lists), so a header of torch or of the system is never
    asked for:

    * every file a shipped C/C++/CUDA file ``#include "..."``-s, transitively (resolved by
      :func:`include_candidates`; a name no project file matches is not the project's and is skipped);
    * every C/C++/CUDA file under the deepest folder that holds all the shipped ones of a top-level folder (``csrc/``
      in the usual layout): a ``.cu`` that ``setup.py`` lists only where it finds CUDA is missing from an sdist written
      without CUDA, and a user with CUDA then builds a wheel without its kernels;
    * an sdist without any C/C++/CUDA file needs every one of the project's (but tests', examples', docs').
    """
    present = set(members)
    files = sorted(set(project_files))
    known = set(files)
    native = [f for f in files if is_native(f)]
    include_dirs = sorted({"/".join(PurePosixPath(f).parts[: i + 1]) for f in files
                           for i, part in enumerate(PurePosixPath(f).parts[:-1]) if part == "include"})
    # The shipped sources' folders, complete.
    by_top: dict[str, list[PurePosixPath]] = {}
    for f in native:
        parts = PurePosixPath(f).parts
        if f in present and len(parts) > 1:
            by_top.setdefault(parts[0], []).append(PurePosixPath(f).parent)
    left_out: dict[str, str] = {}
    if native and not any(f in present for f in native):
        # No C/C++/CUDA file at all (a setup.py that lists its extensions only where torch is installed): every
        # one of the project's, but those of test, example and documentation folders.
        for f in native:
            if not NOT_BUILT.intersection(PurePosixPath(f).parts[:-1]):
                left_out[f] = "a C/C++/CUDA file of the project; the sdist holds none"
    for folders in by_top.values():
        common = PurePosixPath(posixpath.commonpath([str(p) for p in folders]))
        for f in native:
            if f not in present and PurePosixPath(f).is_relative_to(common):
                left_out.setdefault(f, f"a C/C++/CUDA file under {common}/, where the sdist's sources are")
    # Local includes of those and of the shipped files, followed through headers the sdist lacks too.
    missing: dict[str, Needed] = {}
    queue = [*(f for f in native if f in present), *left_out]  # a header's reason names a shipped file first
    seen = set(queue)
    while queue:
        including = queue.pop(0)
        for written in LOCAL_INCLUDE.findall(read(including)):
            path = next((c for c in include_candidates(including, written, include_dirs) if c in known), None)
            if path is None:
                continue
            if path not in present and path not in missing:
                missing[path] = Needed(path, f'#include "{written}" in {including}', header=True)
            if path not in seen:
                seen.add(path)
                queue.append(path)
    for f, why in left_out.items():
        missing.setdefault(f, Needed(f, why, header=False))
    return sorted(missing.values(), key=lambda n: (not n.header, n.path))


def manifest_hint(needed: Sequence[Needed], project_files: Iterable[str]) -> str:
    """MANIFEST.in lines that bring the missing files in: per top-level folder, every C/C++/CUDA suffix it holds."""
    native = [PurePosixPath(f) for f in project_files if is_native(f)]
    lines: list[str] = []
    for top in sorted({PurePosixPath(n.path).parts[0] if len(PurePosixPath(n.path).parts) > 1 else "" for n in needed}):
        if top:
            suffixes = sorted({"*" + p.suffix for p in native if len(p.parts) > 1 and p.parts[0] == top})
            lines.append(f"recursive-include {top} {' '.join(suffixes)}")
        else:
            lines.append("include " + " ".join(sorted(n.path for n in needed if "/" not in n.path)))
    return "; ".join(lines)


@dataclasses.dataclass(frozen=True)
class SdistCheck:
    members: int
    native: int
    includes: int


def check_sdist(config: ProjectConfig, sdist: Path, project_files: Sequence[str] | None = None) -> SdistCheck:
    """Refuse an sdist that lacks a file its build needs (:func:`needed_files`), naming it and the fix in one line
    (the full list before it). ``project_files``: the project's files relative to its root (default: what git lists,
    as the wheel build copies)."""
    from ci.builds import project_source

    members = sdist_members(sdist)
    files = list(project_files) if project_files is not None else project_source.project_files(config.root)
    texts: dict[str, str] = {}

    def read(name: str) -> str:
        if name not in texts:
            try:
                texts[name] = (config.root / name).read_text(errors="replace")
            except OSError:
                texts[name] = ""
        return texts[name]

    needed = needed_files(members, files, read)
    if needed:
        first = needed[0]
        more = f"; and {len(needed) - 1} more" if len(needed) > 1 else ""
        details = "\n".join(f"  {n.path}: {n.why}" for n in needed)
        raise UsageError(
            f"the sdist {sdist.name} lacks a file its build needs", f"{first.path}: {first.why}{more}",
            f"add it to MANIFEST.in ({manifest_hint(needed, files)}) and build the sdist again",
            details=f"files the sdist's build needs but the sdist lacks:\n{details}")
    native = [m for m in members if is_native(m)]
    includes = sum(len(LOCAL_INCLUDE.findall(read(m))) for m in native)
    log.note("sdist check:", f"{len(members)} files, {len(native)} C/C++/CUDA files, "
             f"{includes} local includes: nothing the build needs is missing", style="green")
    return SdistCheck(members=len(members), native=len(native), includes=includes)


# --- proving ---------------------------------------------------------------------------------------------------


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    """Unpack ``sdist`` into ``dest``; its top folder (``name-version/``)."""
    sdist_members(sdist)  # one top folder, readable
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


def proof_arch_list(config: ProjectConfig) -> str:
    """One architecture: the release cell's PTX one, compiled to SASS and PTX. A missing or broken file fails every
    architecture alike (nvcc's front end, the host compiler and the linker run once per file); further
    architectures repeat only the device back end, which the release's own builds exercise."""
    from ci.universe import targets

    cell = targets.default_target(config).cell
    return f"{cell.ptx_arch or cell.sass_archs[-1]}+PTX"


def build_wheel_from_sdist(config: ProjectConfig, sdist: Path, dest: Path, *, arch_list: str | None = None,
                           max_jobs: int | None = None, work: Path | None = None) -> Path:
    """Build the release target's wheel from ``sdist`` alone, with the farm's host build (``ci.linux.host.build``: the
    pinned toolkit, the target's CUDA torch, auditwheel, the audit), on ``arch_list`` (default:
    :func:`proof_arch_list`); the wheel and its report land in ``dest/<target-id>/``; returns the wheel's path.

    The sdist is unpacked into a temporary folder and loaded as a project of its own (its ``pyproject.toml``, or
    ``config``'s ``--config`` file), so nothing of the checkout takes part. ``work``: the build folder (default: a
    temporary one, removed; the release target's usual build folder is left alone)."""
    from ci.builds import report, tail
    from ci.linux import host as build
    from ci.universe import targets
    from ci.universe.project import reading

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="farm-sdist-wheel-") as tmp:
        root = unpack_sdist(sdist, Path(tmp) / "unpacked")
        own_config = config.source if config.source != config.root / "pyproject.toml" else None
        unpacked = reading.load(root, own_config)
        target = targets.with_arch_list(targets.default_target(unpacked), arch_list or proof_arch_list(unpacked))
        outputs = tail.Outputs(wheelhouse=dest, build_root=work or Path(tmp) / "build")
        log.note("wheel from the sdist", f"{sdist.name}: {target.id}, archs {target.cell.arch_list}", style="bold")
        rep = build.build(target, outputs, max_jobs=max_jobs)
    report.print_report(rep)
    wheel = outputs.target_dir(target) / rep.wheel
    log.note("wheel from the sdist", f"{wheel.name} in {time.monotonic() - started:.0f} s", style="green")
    return wheel


def find_sdist(folder: Path) -> Path:
    found = sorted(folder.glob("*.tar.gz"))
    if len(found) != 1:
        raise UsageError("expected exactly one sdist", f"{folder}: {', '.join(p.name for p in found) or 'none'}",
                         "pass the folder python -m ci release sdist wrote")
    return found[0]


