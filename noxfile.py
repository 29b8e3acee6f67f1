"""The farm's interface. Sessions stay thin: they validate their arguments with the farm's own
parser (before anything is created or installed), then call ``python -m ci``. The sessions that only pass their
arguments through are made from the command table (``ci/commands/__init__.py``); the ones written here do more.

Another project uses the farm without copying it:

    nox -f /path/to/farm/noxfile.py -s build -- --project .

(or ``export FARM_PROJECT=$PWD``). ``nox -l`` lists the sessions; docs/contributing.md has the table.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from ci import cli, errors, settings, toolenv  # noqa: E402  (stdlib + packaging only)
from ci.universe import matrix  # noqa: E402

REQUIREMENTS = ROOT / "ci" / "requirements"
#: pytest-xdist's workers for the default suite (one per core, at most 4) and how it shares the tests out.
PARALLEL = ("--numprocesses", "auto", "--maxprocesses", "4", "--dist", "loadfile")


def _fail(exc: errors.FarmError) -> None:
    """End the nox run with the farm's own last line and exit code (not nox's 'Session failed')."""
    sys.stdout.flush()
    print(exc.line(), file=sys.stderr, flush=True)
    raise SystemExit(exc.exit_code)


def _envdir() -> str:
    """Session venvs: FARM_NOX_ENVDIR, else .nox in the farm's checkout, else (read-only checkout) the cache."""
    chosen = settings.value("FARM_NOX_ENVDIR")
    if chosen:
        path = Path(chosen).expanduser()
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:  # nox would end in a traceback creating the first venv
            _fail(errors.UsageError("FARM_NOX_ENVDIR is not a folder",
                                    chosen if blocker == path else f"{chosen}; {blocker} is a file",
                                    "point it at a folder (or unset it: the farm's .nox, else the cache)"))
        return chosen
    if os.access(ROOT, os.W_OK):
        return str(ROOT / ".nox")
    return str(toolenv.cache_root() / "nox")


nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]
# Rebuilding a venv reinstalls torch (GBs); reuse them, nox -s X --reuse-venv=no forces a fresh one.
nox.options.reuse_venv = "yes"
nox.options.envdir = _envdir()


#: Set while a ``python -m ci`` child runs (``_run_farm``): a SIGTERM is handed to it.
_FARM_CHILD = {"running": False}


def _children() -> list[int]:
    """The processes nox started (Linux: read from /proc; elsewhere none are found)."""
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == os.getpid():
                found.append(int(entry.name))
    return found


def _terminate(signum: int, frame: object) -> None:
    # A CI runner's cancel sends SIGTERM, which would otherwise kill nox and orphan the build. While the farm runs,
    # the signal goes to it: it stops its builds, prints its interrupted line and ends 143, which _run_farm makes nox's
    # exit code (the documented one). Otherwise nox's own handling: KeyboardInterrupt stops the running command.
    children = _children() if _FARM_CHILD["running"] else []
    if not children:
        raise KeyboardInterrupt
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


signal.signal(signal.SIGTERM, _terminate)

RELEASE = matrix.get_cell("13")
#: How long nox waits for `python -m ci` to stop its children and clean up after an interrupt.
INTERRUPT = {"interrupt_timeout": 2.0, "terminate_timeout": 60.0}


def _validate(session: nox.Session, command: str, posargs: Sequence[str]) -> None:
    try:
        cli.session_args(command, posargs, cwd=_caller(session))
    except errors.FarmError as exc:
        _fail(exc)
    except SystemExit as exc:  # --help: argparse printed it
        raise SystemExit(exc.code) from None


def farm_python(lock: str = "farm") -> str:
    """The farm's tool environment (``ci/toolenv.py``): every farm session runs in it, as the installable
    command does."""
    return str(toolenv.farm_python(lock))


def _caller(session: nox.Session) -> Path:
    """The folder nox was run from: nox runs sessions in the noxfile's folder, but a path the user typed (and the
    default project, the current folder) means what it means in the user's shell."""
    return Path(session.invoked_from)


