"""The project's own smoke and CPU tests against a built wheel, in a clean environment.

The test environment is a new venv that sees the target's torch (from its
build environment, through a ``.pth`` file) and the installed wheel, and
nothing of the build. ``pip check`` runs first: a classic wheel's torch pin must
be satisfied by the torch it is tested with.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ci import proc, settings, wheelmeta
from ci.errors import UsageError
from ci.log import log
from ci.testing import gil_probe
from ci.toolchain import envs
from ci.universe import project_commands
from ci.universe.targets import Target


def test_install(target: Target, wheel: Path, *wanted: str) -> list[str]:
    """What ``pip install`` gets in a wheel's test environment: the wheel with its extras (the project's
    ``test-extras``, each of which the wheel must provide, and those of ``wanted`` it provides: the ``test``
    extra, the command's own) and the project's ``test-requires``, resolved together (one pip run, so a test
    requirement cannot move the torch the wheel pins)."""
    config = target.project
    meta = wheelmeta.read_metadata(wheel)
    provided = {re.sub(r"[-_.]+", "-", e.strip()).lower() for e in meta.get("Provides-Extra", [])}
    missing = [e for e in config.test_extras if e not in provided]
    if missing:
        raise UsageError(f"the wheel provides no extra {missing[0]!r} (test-extras of [tool.cuda-ext-farm])",
                         f"{wheel.name}: {', '.join(sorted(provided)) or 'no extras'}",
                         "add it to [project.optional-dependencies] or remove it from test-extras")
    extras = list(dict.fromkeys([*config.test_extras, *(e for e in wanted if e in provided)]))
    requirement = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    return [requirement, *config.test_requires]


@contextlib.contextmanager
def clean_env(target: Target, wheel: Path, *wanted: str) -> Iterator[envs.PythonEnv]:
    """A new venv holding the wheel over the target's torch, with what its tests need (:func:`test_install`)."""
    base = envs.target_env(target)
    install = test_install(target, wheel, *wanted)
    with tempfile.TemporaryDirectory(prefix="farm-test-") as tmp:
        env = envs.test_env(base, Path(tmp) / "venv")
        more = f" and {', '.join(target.project.test_requires)} (test-requires)" if target.project.test_requires else ""
        proc.run([env.python, "-m", "pip", "install", "--quiet", *install], env=envs.pip_env(),
                 what=f"installing the wheel{more} into a clean environment failed",
                 hint="pip's message is above: check each requirement's name and version, and the network")
        proc.run([env.python, "-m", "pip", "check"], what="the wheel's requirements are not met by the "
                 "environment it is tested in", hint="a classic wheel must be tested with the torch it pins")
        yield env


def _command_line(env: envs.PythonEnv, command: tuple[str, ...], out: Path, wheel: Path, root: Path) -> list[str]:
    return project_commands.expand(command, python=env.python, project_root=root, out=out, wheel=wheel)


def _run(cmd: list[str], command: tuple[str, ...], name: str, root: Path, env: dict[str, str]) -> None:
    """Run a configured command in an empty folder (the source cannot shadow the wheel)."""
    with project_commands.scratch_folder() as scratch:
        proc.run(cmd, env={**env, **project_commands.no_writes_env()}, cwd=scratch,
                what=f"the project's {name} command failed",
                 hint=f"its output is above ([tool.cuda-ext-farm.commands] {name})"
                 + project_commands.relative_path_hint(command, root))


def configured(target: Target, name: str) -> tuple[str, ...]:
    command = target.project.commands.get(name)
    if command is None:
        raise UsageError(f"{target.project.name} configures no {name} command",
                         f"[tool.cuda-ext-farm.commands] {name}",
                         f"add {name} = \"...\" to that table in {target.project.source.name}")
    return command


