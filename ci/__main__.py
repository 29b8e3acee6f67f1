"""Command line of the farm: ``python -m ci <command>`` (the grammar is in ``ci/cli.py``).

Every nox session ends up here; the commands also work by hand. Every
user-facing failure ends with one line ``error: <what> (<value>): <how to fix>``
and the exit code of its kind (``ci/errors.py``); ``--traceback`` or
``FARM_DEBUG=1`` shows the Python traceback as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ci import cli, errors, options, proc, settings, toolenv
from ci.linux.image_commands import cmd_base_image, cmd_images, cmd_shell
from ci.universe import matrix, project, targets
from ci.universe.selection import select

console = Console() if sys.stdout.isatty() else Console(width=200)


def _outputs(args: argparse.Namespace, config: project.ProjectConfig):  # type: ignore[no-untyped-def]
    from ci.build import tail

    return tail.Outputs.resolve(config.root, getattr(args, "wheelhouse", None), getattr(args, "build_dir", None),
                                   config.normalized_name)


def _targets_of_oses(args: argparse.Namespace, config: project.ProjectConfig) -> list[targets.Target]:
    """The selected targets (all of the project's without a selection) of every OS ``--os`` names."""
    chosen: list[targets.Target] = []
    for os_name in ("linux", "windows") if args.os == "all" else (args.os,):
        sel = options.selection(args)
        chosen += select(config, sel, os_name) if not sel.empty else targets.platform_targets(config, os_name)
    return chosen


def cmd_matrix(args: argparse.Namespace) -> int:
    from ci.linux import routes

    config = options.load_project(args)
    chosen = _targets_of_oses(args, config)
    if args.json:
        print(json.dumps(routes.matrix_json(config, chosen), indent=2))
    else:
        console.print(routes.matrix_table(config, chosen))
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from ci.build import report
    from ci.linux import host as build

    chosen = options.resolve(args)
    if args.all:
        chosen = tuple(t for t in chosen if t.cell.toolkit.kind == "pypi")
    outputs = _outputs(args, chosen[0].project)
    for target in chosen:
        if args.cpu:
            target = dataclasses.replace(target, cpu=True)
        rep = build.build(target, outputs, max_jobs=args.max_jobs)
        report.print_report(rep, console)
        console.print(f"[green]wheel written to[/] {outputs.target_dir(target) / rep.wheel}")
    return 0


def cmd_develop(args: argparse.Namespace) -> int:
    from ci.linux import develop

    (target,) = options.resolve(args)
    if args.cpu:
        target = dataclasses.replace(target, cpu=True)
    result = develop.develop(
        target, _outputs(args, target.project), debug=args.debug, max_jobs=args.max_jobs,
        use_cache=not args.no_cache, clean=args.clean, arch_list=args.arch_list, release_archs=args.release_archs,
    )
    console.print(
        f"[green]in-place build done[/] in {result.seconds:.1f} s, {result.compiled} objects compiled, "
        f"archs {result.arch_list or 'cpu'}, compiler cache: {result.launcher or 'none'}"
    )
    return 0


def _torch_label(python: Path) -> str:
    """``torch X.Y.Z`` of the environment of ``python`` (its folder is two levels up), read from its files."""
    from ci.toolchain import envs

    try:
        return f"torch {envs.torch_metadata(envs.PythonEnv(python.parent.parent))['version']}"
    except errors.FarmError:
        return f"the torch of {python}"


def cmd_audit(args: argparse.Namespace) -> int:
    from ci import wheelmeta
    from ci.audit import symbols, wheel_audit
    from ci.toolchain import toolkit

    wheel = Path(args.wheel)
    with wheelmeta.open_wheel(wheel):
        pass
    (target,) = options.resolve(args)[:1]
    if args.cpu:
        target = dataclasses.replace(target, cpu=True)
    cuobjdump = None if args.cpu else toolkit.ensure_cuobjdump()
    search = None
    torch_label = None
    if args.torch_env:
        python = Path(args.torch_env)
        python = python / "bin" / "python" if python.is_dir() else python
        if not python.is_file():
            raise errors.UsageError("--torch-env is neither a Python interpreter nor an environment folder",
                                    args.torch_env, "pass the environment's folder or its bin/python")
        search = symbols.environment_search(python, toolenv.cache_root() / "symbols")
        torch_label = _torch_label(python)
    result = wheel_audit.audit_wheel(wheel, target, cuobjdump, search=search, cuda=not args.cpu,
            torch_label=torch_label)
    for check in result.checks:
        mark = ("[yellow]WARN[/]" if check.warn else "[green]ok[/]") if check.ok else "[red]FAIL[/]"
        console.print(f"{mark} {check.name}: {check.detail}", markup=True, highlight=False, soft_wrap=True)
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in result.checks], indent=2))
    wheel_audit.raise_for_failures(result)
    return 0


