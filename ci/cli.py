"""The farm's command line, shared by ``python -m ci``, ``noxfile.py`` and the launcher: the parser built from the
command table (``ci/commands``), the settings resolved once (``ci/settings.py``), and the frozen options a command
receives (``ci/options.py``).

Nox sessions hand their arguments to :func:`session_args` before any virtual environment is created or anything
installed, so a bad value costs nothing and is reported once, in the same words as ``python -m ci``.

Standard library plus ``packaging`` only (nox brings it).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ci import options, settings
from ci.builds.progress import deadline as compile_deadline
from ci.commands import (
    adopt_torch,
    audit,
    base_image,
    bench_builds,
    build,
    build_all,
    build_cuda,
    build_win,
    coverage,
    develop,
    doctor,
    images,
    jit,
    lock,
    matrix,
    reference,
    release,
    reproduce,
    run,
    shell,
    test,
    test_gpu,
    toolkit,
    torch_archs,
    workflows,
)
from ci.commands.command import Command, positive_int
from ci.commands.release import args as release_args
from ci.errors import UsageError
from ci.universe.selection import Selection

#: Every command, in the order ``--help`` lists them.
COMMANDS: dict[str, Command] = {c.name: c for c in (
    matrix.COMMAND, build.COMMAND, develop.COMMAND, audit.COMMAND, build_cuda.COMMAND, build_all.COMMAND,
    coverage.COMMAND, doctor.COMMAND, shell.COMMAND, test_gpu.COMMAND, test.COMMAND, run.COMMAND, build_win.COMMAND,
    jit.COMMAND, release.COMMAND, workflows.COMMAND, reproduce.COMMAND, bench_builds.COMMAND, torch_archs.COMMAND,
    lock.COMMAND, base_image.COMMAND, images.COMMAND, toolkit.COMMAND, adopt_torch.COMMAND,
)}


def commands_markdown() -> str:
    """``docs/commands.md``: every command, by group, with every option, from the parsers themselves."""
    parser = build_parser(prog="cuda-ext-farm", environ={})
    verbs = [f"* `release {verb}{' ' + arg if arg else ''}`: {text.replace('<', '&lt;')}"
             for verb, (arg, text) in release_args.VERBS.items()]
    verbs += [f"* `workflows {verb}`: {text}" for verb, text in workflows.VERBS.items()]
    verbs += ["* `images pull CELL`, `images push CELL`: a cell's builder image from / to the registry "
              "(`--registry`, FARM_REGISTRY); `images changed`: the project's Linux cells whose image tag the "
              "registry lacks, as JSON"]
    return reference.markdown(parser, parser.commands, COMMANDS, verbs)


class Parser(argparse.ArgumentParser):
    """argparse that raises one-line UsageErrors instead of printing usage and exiting, and names the nearest
    command, choice or option to a mistyped one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations: `--wheel` must not silently mean `--wheelhouse` on a command without --wheel.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        #: the command parsers, by name (the top-level parser's)
        self.commands: dict[str, Parser] = {}

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"bad arguments for {self.prog}", message, f"see `{self.prog} --help`")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        near = difflib.get_close_matches(str(value), [str(c) for c in action.choices], n=1, cutoff=0.6)
        if isinstance(action, argparse._SubParsersAction):
            raise UsageError("unknown command", value, (f"did you mean `{self.prog} {near[0]}`? " if near else "")
                             + f"`{self.prog} --help` lists the commands")
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            raise UsageError(f"bad arguments for {self.prog}", str(exc),
                             (f"did you mean {near[0]!r}? " if near else "") + f"see `{self.prog} --help`") from None


#: The options every command takes, before or after its name.
GLOBAL_FLAGS = ("--traceback", "--show-settings")
GLOBAL_HELP = {"--traceback": "show Python tracebacks (also FARM_DEBUG=1)",
               "--show-settings": "print every resolved setting and where its value came from, then exit without "
                                  "running the command (FARM_DEBUG=1 prints them and runs it)"}