def run_command(target: Target, wheel: Path, name: str, extra_args: list[str], out: Path | None = None) -> int:
    """Run the project's ``name`` command (``bench``, ``test``, ...) with the wheel in a clean environment."""
    config = target.project
    command = configured(target, name)
    with clean_env(target, wheel, "test", name) as env:
        results = out or settings.path_option(None, "FARM_TEST_RESULTS", config.root / "test-results")
        results.mkdir(parents=True, exist_ok=True)
        cmd = [*_command_line(env, command, results, wheel, config.root), *extra_args]
        run_env = {"PATH": proc.path_with(env.bin_dir), "PYTHONPATH": "",
                   "FARM_LANE": name}
        _run(cmd, command, name, config.root, run_env)
    return 0


def run_emulated(target: Target, wheel: Path) -> int:
    """A cross-built wheel: the import probe and the smoke command under qemu-user with the target's aarch64
    torch (ci/linux/qemu.py). The CPU test command is not run emulated (torch's import alone takes ~25 s there): an
    aarch64 machine runs it (the release workflow's import jobs)."""
    from ci.linux import cross, qemu

    config = target.project
    torch_site = cross.ensure_torch(target.torch, cross.torch_python(target))
    log.info(f"import under qemu: {qemu.import_wheel(wheel, config.import_name, torch_site)}")
    with qemu.wheel_python(wheel, torch_site) as python, tempfile.TemporaryDirectory(prefix="farm-out-") as out:
        cmd = project_commands.expand(config.commands.smoke, python=python, project_root=config.root, out=Path(out),
                              wheel=wheel)
        _run(cmd, config.commands.smoke, "smoke", config.root, {"FARM_LANE": "smoke"})
    if config.commands.test is not None:
        log.note("test: not run under qemu", "(an aarch64 machine runs the CPU tests)")
    return 0


def run_cpu_tests(target: Target, wheel: Path) -> int:
    """The smoke command, then the CPU test command, against ``wheel`` in one clean environment."""
    config = target.project
    if target.cross:
        return run_emulated(target, wheel)
    with clean_env(target, wheel, "test") as env, tempfile.TemporaryDirectory(prefix="farm-out-") as out:
        run_env = {"PATH": proc.path_with(env.bin_dir), "PYTHONPATH": ""}
        if target.free_threaded:  # the commands run with the GIL forced off, as a free-threaded user's would
            run_env |= gil_probe.FORCED_OFF
        for name, command in (("smoke", config.commands.smoke), ("test", config.commands.test)):
            if command is None:
                # The key name in brackets is text, not markup (it printed as "( test)").
                log.note(f"{name}: not configured", f"([tool.cuda-ext-farm.commands] {name})")
                continue
            _run(_command_line(env, command, Path(out), wheel, config.root), command, name, config.root,
                 {**run_env, "FARM_LANE": name})
            if name == "smoke":
                with project_commands.scratch_folder() as scratch:
                    proc.run(project_commands.origin_check(env.python, config.import_name), env=run_env, cwd=scratch,
                             what=f"{config.import_name} did not come from the wheel under test")
                if target.free_threaded:
                    gil_report(env.python, config.import_name, run_env)
    return 0


def gil_report(python: Path, import_name: str, run_env: dict[str, str]) -> gil_probe.GilReport:
    """The GIL after importing the package under the interpreter's default (ci/testing/gil_probe.py), logged."""
    env = {k: v for k, v in run_env.items() if k not in gil_probe.FORCED_OFF}
    with project_commands.scratch_folder() as scratch:
        done = proc.run(gil_probe.command(python, import_name), env=env, unset=tuple(gil_probe.FORCED_OFF),
                        cwd=scratch, capture=True, what=f"importing {import_name} for the GIL probe failed")
    report = gil_probe.parse(done.stdout)
    if report is None:
        raise UsageError("the GIL probe printed no report", done.stdout.strip()[-300:] or "nothing",
                         "report it: ci/testing/gil_probe.py")
    log.info(report.line())
    return report