def cmd_toolkit(args: argparse.Namespace) -> int:
    from ci.toolchain import toolkit

    cell = matrix.resolve(args.cuda)
    if sys.platform == "win32":
        # Windows' toolkits are laid out differently (nvcc.exe, lib\x64) and CUDA 12's comes from NVIDIA's
        # installer: the Windows code installs (and checks) what `build-win` will then find.
        from windows import environment
        from windows import toolkit as win_toolkit

        win = win_toolkit.ensure(cell, install=True)
        if args.print_env:
            path = ";".join([*win_toolkit.path_entries(win.cuda_home), "%PATH%"])
            for line in environment.batch_lines({**win.env(), "PATH": path}):
                print(line)
            return 0
        console.print(f"CUDA_HOME={win.cuda_home}\nnvcc {win.nvcc_version} ({win.source})", highlight=False)
        return 0
    tk = toolkit.ensure_toolkit(cell)
    if args.print_env:
        for key, value in tk.env().items():
            print(f"export {key}={value!r}")
        return 0
    console.print(f"CUDA_HOME={tk.cuda_home}\nnvcc {tk.nvcc_version}\n"
                  f"size {toolkit.folder_size(tk.root) / 2**20:.0f} MiB")
    return 0


def _container_build(args: argparse.Namespace, chosen: tuple[targets.Target, ...]) -> int:
    from ci.build import report
    from ci.linux import container as wheels
    from ci.linux import images

    outputs = _outputs(args, chosen[0].project)
    for target in chosen:
        if target.cross:
            raise errors.UsageError(f"{target.id} is for {target.arch}, and a builder image runs this machine's "
                                    f"{targets.host_arch()} code", target.id,
                                    f"cross-compile it on the host (build --arch {target.arch} --target "
                                    f"{target.id}), or build it in its container on an {target.arch} machine")
    for target in chosen:
        spec = images.spec_for(target.cell, args.base_image)
        started = time.monotonic()
        tag = images.ensure_image(spec)
        console.print(f"image {tag} ready in {time.monotonic() - started:.1f} s")
        job = wheels.ContainerBuild(target=target, spec=spec, image=tag, outputs=outputs, max_jobs=args.max_jobs)
        rep = wheels.build_in_container(job)
        report.print_report(rep, console)
    return 0


def cmd_build_cuda(args: argparse.Namespace) -> int:
    chosen = options.resolve(args)
    if str(args.cuda or "").strip().isdigit():
        # A major (build-cuda-12) asks for that major's release cell: here, its stand-in where the release cell's
        # toolkit cannot be reached. A named cell (12.8) is built as asked, or refused with one line.
        from ci.linux import buildall

        chosen = buildall.local_equivalents(chosen, console)
    return _container_build(args, chosen)


def cmd_build_all(args: argparse.Namespace) -> int:
    from ci.linux import buildall
    from ci.release import coverage

    config = options.load_project(args)
    sel = options.selection(args)
    chosen = select(config, sel) if not sel.empty else targets.platform_targets(config, "linux")
    chosen = buildall.local_equivalents(chosen, console)
    outputs = _outputs(args, config)
    if args.missing:
        outputs.check_writable()
        chosen = coverage.read(outputs.wheelhouse, chosen).missing
        if not chosen:
            console.print(f"every target has its wheel in {outputs.wheelhouse}: nothing to build")
            return 0
    return buildall.build_all(chosen, outputs, jobs=args.jobs, base_image=args.base_image,
                              max_jobs=args.max_jobs, console=console)


