"""A kept work folder's no-op rebuild (ninja: no work to do) prints no compile line: the audit holds its wheel to
the architecture flags the folder's compiles used, kept beside them (ci/builds/arch_flags.py ``remember_flags``),
not to the farm's list (issue 45: ``keep`` refused such a wheel for ``missing sm_80; unexpected sm_86``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.builds import arch_flags
from tests.unit.builds.test_arch_flags_held import farm_target

COMPILE = (f"[1/1] python -I {arch_flags.WRAPPER} -c /p/k.cu -o /p/k.o -gencode=arch=compute_86,code=sm_86 "
           "-gencode=arch=compute_86,code=compute_86")
NO_WORK = "ninja: no work to do.\n"


@pytest.mark.parametrize("arch_list", ["8.0", "9.0"])
def test_a_no_op_rebuild_in_keep_is_held_to_the_folders_flags(tmp_path: Path, arch_list: str) -> None:
    target = farm_target(arch_list, "keep")
    assert arch_flags.remember_flags(COMPILE, tmp_path) == ""  # the first build: its compile lines, kept
    first = arch_flags.audited_target(target, COMPILE).cell
    assert (first.sass_archs, first.ptx_arch) == (("8.6",), "8.6")
    line = arch_flags.remember_flags(NO_WORK, tmp_path)
    assert arch_flags.audited_target(target, NO_WORK + line + "\n").cell == first


def test_a_folder_without_kept_flags_adds_nothing(tmp_path: Path) -> None:
    assert arch_flags.remember_flags(NO_WORK, tmp_path) == ""
    target = farm_target("9.0", "keep")
    assert arch_flags.audited_target(target, NO_WORK) == target
