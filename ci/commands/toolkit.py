"""``toolkit``: install (or reuse) a cell's hermetic CUDA toolkit; ``--print-env`` prints shell exports."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from ci.commands.command import DEFAULT_CUDA_HELP, Command
from ci.options import Options


@dataclasses.dataclass(frozen=True)
class Args:
    cuda: str = "13"
    print_env: bool = False


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cuda", default="13", help=DEFAULT_CUDA_HELP)
    parser.add_argument("--print-env", action="store_true", help="print shell exports for the toolkit")


def check_cuda(opts: Options[Any]) -> None:
    """shell, toolkit and jit: the cell their --cuda names exists."""
    from ci.universe import selection

    selection.resolve(opts.args.cuda, opts.settings.get("TORCH_CUDA_ARCH_LIST"))


def run(opts: Options[Args]) -> int:
    from ci.log import log
    from ci.toolchain import toolkit
    from ci.universe import selection

    cell = selection.resolve(opts.args.cuda, opts.settings.get("TORCH_CUDA_ARCH_LIST"))
    if sys.platform == "win32":
        # Windows' toolkits are laid out differently (nvcc.exe, lib\x64) and CUDA 12's comes from NVIDIA's
        # installer: the Windows code installs (and checks) what `build-win` will then find.
        from windows import environment
        from windows import toolkit as win_toolkit
        from windows.toolkit import layout as win_toolkit_layout

        win = win_toolkit.ensure(cell, install=True)
        if opts.args.print_env:
            path = ";".join([*win_toolkit_layout.path_entries(win.cuda_home), "%PATH%"])
            for line in environment.batch_lines({**win.env(), "PATH": path}):
                print(line)
            return 0
        log.result(f"CUDA_HOME={win.cuda_home}\nnvcc {win.nvcc_version} ({win.source})")
        return 0
    tk = toolkit.ensure_toolkit(cell)
    if opts.args.print_env:
        for key, value in tk.env().items():
            print(f"export {key}={value!r}")
        return 0
    log.result(f"CUDA_HOME={tk.cuda_home}\nnvcc {tk.nvcc_version}\nsize {toolkit.folder_size(tk.root) / 2**20:.0f} MiB")
    return 0


COMMAND = Command("toolkit", "install (or reuse) a cell's hermetic CUDA toolkit", configure, Args, run,
                  check=check_cuda)
