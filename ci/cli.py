"""The farm's command-line grammar, shared by ``python -m ci`` and ``noxfile.py``.

Nox sessions hand their arguments to :func:`parse` (and :func:`resolve`) before
any virtual environment is created or anything installed, so a bad value costs
nothing and is reported once, in the same words as ``python -m ci``.

Standard library plus ``packaging`` only (nox brings it).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ci import options
from ci.errors import UsageError
from ci.universe import matrix, project

DEFAULT_CUDA_HELP = "CUDA toolkit: version (13.0), cell name (cu130) or major (13 = its release cell)"


class Parser(argparse.ArgumentParser):
    """argparse that raises one-line UsageErrors instead of printing usage and exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations: `--wheel` must not silently mean `--wheelhouse` on a command without --wheel.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"bad arguments for {self.prog}", message, f"see `{self.prog} --help`")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _project_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--project", default=os.environ.get("FARM_PROJECT") or None,
                    help="the extension project's folder (default: FARM_PROJECT, else the current folder)")
    sp.add_argument("--config", help="a TOML file with the [tool.cuda-ext-farm] table, for a project you cannot edit")


def _selection_args(sp: argparse.ArgumentParser) -> None:
    _project_args(sp)
    sp.add_argument("--target", action="append", default=[], help="a target id (nox -s matrix lists them); repeatable")
    sp.add_argument("--cuda", help=DEFAULT_CUDA_HELP)
    sp.add_argument("--torch", help="torch release (2.11 or 2.11.0): a classic project's target, or the torch a "
                    "stable-ABI build compiles against")
    sp.add_argument("--python", help="CPython version of a per-Python target (3.12)")
    sp.add_argument("--arch-list", help="override the architectures (TORCH_CUDA_ARCH_LIST syntax, e.g. '9.0+PTX')")
    sp.add_argument("--arch", choices=("x86_64", "aarch64"),
                    help="the CPU architecture of the wheel (default x86_64; aarch64 is cross-compiled here and "
                    "import-tested under qemu)")


def _output_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--wheelhouse",
                    help="where finished wheels go (default: FARM_WHEELHOUSE, else <project>/wheelhouse)")
    sp.add_argument("--build-dir",
                    help="build and staging folders (default: FARM_BUILD_DIR, else <cache>/build/<project>)")
    sp.add_argument("--max-jobs", type=positive_int, help="parallel compile jobs (MAX_JOBS)")