def _caller_pythonpath() -> dict[str, str]:
    """The caller's own PYTHONPATH, kept aside for the commands `jit` runs in the caller's environment."""
    return {"FARM_CALLER_PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}


def _run_farm(session: nox.Session, python: str, *args: str, env: dict[str, str] | None = None) -> None:
    """Run ``python -m ci ARGS`` in the caller's folder; a failure ends nox with the farm's last line and exit
    code."""
    with tempfile.TemporaryDirectory(prefix="farm-status-") as tmp, session.chdir(_caller(session)):
        status = Path(tmp) / "code"
        _FARM_CHILD["running"] = True
        try:
            session.run(python, "-m", "ci", *args, external=True, success_codes=list(range(256)),
                        env={"PYTHONPATH": str(ROOT), "FARM_STATUS_FILE": str(status), **_caller_pythonpath(),
                             **(env or {})}, **INTERRUPT)
        finally:
            _FARM_CHILD["running"] = False
        code = int(status.read_text()) if status.is_file() else 0
    if code != 0:
        raise SystemExit(code)


def _farm(session: nox.Session, command: str, *args: str) -> None:
    """Validate, then run ``python -m ci COMMAND ARGS`` in the farm's tool environment."""
    argv = [*args, *session.posargs]
    _validate(session, command, argv)
    _run_farm(session, farm_python(), command, *argv)


# --- the pass-through sessions: one per command of the table that has one (ci/commands/__init__.py) ---------------


def _pass_through(command: str, help_text: str) -> None:
    """``nox -s COMMAND -- ARGS``: validate, then ``python -m ci COMMAND ARGS``; its docstring is the command's help."""

    def session_body(session: nox.Session) -> None:
        _farm(session, command)

    session_body.__doc__ = help_text[:1].upper() + help_text[1:] + "."
    session_body.__name__ = session_body.__qualname__ = command.replace("-", "_")
    nox.session(name=command, venv_backend="none")(session_body)


for _command in cli.COMMANDS.values():
    if _command.session:
        _pass_through(_command.name, _command.help)


# --- the farm's own tests ----------------------------------------------------------------------


def _release_wheel(session: nox.Session, python: str) -> Path:
    """Build the farm checkout's release wheel unless the wheelhouse has it; returns its path."""
    from ci.universe import targets
    from ci.universe.project import reading
    from ci.universe.targets import platforms

    target = targets.default_target(reading.load(ROOT), prefer_python=platforms.current_python())
    folder = Path(settings.value("FARM_WHEELHOUSE") or ROOT / "wheelhouse") / target.id
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        _run_farm(session, python, "build", "--project", str(ROOT))
        wheels = sorted(folder.glob("*.whl"))
    return wheels[-1]


def _torch_from_the_farm(session: nox.Session, version: str, flavor: str = "cuda") -> None:
    """The session's venv sees torch through a .pth file: the farm's own environment of that torch (one per torch
    release, flavour and Python: ci/toolchain/envs.py, made or reused), not a second install of several GB."""
    where = session.run("python", "-c", "import sys, sysconfig; print('%d.%d' % sys.version_info[:2]); "
                        "print(sysconfig.get_paths()['purelib'])", silent=True)
    python, site = str(where).split()[-2:]
    with tempfile.TemporaryDirectory(prefix="farm-torch-") as tmp:
        out = Path(tmp) / "sites"
        code = ("import pathlib, sys; from ci.toolchain import envs; env = envs.torch_env(sys.argv[1], "
                "envs.TorchBuild(sys.argv[2], sys.argv[3])); "
                "pathlib.Path(sys.argv[4]).write_text(''.join(f'{p}\\n' for p in env.visible_sites()))")
        session.run(farm_python(), "-c", code, python, version, flavor, str(out), external=True,
                    env={"PYTHONPATH": str(ROOT)})
        Path(site, "_farm_torch.pth").write_text(out.read_text())


def _test_venv(session: nox.Session) -> Path:
    """The test session's tools, torch (the farm's environment of the release's torch, which the release build
    made) and the release wheel (built first if the wheelhouse has none)."""
    wheel = _release_wheel(session, farm_python())
    _torch_from_the_farm(session, RELEASE.torch)
    session.install("--require-hashes", "--no-deps", "-r", str(REQUIREMENTS / "test.txt"))
    session.install("--no-deps", "--force-reinstall", str(wheel))
    return wheel


@nox.session
def tests(session: nox.Session) -> None:
    """The farm's test suite but the extended part: builds the release wheel if needed, installs it, runs pytest;
    then compat under a CPU-only torch."""
    wheel = _test_venv(session)
    env = {"FARM_TEST_WHEEL": str(wheel)}
    if session.posargs:
        session.run("pytest", *session.posargs, env=env)
    else:
        # Container builds (a bootstrapped base, builder images) and the long runs of paths the suite already covers
        # briefly (reproducibility from two clones, the dev loop, signals and locks) would take CI past 30 minutes.
        # Each part (ci/toolenv.py PYTEST_RUNS) on a worker per core (at most 4: an integration build compiles on
        # every core itself), a test file a worker, so a module's fixture builds once.
        for run in toolenv.PYTEST_RUNS["tests"]:
            session.run("pytest", *run.paths, "-m", run.markers, "--durations=25", *PARALLEL, env=env)
    session.notify("compat(torch='2.13.0+cpu')")


@nox.session(name="tests-extended")
def tests_extended(session: nox.Session) -> None:
    """The container tests and the long runs (-m 'docker or extended'): on a schedule in GitHub's extended-tests
    workflow, or by hand (.ci/run extended installs their system packages first)."""
    _missing_system_packages(session)
    wheel = _test_venv(session)
    (run,) = toolenv.PYTEST_RUNS["tests-extended"]
    session.run("pytest", *run.paths, "-m", run.markers, *session.posargs, env={"FARM_TEST_WHEEL": str(wheel)})


def _missing_system_packages(session: nox.Session) -> None:
    """One warning naming the extended suite's system packages this machine lacks (their tests skip)."""
    script = ROOT / ".ci" / "system-packages"
    if sys.platform != "linux" or not script.is_file():
        return
    missing = str(session.run("bash", str(script), "extended", "--missing", external=True, silent=True)).split()
    if missing:
        session.warn(f"system packages missing: {', '.join(missing)}: the tests that need them skip; install them "
                     f"with `bash {script.relative_to(ROOT)} extended` (as root) or run `.ci/run extended`")


COMPAT_TORCH = ["2.13.0+cpu", "2.11.0", "2.13.0", "2.15.0"]


@nox.session
@nox.parametrize("torch", COMPAT_TORCH)
def compat(session: nox.Session, torch: str) -> None:
    """The one stable-ABI wheel next to another torch: the CPU op tests."""
    from ci.universe import targets
    from ci.universe.project import reading
    from ci.universe.targets import platforms

    target = targets.default_target(reading.load(ROOT), prefer_python=platforms.current_python())
    wheels = sorted((Path(settings.value("FARM_WHEELHOUSE") or ROOT / "wheelhouse") / target.id).glob("*.whl"))
    if not wheels:
        _fail(errors.UsageError("no built wheel of the release target", ROOT / "wheelhouse",
                                "run nox -s build first"))
    version, _, local = torch.partition("+")
    _torch_from_the_farm(session, version, "cpu" if local == "cpu" else "cuda")
    session.install("--require-hashes", "--no-deps", "-r", str(REQUIREMENTS / "test.txt"))
    session.install("--no-deps", "--force-reinstall", str(wheels[-1]))
    (run,) = toolenv.PYTEST_RUNS["compat"]
    session.run("pytest", *run.paths, "-m", run.markers, *session.posargs)


@nox.session(name="compat-floor")
def compat_floor(session: nox.Session) -> None:
    """The stable-ABI wheel at the torch floor its binary sets (its Requires-Dist, ci/audit/describe.py): pip
    installs it
    with that torch release from PyPI and the smoke test passes; with the release below, pip refuses it."""
    from ci.audit import describe
    from ci.universe import targets
    from ci.universe.project import reading
    from ci.universe.targets import platforms

    target = targets.default_target(reading.load(ROOT), prefer_python=platforms.current_python())
    wheels = sorted((Path(settings.value("FARM_WHEELHOUSE") or ROOT / "wheelhouse") / target.id).glob("*.whl"))
    if not wheels:
        _fail(errors.UsageError("no built wheel of the release target", ROOT / "wheelhouse", "run nox -s build first"))
    at, below = describe.floor_releases(wheels[-1])
    session.log(f"{wheels[-1].name}: torch floor {at} (from its binary); the release below is {below}")
    session.install(str(wheels[-1]), f"torch=={at},!={at}+cpu", env={"PIP_CONSTRAINT": os.devnull})
    session.chdir(session.create_tmp())  # the source tree must not shadow the installed wheel
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")
    session.run("python", str(ROOT / "package" / "tests" / "smoke_import.py"))
    refused = session.run("python", "-m", "pip", "install", "--dry-run", "--ignore-installed", str(wheels[-1]),
                          f"torch=={below}", success_codes=[0, 1], silent=True, env={"PIP_CONSTRAINT": os.devnull})
    if "ResolutionImpossible" not in str(refused):
        session.error(f"pip did not refuse the wheel with torch {below}, below its floor {at}:\n{refused}")
    session.log(f"pip refuses it with torch {below}: " + next(
        (line.strip() for line in str(refused).splitlines() if "depends on torch" in line), "ResolutionImpossible"))


@nox.session
def lock(session: nox.Session) -> None:
    """Recompile every hash-pinned lock in ci/requirements/ (the toolkit locks from the matrix); commit the result."""
    session.install("uv")
    session.install("--require-hashes", "--no-deps", "-r", str(REQUIREMENTS / "farm.txt"))
    _run_farm(session, "python", "lock")


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff, mypy (strict) and the floor plan over the farm's code (ci/toolenv.py LINT_COMMANDS, what CI's lint job
    runs too); the workflow drift check and linters."""
    if session.posargs:
        _fail(errors.UsageError("nox -s lint takes no arguments", " ".join(session.posargs),
                                "run `nox -s lint` alone (ruff, mypy and the workflow linters over the farm)"))
    python = farm_python("lint")
    for _name, args in toolenv.LINT_COMMANDS:
        session.run(python, *args, external=True)
    _run_farm(session, python, "workflows", "check", "--project", str(ROOT))
    _run_farm(session, python, "workflows", "lint", "--project", str(ROOT))


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """The project's configured benchmark command with its wheel, in a clean environment [-- ARGS for it]."""
    _validate(session, "run", ["bench"])
    _run_farm(session, farm_python(), "run", "bench", "--", *session.posargs)


