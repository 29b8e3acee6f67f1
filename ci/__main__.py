"""Command line of the farm: ``python -m ci <command>``.

Every nox session ends up here; the commands also work by hand inside any
environment that has the cell's torch installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ci import audit, build, develop, images, matrix, proc, report, shell, toolkit, wheels

console = Console() if sys.stdout.isatty() else Console(width=200)


def _table(cells: tuple[matrix.Cell, ...]) -> Table:
    table = Table(title="build matrix")
    for col in ("cell", "CUDA", "toolkit", "torch", "SASS", "PTX", "python", "compiler", "base image", "release"):
        table.add_column(col)
    for c in cells:
        table.add_row(
            c.name, c.cuda, c.toolkit.kind, c.torch, " ".join(c.sass_archs), c.ptx_arch,
            c.python, c.host_compiler, c.base_image, "yes" if c.release else "",
        )
    return table


def cmd_matrix(args: argparse.Namespace) -> int:
    cells = matrix.cells(args.cells or None)
    if args.json:
        print(matrix.to_json(cells))
    else:
        console.print(_table(cells))
    return 0


def _cell(args: argparse.Namespace) -> matrix.Cell | None:
    if getattr(args, "cpu", False):
        return None
    return matrix.resolve(args.cuda, args.arch_list, torch=args.torch)


def cmd_build(args: argparse.Namespace) -> int:
    opts = build.BuildOptions(cell=_cell(args), wheelhouse=Path(args.wheelhouse).resolve(), max_jobs=args.max_jobs)
    rep = build.build(opts)
    report.print_report(rep, console)
    console.print(f"[green]wheel written to[/] {opts.output_dir / rep.wheel}")
    return 0


def cmd_develop(args: argparse.Namespace) -> int:
    result = develop.develop(
        _cell(args), debug=args.debug, max_jobs=args.max_jobs, use_cache=not args.no_cache, clean=args.clean
    )
    console.print(
        f"[green]in-place build done[/] in {result.seconds:.1f} s, {result.compiled} objects compiled, "
        f"compiler cache: {result.launcher or 'none'}"
    )
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    cell = None if args.cpu else matrix.resolve(args.cuda, args.arch_list)
    cuobjdump = toolkit.ensure_cuobjdump() if cell else None
    result = audit.audit_wheel(Path(args.wheel), cell, cuobjdump)
    for check in result.checks:
        mark = "[green]ok[/]" if check.ok else "[red]FAIL[/]"
        console.print(f"{mark} {check.name}: {check.detail}", markup=True, highlight=False)
    if args.json:
        print(json.dumps([c.__dict__ for c in result.checks], indent=2))
    audit.raise_for_failures(result)
    return 0


def cmd_toolkit(args: argparse.Namespace) -> int:
    cell = matrix.resolve(args.cuda)
    tk = toolkit.ensure_toolkit(cell)
    console.print(f"CUDA_HOME={tk.cuda_home}\nnvcc {tk.nvcc_version}")
    return 0


def cmd_build_cuda(args: argparse.Namespace) -> int:
    cell = matrix.resolve(args.cuda, args.arch_list, torch=args.torch)
    spec = images.spec_for(cell, args.base_image)
    started = time.monotonic()
    tag = images.ensure_image(spec)
    console.print(f"image {tag} ready in {time.monotonic() - started:.1f} s")
    job = wheels.ContainerBuild(
        cell=cell, image=tag, wheelhouse=Path(args.wheelhouse).resolve(), max_jobs=args.max_jobs
    )
    rep = wheels.build_in_container(job, spec)
    report.print_report(rep, console)
    return 0


def cmd_shell(args: argparse.Namespace) -> int:
    cell = matrix.resolve(args.cuda)
    spec = images.spec_for(cell, args.base_image)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return shell.run_shell(spec, build.PROJECT_ROOT, command)


def cmd_base_image(args: argparse.Namespace) -> int:
    tag = images.bootstrap_base(args.suite, args.mirror, force=args.force)
    console.print(f"base image {tag} ({images.image_size(tag) / 2**20:.0f} MiB)\n"
                  f"point the cells at it: export FARM_BASE_IMAGE={tag}")
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    table = Table(title="builder images")
    for col in ("cell", "tag", "size", "build time"):
        table.add_column(col)
    for cell in matrix.cells(args.cells or None):
        started = time.monotonic()
        spec = images.spec_for(matrix.validate(cell), args.base_image)
        tag = images.ensure_image(spec, rebuild=args.rebuild)
        size = f"{images.image_size(tag) / 2**20:.0f} MiB"
        table.add_row(cell.name, tag, size, f"{time.monotonic() - started:.1f} s")
    console.print(table)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ci", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("matrix", help="print the build matrix")
    m.add_argument("cells", nargs="*", help="CUDA versions or cell names (default: all)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_matrix)

    def cell_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--cuda", default="13", help="CUDA version, cell name or major (default: release cell of 13)")
        sp.add_argument("--cpu", action="store_true", help="build without CUDA kernels")
        sp.add_argument("--arch-list", help="override the architectures (TORCH_CUDA_ARCH_LIST syntax)")
        sp.add_argument("--max-jobs", type=int, help="parallel compile jobs (MAX_JOBS)")
        sp.add_argument("--torch", help="build against another torch release than the cell's (validated)")

    b = sub.add_parser("build", help="build, repair and audit a wheel into the wheelhouse")
    cell_args(b)
    b.add_argument("--wheelhouse", default=str(build.PROJECT_ROOT / "wheelhouse"))
    b.set_defaults(func=cmd_build)

    d = sub.add_parser("develop", help="incremental in-place build for editing")
    cell_args(d)
    d.add_argument("--debug", action="store_true", help="-O0 -g and device debug info (-G)")
    d.add_argument("--no-cache", action="store_true", help="do not use ccache/sccache")
    d.add_argument("--clean", action="store_true", help="remove the build folder first")
    d.set_defaults(func=cmd_develop)

    a = sub.add_parser("audit", help="audit a wheel")
    a.add_argument("wheel")
    a.add_argument("--cuda", default="13")
    a.add_argument("--cpu", action="store_true")
    a.add_argument("--arch-list")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_audit)

    bc = sub.add_parser("build-cuda", help="build a cell's wheel with cibuildwheel in its builder image")
    cell_args(bc)
    bc.add_argument("--wheelhouse", default=str(build.PROJECT_ROOT / "wheelhouse"))
    bc.add_argument("--base-image", help="base image (default: FARM_BASE_IMAGE or the cell's)")
    bc.set_defaults(func=cmd_build_cuda)

    sh = sub.add_parser("shell", help="a shell (or one command) in a cell's builder image")
    sh.add_argument("--cuda", default="13")
    sh.add_argument("--base-image")
    sh.add_argument("command", nargs=argparse.REMAINDER, help="command to run instead of an interactive shell")
    sh.set_defaults(func=cmd_shell)

    bi = sub.add_parser("base-image", help="bootstrap a Debian base image (no registry needed)")
    bi.add_argument("--suite", default=images.DEBIAN_SUITE)
    bi.add_argument("--mirror", help="Debian mirror URL (default: the one /etc/apt uses)")
    bi.add_argument("--force", action="store_true")
    bi.set_defaults(func=cmd_base_image)

    im = sub.add_parser("images", help="build (or reuse) the builder image of each cell")
    im.add_argument("cells", nargs="*")
    im.add_argument("--base-image", help="base image for every cell (default: FARM_BASE_IMAGE or the cell's)")
    im.add_argument("--rebuild", action="store_true")
    im.set_defaults(func=cmd_images)

    t = sub.add_parser("toolkit", help="install (or reuse) a cell's hermetic CUDA toolkit")
    t.add_argument("--cuda", default="13")
    t.set_defaults(func=cmd_toolkit)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (matrix.MatrixError, build.BuildError, toolkit.ToolkitError, audit.AuditError, images.ImageError) as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2
    except proc.CommandError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("[bold red]interrupted[/]: nothing was written to the wheelhouse")
        return 130


if __name__ == "__main__":
    sys.exit(main())
