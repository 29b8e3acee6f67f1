"""What a command is: a :class:`Command` (its name, help, traits, parser hook and ``run``), and the argument groups
commands share (the project, the selection of targets, the output folders).

Standard library only at import time: ``ci/cli.py`` (and so ``noxfile.py`` and the launcher) builds the parser
from the table before any environment exists; a command imports what it runs with inside ``run``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from ci import settings
from ci.options import Options

DEFAULT_CUDA_HELP = "CUDA toolkit: version (13.0), cell name (cu130) or major (13 = its release cell)"


@dataclasses.dataclass(frozen=True)
class Traits:
    """What the entry does for a command before it runs, as data."""

    #: it compiles, and so reads MAX_JOBS (checked before anything runs)
    compiles: bool = False
    #: an empty selection means the project's default target
    default_target: bool = False
    #: of several selected targets it builds one, unless --all
    one_target: bool = False
    #: the CUDA an empty selection means
    default_cuda: str | None = None
    #: the targets it acts on are resolved (and their toolkit libraries checked) before it runs
    selects: bool = False
    #: without a selection: the project is read (and so refused) before it runs
    project: bool = False
    #: the OS its targets are for
    os: str = "linux"
    #: options naming something the user already has: they must exist (read from the caller's folder)
    input_paths: tuple[str, ...] = ()
    #: options naming where the farm writes: made absolute against the caller's folder
    output_paths: tuple[str, ...] = ()
    #: options naming wheels: opened (a bad wheel refused) before anything runs; an empty selection is read from
    #: the first one's name
    wheels: tuple[str, ...] = ()
    #: how an error names a path option that is not a flag (dest -> words: "the wheel")
    labels: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    #: adds the command's own arguments to its parser
    configure: Callable[[argparse.ArgumentParser], None]
    #: the frozen dataclass of the command's own arguments (fields named as the parser's destinations)
    arguments: type[Any]
    run: Callable[[Options[Any]], int]
    traits: Traits = Traits()
    #: checks that need no environment, run before anything is created (after the traits' own)
    check: Callable[[Options[Any]], None] | None = None
    #: rewrites the parsed namespace (a verb's positional path into its option) before the options are made
    finish: Callable[[argparse.Namespace], None] | None = None
    #: noxfile.py makes a session of the same name that only passes its arguments through
    session: bool = True


@dataclasses.dataclass(frozen=True)
class NoArguments:
    """The arguments of a command that takes none of its own."""


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """``configure`` of a command without arguments of its own."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


# The shared argument groups. Their destinations are Options' own fields (project, config, selection, wheelhouse,
# build_dir, max_jobs), not the command's arguments; ci/cli.py puts them there.


def project_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", help="the extension project's folder (default: FARM_PROJECT, else the "
                        "current folder)")
    parser.add_argument("--config", help="a TOML file with the [tool.cuda-ext-farm] table, for a project you "
                        "cannot edit")


def top_prog(parser: argparse.ArgumentParser) -> str:
    """How the user ran the farm (``cuda-ext-farm``), from a command parser's own ``cuda-ext-farm build``: help names
    the command they typed."""
    return parser.prog.rsplit(" ", 1)[0]


def selection_args(parser: argparse.ArgumentParser) -> None:
    project_args(parser)
    parser.add_argument("--target", action="append", default=[],
                        help=f"a target id ({top_prog(parser)} matrix lists them); repeatable")
    parser.add_argument("--cuda", help=DEFAULT_CUDA_HELP)
    parser.add_argument("--torch", help="torch release (2.11 or 2.11.0): a classic project's target, or the torch a "
                        "stable-ABI build compiles against")
    parser.add_argument("--python", help="CPython version of a per-Python target (3.12)")
    parser.add_argument("--arch-list", help="override the architectures (TORCH_CUDA_ARCH_LIST syntax, e.g. "
                        "'9.0+PTX')")
    parser.add_argument("--arch", choices=("x86_64", "aarch64"),
                        help="the CPU architecture of the wheel (default x86_64; aarch64 is cross-compiled here and "
                        "import-tested under qemu)")


def max_jobs_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-jobs", type=positive_int, help="parallel compile jobs (MAX_JOBS)")


def output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wheelhouse",
                        help="where finished wheels go (default: FARM_WHEELHOUSE, else <project>/wheelhouse)")
    parser.add_argument("--build-dir",
                        help="build and staging folders (default: FARM_BUILD_DIR, else <cache>/build/<project>)")
    max_jobs_arg(parser)


def no_built_wheel(target_id: str, folder: object) -> Exception:
    """The one refusal of a command that needs the target's wheel and finds none."""
    from ci.errors import UsageError

    return UsageError(f"no built wheel of {target_id}", folder,
                      f"build it first ({settings.entry('build')}) or pass --wheel PATH")


def check_ca_bundle(opts: Options[Any]) -> None:
    """The commands that build images: ``FARM_CA_BUNDLE`` at a missing file is refused before the first step (the
    image builds would read it only after the base image)."""
    from pathlib import Path

    from ci.errors import UsageError

    given = opts.settings.get("FARM_CA_BUNDLE")
    if given and not Path(given).expanduser().is_file():
        raise UsageError("FARM_CA_BUNDLE does not point at a file", given,
                         "point it at a PEM bundle (e.g. /etc/ssl/certs/ca-certificates.crt) or unset it")