# --- container builds (docker/, ci/linux/images.py, ci/linux/container.py) -----------------------------------


@nox.session(name="build-cuda-13", venv_backend="none")
def build_cuda_13(session: nox.Session) -> None:
    """The project's targets in the CUDA 13 release cell, built by cibuildwheel in its image."""
    _farm(session, "build-cuda", "--cuda", "13")


@nox.session(name="build-cuda-12", venv_backend="none")
def build_cuda_12(session: nox.Session) -> None:
    """The project's targets in the CUDA 12 release cell, built by cibuildwheel in its image."""
    _farm(session, "build-cuda", "--cuda", "12")


# --- Windows (windows/) -------------------------------------------------------------------------


@nox.session(name="build-win-cuda-13", venv_backend="none")
def build_win_cuda_13(session: nox.Session) -> None:
    """The project's CUDA 13 targets on this Windows host (Visual Studio needed; exits at once elsewhere)."""
    _farm(session, "build-win", "--cuda", "13")


@nox.session(name="build-win-cuda-12", venv_backend="none")
def build_win_cuda_12(session: nox.Session) -> None:
    """The project's CUDA 12 targets on this Windows host (Visual Studio needed; exits at once elsewhere)."""
    _farm(session, "build-win", "--cuda", "12")


# --- GPU test lanes (ci/testing/gpu_lanes.py) ----------------------------------------------------------------


@nox.session(name="test-gpu-system", venv_backend="none")
def test_gpu_system(session: nox.Session) -> None:
    """Like test-gpu, with the current interpreter and its torch (GPU boxes with torch preinstalled, no network)."""
    _validate(session, "test-gpu", [*session.posargs, "--system"])
    _run_farm(session, sys.executable, "test-gpu", "--system", *session.posargs)