class _Version(argparse.Action):
    """``--version``: the farm's version and the commit it was built from (ci/commands/farm_source.py), read when
    asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help"))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from ci.commands import farm_source

        print(farm_source.current().describe(), flush=True)
        parser.exit()


def build_parser(prog: str | None = None, environ: Mapping[str, str] | None = None) -> Parser:
    environ = os.environ if environ is None else environ
    # FARM_PROG: the installable command runs `python -m ci` under its own name, so messages name what was typed.
    prog = prog or environ.get("FARM_PROG") or "python -m ci"
    p = Parser(prog=prog, description="Build, repair, audit and test PyTorch C++/CUDA extension wheels.",
               epilog=reference.epilog(COMMANDS, prog), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action=_Version, help="print the farm's version and the commit it was built from")
    for flag, text in GLOBAL_HELP.items():
        p.add_argument(flag, action="store_true", help=text)
    sub = p.add_subparsers(dest="subcommand", required=True, parser_class=Parser, metavar="COMMAND",
                           title="commands", help="one of those below")
    for command in COMMANDS.values():
        parser = sub.add_parser(command.name, description=command.help)
        command.configure(parser)
        for flag, text in GLOBAL_HELP.items():  # after the command's name too; absent: the top level's value stays
            parser.add_argument(flag, action="store_true", default=argparse.SUPPRESS, help=text)
        p.commands[command.name] = parser
    return p


# --- the old spellings of today's verbs (kept for one release) ----------------------------------------------------

#: (command, old flag) -> (command, verb, whether the flag took a value)
RENAMED: dict[tuple[str, str], tuple[str, str, bool]] = {
    **{("release", f"--{verb}"): ("release", verb, verb != "dry-run")
       for verb in ("dry-run", "assemble", "import-test", "sdist", "wheel-from-sdist", "site")},
    ("workflows", "--check"): ("workflows", "check", False),
    ("workflows", "--lint"): ("workflows", "lint", False),
    ("workflows", "--pull-image"): ("images", "pull", True),
    ("workflows", "--push-image"): ("images", "push", True),
    ("workflows", "--changed-cells"): ("images", "changed", False),
    ("workflows", "--dispatch-plan"): ("release", "dispatch-plan", False),
    ("workflows", "--dispatch-assemble"): ("release", "dispatch-assemble", True),
    ("workflows", "--dispatch-merge"): ("release", "dispatch-merge", True),
}


def translate(argv: Sequence[str], *, notes: bool = True) -> list[str]:
    """``release --dry-run ...`` -> ``release dry-run ...`` (and the other renamed modes), with one note on stderr
    (``notes``: the process that runs the command says it; nox's and the launcher's checks stay quiet)."""
    argv = list(argv)
    at = next((i for i, a in enumerate(argv) if a not in GLOBAL_FLAGS), len(argv))
    if at == len(argv):
        return argv
    command, rest = argv[at], argv[at + 1:]
    found: list[tuple[int, str, str | None]] = []  # (index, flag, value)
    i = 0
    while i < len(rest) and rest[i] != "--":
        flag, eq, value = rest[i].partition("=")
        renamed = RENAMED.get((command, flag))
        if renamed is not None:
            takes = renamed[2]
            if takes and not eq:
                if i + 1 >= len(rest):
                    raise UsageError(f"bad arguments for {command}", f"argument {flag}: expected one argument",
                                     f"see `{os.environ.get('FARM_PROG') or 'python -m ci'} {command} --help`")
                found.append((i, flag, rest[i + 1]))
                i += 2
                continue
            found.append((i, flag, value if takes else None))
        i += 1
    if not found:
        return argv
    if len(found) > 1:
        raise UsageError(f"two {command} modes given", " and ".join(f for _, f, _ in found), "give one")
    index, flag, argument = found[0]
    new_command, verb, takes = RENAMED[(command, flag)]
    if notes:
        print(f'note: {flag} is now "{new_command} {verb}"', file=sys.stderr, flush=True)
    kept = rest[:index] + rest[index + (2 if takes and "=" not in rest[index] else 1):]
    return [*argv[:at], new_command, verb, *([argument] if argument is not None else []), *kept]


# --- parse and resolve ------------------------------------------------------------------------------------------


#: Selection options whose empty value (`--cuda ''`, a variable that expanded to nothing) is refused.
EMPTY_REFUSED = (("cuda", "--cuda 13.0"), ("torch", "--torch 2.11"), ("python", "--python 3.12"))


def parse(argv: Sequence[str], *, cwd: Path | None = None, prog: str | None = None,
          environ: Mapping[str, str] | None = None, notes: bool = True) -> options.Options[Any]:
    """Parse ``argv`` (``[command, *args]``) and resolve its settings into the frozen options; raises UsageError with
    one line on bad input.

    Every path option is made absolute here, against ``cwd`` (the folder the user ran the command in: nox gives it as
    ``session.invoked_from``), so nothing below depends on the folder the farm happens to run in."""
    return read(argv, cwd=cwd, prog=prog, environ=environ, notes=notes)[0]


def only_global_flags(argv: Sequence[str]) -> bool:
    """No command, only flags of the farm itself (``--show-settings`` alone)."""
    return all(a in GLOBAL_FLAGS for a in argv)


def read(argv: Sequence[str], *, cwd: Path | None = None, prog: str | None = None,
         environ: Mapping[str, str] | None = None, notes: bool = True) -> tuple[options.Options[Any], frozenset[str]]:
    """:func:`parse`, and the global flags given (``--show-settings``, ``--traceback``), before or after the
    command's name."""
    environ = os.environ if environ is None else environ
    argv = translate(argv, notes=notes)
    extra: list[str] = []
    first = next((a for a in argv if a not in GLOBAL_FLAGS), None)
    if first == "run" and "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    ns = _parse(build_parser(prog, environ), argv)
    flags = frozenset(f for f in GLOBAL_FLAGS if getattr(ns, f[2:].replace("-", "_"), False))
    for flag in GLOBAL_FLAGS:
        vars(ns).pop(flag[2:].replace("-", "_"), None)
    command = COMMANDS[ns.subcommand]
    if command.name == "run":
        ns.extra = extra
    if command.finish is not None:
        command.finish(ns)
    arch_list = getattr(ns, "arch_list", None)
    if arch_list is not None and not arch_list.strip():
        raise UsageError("--arch-list is empty", repr(arch_list),
                         "give architectures such as '9.0;10.0+PTX', or leave the option out for the target's own")
    for dest, example in EMPTY_REFUSED:
        given = getattr(ns, dest, None)
        if isinstance(given, str) and not given.strip():  # an empty value is a mistake, never "not given"
            raise UsageError(f"--{dest.replace('_', '-')} is empty", repr(given),
                             f"give one ({example}), or leave the option out")
    resolved = settings.resolve(environ, _flags(command, ns))
    if command.traits.compiles and resolved.source("MAX_JOBS") == "env":
        try:
            positive_int(str(resolved.get("MAX_JOBS")))
        except argparse.ArgumentTypeError:
            raise UsageError("MAX_JOBS is not a positive whole number", repr(environ["MAX_JOBS"]),
                             "set it to the number of parallel compile jobs (MAX_JOBS=4), or unset it") from None
    for setting in settings.DECLARED:
        _check_choice(setting, resolved.get(setting.env) if not setting.prefix else None)
    memory = resolved.get("FARM_CONTAINER_MEMORY")
    if command.traits.compiles and memory and settings.memory_amount(memory) is None:
        # as the container route would, after its builder image was made (ci/linux/container_compiles.py)
        raise UsageError("FARM_CONTAINER_MEMORY is not an amount of memory", repr(memory),
                         "give docker's form: 6g, 6144m")
    given = resolved.get("FARM_DEADLINE")
    if command.traits.compiles and given:
        moment = compile_deadline.at_entry(given)
        resolved = dataclasses.replace(resolved, values={
            **resolved.values, "FARM_DEADLINE": settings.Resolved(moment, resolved.source("FARM_DEADLINE"))})
    _absolute_paths(command, ns, (cwd or Path.cwd()).resolve(), resolved, environ)
    return _options(command, ns, resolved), flags


