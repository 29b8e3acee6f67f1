"""``delvewheel repair``: vendor the DLLs a wheel needs, except torch's and CUDA's.

delvewheel copies every DLL an extension imports that Windows does not
provide into ``<package>.libs`` (renamed with a hash so two wheels never share
one) and patches the package to find them. torch's DLLs and the CUDA DLLs
must stay out: the extension has to use the very ones the user's torch loaded.
Each is passed as its own ``--exclude`` flag: delvewheel splits a flag's value
at ``os.pathsep``, which is ``;`` on Windows and ``:`` elsewhere, so one joined
list would mean different things on the two. ``--add-path`` folders (DLLs the
project built or ships) are passed one per flag for the same reason.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ci import proc
from ci.builds import tail
from windows import dlls


def delvewheel_command(wheel: Path, outdir: Path, *, excludes: Sequence[str] = dlls.repair_excludes(),
                       add_paths: Sequence[Path] = (), python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "delvewheel", "repair", "--wheel-dir", str(outdir)]
    for folder in add_paths:
        cmd += ["--add-path", str(folder)]
    for name in excludes:
        cmd += ["--exclude", name]
    return [*cmd, str(wheel)]


def delvewheel_repair(add_paths: Sequence[Path] = ()) -> Callable[[Path, Path], Path]:
    """The ``repair`` step of ``ci.builds.tail.publish`` for Windows wheels."""

    def repair(wheel: Path, outdir: Path) -> Path:
        proc.run(delvewheel_command(wheel, outdir, add_paths=add_paths),
                 what="delvewheel could not repair the wheel",
                 hint="a DLL it names is imported but found nowhere: put its folder in --dll-path, or exclude it "
                      "if the user's torch provides it (windows/dlls.py)")
        return tail.one_wheel(outdir, "delvewheel repair")

    return repair