def cmd_coverage(args: argparse.Namespace) -> int:
    from ci.release import coverage

    config = options.load_project(args)
    chosen = _targets_of_oses(args, config)
    found = coverage.read(Path(args.folder).resolve(), chosen)
    if args.json:
        print(json.dumps(found.as_dict(), indent=2))
    else:
        console.print(found.table(config.name))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ci.doctor import diagnose

    return diagnose.run(args)


def cmd_test_gpu(args: argparse.Namespace) -> int:
    import contextlib
    import tempfile

    from ci import wheelmeta
    from ci.build import tail
    from ci.testing import gpu_lanes, wheel_tests

    (target,) = options.resolve(args)[:1]
    lanes = gpu_lanes.parse_lanes(args.lanes)
    outputs = _outputs(args, target.project)
    out = settings.path_option(args.out, "FARM_TEST_RESULTS", target.project.root / "test-results")
    wheel = Path(args.wheel) if args.wheel else (None if args.inplace else tail.find_wheel(outputs, target))
    for given in (wheel, Path(args.ptx_wheel) if args.ptx_wheel else None):
        if given is not None:
            with wheelmeta.open_wheel(given):
                pass
    if wheel is None and not args.inplace:
        raise errors.UsageError(f"no built wheel of {target.id}", outputs.target_dir(target),
                                "build it first (nox -s build) or pass --wheel PATH")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="farm-gpu-")))

        def subject_for(path: Path | None, name: str) -> gpu_lanes.Subject:
            if path is None:  # the in-place build, with this interpreter's torch
                return gpu_lanes.Subject(Path(sys.executable), gpu_lanes.inplace_paths(target.project.root),
                                   f"in-place build in {target.project.root}")
            if args.system:
                site = gpu_lanes.install_wheel(path, tmp / name)
                return gpu_lanes.Subject(Path(sys.executable), (str(site),), f"{path} on {sys.executable}", path)
            env = stack.enter_context(wheel_tests.clean_env(target, path, "test", "bench"))
            return gpu_lanes.Subject(env.python, (), f"{path} in a clean environment", path)

        subject = subject_for(wheel, "site")
        ptx = subject_for(Path(args.ptx_wheel), "ptx-site") if args.ptx_wheel else None
        return gpu_lanes.run_gpu_lanes(target, subject, ptx=ptx, lanes=lanes, quick=args.quick, out=out)


def cmd_test(args: argparse.Namespace) -> int:
    from ci.build import tail
    from ci.testing import wheel_tests

    (target,) = options.resolve(args)[:1]
    outputs = _outputs(args, target.project)
    wheel = Path(args.wheel) if args.wheel else tail.find_wheel(outputs, target)
    if wheel is None:
        raise errors.UsageError(f"no built wheel of {target.id}", outputs.target_dir(target),
                                "build it first (nox -s build) or pass --wheel PATH")
    return wheel_tests.run_cpu_tests(target, wheel)


def cmd_run(args: argparse.Namespace) -> int:
    from ci.build import tail
    from ci.testing import wheel_tests

    (target,) = options.resolve(args)[:1]
    wheel_tests.configured(target, args.name)
    outputs = _outputs(args, target.project)
    wheel = Path(args.wheel) if args.wheel else tail.find_wheel(outputs, target)
    if wheel is None:
        raise errors.UsageError(f"no built wheel of {target.id}", outputs.target_dir(target),
                                "build it first (nox -s build) or pass --wheel PATH")
    return wheel_tests.run_command(target, wheel, args.name, list(args.extra))


def cmd_build_win(args: argparse.Namespace) -> int:
    from windows import cli as windows_cli

    return windows_cli.cmd_build_win(args)


def cmd_jit(args: argparse.Namespace) -> int:
    from windows import cli as windows_cli

    return windows_cli.cmd_jit(args)


def cmd_release(args: argparse.Namespace) -> int:
    from ci.commands import release

    return release.cmd_release(args)


def cmd_workflows(args: argparse.Namespace) -> int:
    from ci.gha import workflows

    return workflows.cmd_workflows(args)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from ci.linux import reproduce

    (target,) = options.resolve(args)[:1]
    container = args.container or target.cell.toolkit.kind != "pypi"
    reproduce.reproduce(target, container=container, base_image=args.base_image, keep=args.keep)
    return 0