def build_parser(prog: str | None = None) -> Parser:
    # FARM_PROG: the installable command runs `python -m ci` under its own name, so messages name what was typed.
    p = Parser(prog=prog or os.environ.get("FARM_PROG") or "python -m ci", description="The CUDA extension build farm.")
    p.add_argument("--traceback", action="store_true", help="show Python tracebacks (also FARM_DEBUG=1)")
    sub = p.add_subparsers(dest="subcommand", required=True, parser_class=Parser)

    m = sub.add_parser("matrix", help="the project's targets (torch x Python x CUDA)")
    _selection_args(m)
    m.add_argument("--os", choices=("linux", "windows", "all"), default="all")
    m.add_argument("--json", action="store_true")

    b = sub.add_parser("build", help="host build: wheel, repair, audit -> wheelhouse/<target>/")
    _selection_args(b)
    _output_args(b)
    b.add_argument("--cpu", action="store_true", help="build without CUDA (no toolkit; a CPU-only wheel)")
    b.add_argument("--all", action="store_true", help="every host-buildable target of the project, not just one")

    d = sub.add_parser("develop", help="in-place incremental build for editing")
    _selection_args(d)
    d.add_argument("--max-jobs", type=positive_int, help="parallel compile jobs (MAX_JOBS)")
    d.add_argument("--cpu", action="store_true")
    d.add_argument("--debug", action="store_true", help="-O0 -g and device debug info (-G)")
    d.add_argument("--no-cache", action="store_true", help="do not use a compiler cache")
    d.add_argument("--clean", action="store_true", help="remove the build folder first")
    d.add_argument("--release-archs", action="store_true",
                   help="build for the release architectures, not just the visible GPUs (or --arch-list)")

    a = sub.add_parser("audit", help="audit a wheel against a target")
    a.add_argument("wheel")
    _selection_args(a)
    a.add_argument("--cpu", action="store_true", help="audit as a CPU-only wheel")
    a.add_argument("--torch-env", help="a Python environment holding the torch to resolve symbols against")
    a.add_argument("--json", action="store_true")

    bc = sub.add_parser("build-cuda", help="build targets with cibuildwheel in their cell's builder image")
    bc.add_argument("cell", nargs="?", help="same as --cuda")
    _selection_args(bc)
    _output_args(bc)
    bc.add_argument("--base-image", help="base image (default: FARM_BASE_IMAGE or the cell's)")

    ba = sub.add_parser("build-all", help="every Linux target of the project, in containers")
    _selection_args(ba)
    _output_args(ba)
    ba.add_argument("--base-image")
    ba.add_argument("--jobs", type=positive_int, default=1, help="targets built at once (default 1)")
    ba.add_argument("--missing", action="store_true",
                    help="only the targets the wheelhouse has no wheel of (a stopped run continues where it stopped)")

    cv = sub.add_parser("coverage", help="which targets a wheelhouse or PEP 503 site holds, which are missing")
    cv.add_argument("folder", help="a wheelhouse (<target-id>/ folders) or a release's PEP 503 site")
    _selection_args(cv)
    cv.add_argument("--os", choices=("linux", "windows", "all"), default="all")
    cv.add_argument("--json", action="store_true")

    from ci.doctor import diagnose

    dr = sub.add_parser("doctor", help="which wheel of an index fits this machine (torch, CUDA, driver, GPUs, glibc, "
                        "Python), and why each other one does not")
    diagnose.add_arguments(dr)

    sh = sub.add_parser("shell", help="a shell (or one command) in a cell's builder image")
    _project_args(sh)
    sh.add_argument("--cuda", default="13", help=DEFAULT_CUDA_HELP)
    sh.add_argument("--base-image")
    sh.add_argument("command", nargs=argparse.REMAINDER, help="command to run instead of an interactive shell")

    tg = sub.add_parser("test-gpu", help="the GPU test lanes on this machine's GPUs")
    _selection_args(tg)
    src = tg.add_mutually_exclusive_group()
    src.add_argument("--wheel", help="wheel to test (default: the target's wheel in the wheelhouse)")
    src.add_argument("--inplace", action="store_true", help="test the in-place build (nox -s develop)")
    tg.add_argument("--wheelhouse")
    tg.add_argument("--ptx-wheel", help="a wheel with PTX only for an older architecture (ptx-jit lane)")
    tg.add_argument("--lanes", default="default,sanitizer,ptx-jit,multi-gpu,bench")
    tg.add_argument("--quick", action="store_true")
    tg.add_argument("--out", help="results folder (default: FARM_TEST_RESULTS, else <project>/test-results)")
    tg.add_argument("--system", action="store_true",
                    help="test with the running interpreter and its torch (GPU boxes without network)")

    t = sub.add_parser("test", help="run the project's configured smoke and CPU test commands against its wheel")
    _selection_args(t)
    t.add_argument("--wheel")
    t.add_argument("--wheelhouse")

    r = sub.add_parser("run", help="run one of the project's configured commands with its wheel, in a clean "
                       "environment (bench, test, smoke, ...)")
    r.add_argument("name", choices=project.COMMAND_NAMES)
    _selection_args(r)
    r.add_argument("--wheel")
    r.add_argument("--wheelhouse")
    r.set_defaults(extra=[])  # everything after `--` is appended to the command (see parse)

    from windows import cli as windows_cli

    bw = sub.add_parser("build-win", help="build targets on this Windows host (vcvars64, CUDA toolkit, "
                        "cibuildwheel, delvewheel, PE audit)")
    _selection_args(bw)
    _output_args(bw)
    windows_cli.add_build_arguments(bw)

    jt = sub.add_parser("jit", help="run a command in an environment where torch.utils.cpp_extension.load() "
                        "finds the compiler and the farm's CUDA toolkit (vcvars64 on Windows)")
    windows_cli.add_jit_arguments(jt)

    from ci.commands import release
    from ci.gha import workflows

    rl = sub.add_parser("release", help="build, audit and test every Linux target; per-variant indexes, "
                        "SHA256SUMS and a manifest")
    _selection_args(rl)
    _output_args(rl)
    release.add_arguments(rl)

    wf = sub.add_parser("workflows", help="render .github/workflows from the matrix")
    _project_args(wf)
    workflows.add_arguments(wf)

    rp = sub.add_parser("reproduce", help="build one target twice from two clean clones and compare the bytes")
    _selection_args(rp)
    rp.add_argument("--container", action="store_true", help="build in the cell's container (build-cuda)")
    rp.add_argument("--base-image")
    rp.add_argument("--keep", action="store_true", help="keep the clones and wheels")

    bb = sub.add_parser("bench-builds", help="cold, warm and one-file build times of the host and container builds")
    _project_args(bb)
    bb.add_argument("--kind", action="append", default=[],
                    help="host, aarch64 (the host's cross build of the release target), or a CUDA cell for its "
                    "container build (13, 12, 13.2); repeatable (default: host, 13, 12)")
    bb.add_argument("--touch", help="the file the one-file rebuild changes (default: the smallest .cu)")
    bb.add_argument("--out", help="results folder (default: <project>/bench-results)")

    sub.add_parser("torch-archs", help="read the CUDA architectures of every torch release's own wheels from PyPI "
                   "and compare them with ci/universe/matrix.py")
    sub.add_parser("lock", help="compile every ci/requirements/*.in into a hash-pinned .txt (needs uv)")

    bi = sub.add_parser("base-image", help="bootstrap a Debian base image (no registry needed)")
    bi.add_argument("--suite", default="bookworm", choices=("bookworm", "trixie", "bullseye"))
    bi.add_argument("--mirror", help="Debian mirror URL (default: the one /etc/apt uses)")
    bi.add_argument("--force", action="store_true")

    im = sub.add_parser("images", help="build (or reuse) the builder image of each cell")
    im.add_argument("cells", nargs="*")
    im.add_argument("--base-image")
    im.add_argument("--rebuild", action="store_true")

    tk = sub.add_parser("toolkit", help="install (or reuse) a cell's hermetic CUDA toolkit")
    tk.add_argument("--cuda", default="13", help=DEFAULT_CUDA_HELP)
    tk.add_argument("--print-env", action="store_true", help="print shell exports for the toolkit")
    return p


