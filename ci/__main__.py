"""Command line of the farm: ``python -m ci <command>``.

Every nox session ends up here; the commands also work by hand inside any
environment that has the cell's torch installed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ci import audit, build, develop, matrix, proc, report, toolkit

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
    return matrix.resolve(args.cuda, args.arch_list)


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

    t = sub.add_parser("toolkit", help="install (or reuse) a cell's hermetic CUDA toolkit")
    t.add_argument("--cuda", default="13")
    t.set_defaults(func=cmd_toolkit)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (matrix.MatrixError, build.BuildError, toolkit.ToolkitError, audit.AuditError) as exc:
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
