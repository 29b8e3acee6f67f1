"""``torch-archs``: the CUDA architectures of every torch release's own wheels, read from PyPI and compared with
ci/universe/matrix.py."""

from __future__ import annotations

from ci.commands.command import Command, NoArguments, no_arguments
from ci.options import Options


def run(opts: Options[NoArguments]) -> int:
    from ci.universe import matrix, torch_archs

    torch_archs.check(matrix.TORCH_RELEASES)
    return 0


COMMAND = Command("torch-archs", "read the CUDA architectures of every torch release's own wheels from PyPI and "
                  "compare them with the farm's table of torch releases (the matrix)", no_arguments, NoArguments, run)