def cmd_bench_builds(args: argparse.Namespace) -> int:
    from ci.linux import buildbench

    config = options.load_project(args)
    kinds = args.kind or ["host", "13", "12"]
    for kind in kinds:
        if kind not in ("host", "aarch64"):
            matrix.get_cell(kind)
    out = settings.path_option(args.out, "FARM_BENCH_RESULTS", config.root / "bench-results")
    buildbench.bench(config, kinds, args.touch, out, console)
    return 0


def cmd_torch_archs(args: argparse.Namespace) -> int:
    from ci.universe import torch_archs

    torch_archs.check(matrix.TORCH_RELEASES, console)
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    from ci.universe import lockcheck, pins

    for path in pins.write_locks(proc.which("uv")):
        console.print(f"locked {path.relative_to(pins.REQUIREMENTS.parent.parent)} "
                      f"({len(pins.pinned_in(path))} pins)")
    # uv resolves for every platform but never asks whether a pinned release has a file for each one: the index does
    # (a Linux-only pin without its marker, a release too new for the oldest CPython served).
    index = lockcheck.Index()
    lockcheck.require(index=index)
    console.print(f"every lock installs from wheels on each CPython and platform it serves ({index.url})")
    return 0


COMMANDS = {
    "matrix": cmd_matrix, "build": cmd_build, "develop": cmd_develop, "audit": cmd_audit, "toolkit": cmd_toolkit,
    "build-cuda": cmd_build_cuda, "build-all": cmd_build_all, "coverage": cmd_coverage, "doctor": cmd_doctor,
    "shell": cmd_shell,
    "base-image": cmd_base_image,
    "images": cmd_images, "test-gpu": cmd_test_gpu, "test": cmd_test, "run": cmd_run,
    "build-win": cmd_build_win, "jit": cmd_jit, "release": cmd_release, "workflows": cmd_workflows,
    "lock": cmd_lock, "torch-archs": cmd_torch_archs, "reproduce": cmd_reproduce, "bench-builds": cmd_bench_builds,
}


def _write_status(code: int) -> None:
    """For noxfile.py: the exit code, so the session can end with the farm's last line and code."""
    path = os.environ.get("FARM_STATUS_FILE")
    if path:
        Path(path).write_text(str(code))


def main(argv: list[str] | None = None) -> int:
    code = _main(sys.argv[1:] if argv is None else argv)
    _write_status(code)
    return code


def _main(argv: list[str]) -> int:
    proc.install_signal_handlers()
    try:
        args = cli.parse(argv)
        cli.validate(args)
        return int(COMMANDS[args.subcommand](args))
    except errors.FarmError as exc:
        if errors.debug_enabled():
            traceback.print_exc()
        if exc.details:
            console.print(exc.details, markup=False, highlight=False, soft_wrap=True)
        console.print(f"[bold red]error:[/] {escape(exc.line().removeprefix('error: '))}", highlight=False,
                      soft_wrap=True)
        return exc.exit_code
    except errors.Interrupted as exc:
        console.print(f"[bold red]interrupted[/] (signal {exc.signum}): child processes stopped, partial outputs "
                      "removed; nothing was written to the wheelhouse", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        return errors.EXIT_SIGINT
    except ModuleNotFoundError as exc:
        if errors.debug_enabled():
            traceback.print_exc()
        console.print(f"[bold red]error:[/] a tool the farm needs is not installed ({exc.name}): run the farm "
                      "through nox, or pip install --require-hashes -r ci/requirements/farm.txt", highlight=False,
                      soft_wrap=True)
        return errors.EXIT_MISSING
    except Exception as exc:
        if errors.debug_enabled():
            traceback.print_exc()
        console.print(f"[bold red]error:[/] internal error in the farm ({type(exc).__name__}: {escape(str(exc))}): "
                      "rerun with --traceback (or FARM_DEBUG=1) and report it", highlight=False, soft_wrap=True)
        return 70


if __name__ == "__main__":
    sys.exit(main())