def _check_choice(setting: settings.Setting, value: str | None) -> None:
    """A setting that takes only some values (``choices``) refused with another, before anything runs."""
    if not setting.choices or value is None or value.strip().lower() in setting.choices:
        return
    options = ("neither " + " nor ".join(setting.choices) if len(setting.choices) == 2 else
               "not one of " + ", ".join(setting.choices))
    what = f"{setting.env} is {options}"
    raise UsageError(what, repr(value), f"give {' or '.join(setting.choices)}"
                     + (" (the default: leave it unset)" if setting.default in setting.choices else ""))


def _parse(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args``, but an option the command does not have is named with the value the user gave it (argparse
    reports what is left over, which for ``doctor --config FILE INDEX`` is ``--config INDEX``)."""
    ns, rest = parser.parse_known_args(argv)
    if not rest:
        return ns
    unknown = next((a for a in rest if a.startswith("-")), None)
    if unknown is None or unknown not in argv:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    at = argv.index(unknown)
    given = argv[at:at + 2] if "=" not in unknown and argv[at + 1:at + 2] and not argv[at + 1].startswith("-") \
        else [unknown]
    command, flag = ns.subcommand, unknown.partition("=")[0]
    known = [o for a in parser.commands[command]._actions for o in a.option_strings if o.startswith("--")]
    near = difflib.get_close_matches(flag, known, n=1, cutoff=0.7)
    raise UsageError(f"{command} has no option {flag}", " ".join(given),
                     (f"did you mean {near[0]}? " if near else "") + f"see `{parser.prog} {command} --help` for its "
                     "options")


def _flags(command: Command, ns: argparse.Namespace) -> dict[str, object]:
    """The declared settings' flags this command has, by variable."""
    flags: dict[str, object] = {}
    for setting in settings.DECLARED:
        dest = setting.dest
        if dest and hasattr(ns, dest) and (not setting.commands or command.name in setting.commands):
            flags[setting.env] = getattr(ns, dest)
    return flags


def _absolute_paths(command: Command, ns: argparse.Namespace, cwd: Path, resolved: settings.Settings,
                    environ: Mapping[str, str]) -> None:
    if hasattr(ns, "project"):
        ns.project = resolved.get("FARM_PROJECT")  # the flag, else FARM_PROJECT
    traits = command.traits
    inputs = ("project", "config", *traits.input_paths)
    labels = dict(traits.labels)
    for name in (*inputs, "wheelhouse", "build_dir", *traits.output_paths):
        value = getattr(ns, name, None)
        if not isinstance(value, str) or not value:
            continue
        given = Path(value).expanduser()
        path = given if given.is_absolute() else cwd / given
        if name in inputs and not path.exists():
            flag = labels.get(name, "--" + name.replace("_", "-"))
            if name == "project" and "FARM_PROJECT" in environ:
                flag = "--project (or FARM_PROJECT)"
            where = "" if given.is_absolute() else f" (a relative path is read from the folder you ran in, {cwd})"
            raise UsageError(f"{flag} does not exist", value, f"pass an existing path{where}")
        setattr(ns, name, str(path))


#: Where the resolved TORCH_CUDA_ARCH_LIST came from (its source) -> how its errors name it.
ARCH_LIST_FROM = {"flag": "--arch-list", "env": "TORCH_CUDA_ARCH_LIST"}


def _options(command: Command, ns: argparse.Namespace, resolved: settings.Settings) -> options.Options[Any]:
    def value(name: str) -> Any:
        found = getattr(ns, name, None)
        return tuple(found) if isinstance(found, list) else found

    fields = {f.name: value(f.name) for f in dataclasses.fields(command.arguments) if hasattr(ns, f.name)}
    selection = Selection(target_ids=tuple(getattr(ns, "target", None) or ()), cuda=getattr(ns, "cuda", None),
                          torch=getattr(ns, "torch", None), python=getattr(ns, "python", None),
                          arch_list=resolved.get("TORCH_CUDA_ARCH_LIST"), arch=getattr(ns, "arch", None),
                          arch_list_from=ARCH_LIST_FROM.get(resolved.source("TORCH_CUDA_ARCH_LIST")))
    if not hasattr(ns, "target"):  # no selection options: the architectures are the command's business
        selection = Selection()
    traits = command.traits
    wheel = getattr(ns, traits.wheels[0], None) if traits.wheels else None
    if selection.empty and wheel:
        selection = options.selection_from_wheel(wheel, selection.arch_list)
    every = bool(getattr(ns, "all", False))
    max_jobs = getattr(ns, "max_jobs", None)
    if max_jobs is None and traits.compiles and resolved.get("MAX_JOBS"):
        max_jobs = int(str(resolved.get("MAX_JOBS")))
    return options.Options(
        command=command.name, args=command.arguments(**fields), settings=resolved,
        project=getattr(ns, "project", None), config=getattr(ns, "config", None), selection=selection,
        wheelhouse=getattr(ns, "wheelhouse", None), build_dir=getattr(ns, "build_dir", None), max_jobs=max_jobs,
        default_target=traits.default_target and not every, one_target=traits.one_target and not every,
        default_cuda=traits.default_cuda)


# --- checks before anything is created --------------------------------------------------------------------------


def validate(opts: options.Options[Any]) -> None:
    """Everything about the options that can be checked without installing or building anything."""
    command = COMMANDS[opts.command]
    traits = command.traits
    if traits.os == "windows":
        from windows import cli as windows_cli

        windows_cli.check_host()
    for name in traits.wheels:
        wheel = getattr(opts.args, name, None)
        if wheel:
            from ci import wheelmeta

            with wheelmeta.open_wheel(Path(wheel)):
                pass
    if traits.selects:
        options.check_toolkit_libraries(options.resolve(opts, os_name=traits.os))
    elif traits.project:
        options.load_project(opts)
    if command.check is not None:
        command.check(opts)


def session_args(command: str, posargs: Sequence[str], *, cwd: Path | None = None,
                 prog: str | None = None) -> options.Options[Any]:
    """For noxfile.py and the installable command: parse and validate a command's arguments (paths read from
    ``cwd``, default the current folder); raise UsageError on bad input."""
    opts = parse([command, *posargs], cwd=cwd, prog=prog, notes=False)
    validate(opts)
    return opts