#: Options that name something the user already has: it must exist, read from the caller's folder.
INPUT_PATHS = ("project", "config", "wheel", "ptx_wheel", "torch_env", "assemble", "import_test", "sdist_dir",
               "wheel_from_sdist", "manifests")
#: Options that name where the farm writes: made absolute against the caller's folder.
OUTPUT_PATHS = ("wheelhouse", "build_dir", "out", "sdist", "site")
#: Commands that compile, and so read MAX_JOBS.
COMPILING = ("build", "develop", "build-cuda", "build-all", "build-win", "release", "reproduce", "bench-builds")


def parse(argv: Sequence[str], *, cwd: Path | None = None, prog: str | None = None) -> argparse.Namespace:
    """Parse ``argv`` (``[command, *args]``); raises UsageError with one line on bad input.

    Every path option is made absolute here, against ``cwd`` (the folder the user ran the command in: nox
    gives it as ``session.invoked_from``), so nothing below depends on the folder the farm happens to run in.
    """
    argv = list(argv)
    extra: list[str] = []
    if argv[:1] == ["run"] and "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    args = build_parser(prog).parse_args(argv)
    if args.subcommand == "run":
        args.extra = extra
    if getattr(args, "traceback", False):
        os.environ["FARM_DEBUG"] = "1"
    if getattr(args, "cell", None):
        if args.cuda and args.cuda != args.cell:
            raise UsageError("two CUDA versions were given", f"{args.cell} and --cuda {args.cuda}", "give one")
        args.cuda = args.cell
    _absolute_paths(args, (cwd or Path.cwd()).resolve())
    if getattr(args, "arch_list", None) is not None and not args.arch_list.strip():
        raise UsageError("--arch-list is empty", repr(args.arch_list),
                         "give architectures such as '9.0;10.0+PTX', or leave the option out for the target's own")
    if args.subcommand in COMPILING and os.environ.get("MAX_JOBS") is not None:
        try:
            positive_int(os.environ["MAX_JOBS"])
        except argparse.ArgumentTypeError:
            raise UsageError("MAX_JOBS is not a positive whole number", repr(os.environ["MAX_JOBS"]),
                             "set it to the number of parallel compile jobs (MAX_JOBS=4), or unset it") from None
    return args


def _absolute_paths(args: argparse.Namespace, cwd: Path) -> None:
    for name in (*INPUT_PATHS, *OUTPUT_PATHS):
        value = getattr(args, name, None)
        if not isinstance(value, str) or not value:
            continue
        given = Path(value).expanduser()
        path = given if given.is_absolute() else cwd / given
        if name in INPUT_PATHS and not path.exists():
            flag = "--" + name.replace("_", "-")
            if name == "project" and "FARM_PROJECT" in os.environ:
                flag = "--project (or FARM_PROJECT)"
            elif args.subcommand == "audit" and name == "wheel":
                flag = "the wheel"  # audit's positional argument
            where = "" if given.is_absolute() else f" (a relative path is read from the folder you ran in, {cwd})"
            raise UsageError(f"{flag} does not exist", value, f"pass an existing path{where}")
        setattr(args, name, str(path))


def validate(args: argparse.Namespace) -> None:
    """Everything about the arguments that can be checked without installing or building anything."""
    command = args.subcommand
    if command == "build-win":
        from windows import cli as windows_cli

        windows_cli.check_host()
    for option in ("wheel", "ptx_wheel"):
        value = getattr(args, option, None)
        if value and command in ("audit", "test-gpu", "test", "run"):
            from ci import wheelmeta

            with wheelmeta.open_wheel(Path(value)):
                pass
    if hasattr(args, "target"):
        options.check_toolkit_libraries(options.resolve(args, os_name="windows" if command == "build-win"
                                                        else "linux"))
    elif hasattr(args, "project"):
        options.load_project(args)
    if command in ("shell", "toolkit", "jit"):
        matrix.resolve(args.cuda)
    if command == "images":
        matrix.cells(args.cells or None)
    if command == "test-gpu":
        options.parse_lanes(args.lanes)


def session_args(command: str, posargs: Sequence[str], *, cwd: Path | None = None,
                 prog: str | None = None) -> argparse.Namespace:
    """For noxfile.py and the installable command: parse and validate a command's arguments (paths read from
    ``cwd``, default the current folder); raise UsageError on bad input."""
    args = parse([command, *posargs], cwd=cwd, prog=prog)
    validate(args)
    return args


