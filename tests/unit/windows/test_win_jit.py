"""``jit``: the command line and the environments it composes (a real run on Linux, up to a JIT load():
tests/integration/test_jit_load.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ci import cli
from ci.errors import UsageError
from ci.universe import shapes
from windows import jit

ROOT = Path(__file__).resolve().parents[3]


def test_arguments() -> None:
    opts = cli.parse(["jit", "--", "python", "train.py"])
    assert opts.command == "jit"  # the sub-command survives: the command to run has a dest of its own
    assert jit.command_of(list(opts.args.jit_command)) == ["python", "train.py"]
    args = cli.parse(["jit", "--cuda", "13.2", "--toolset", "14.44", "--print-env"]).args
    assert (args.cuda, args.toolset, args.print_env, args.jit_command) == ("13.2", "14.44", True, ())
    with pytest.raises(UsageError, match="no command to run"):
        jit.command_of(["--"])


def test_program_lookup_uses_the_new_path(tmp_path: Path) -> None:
    tool = tmp_path / "nvcc"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    # Only Windows needs it: CreateProcess looks the program up on the parent's PATH.
    assert jit.resolve_program(["nvcc", "-V"], str(tmp_path), windows=True) == [str(tool), "-V"]
    assert jit.resolve_program(["nvcc", "-V"], str(tmp_path), windows=False) == ["nvcc", "-V"]
    assert jit.resolve_program([str(tool)], "", windows=True) == [str(tool)]


def test_export_lines() -> None:
    assert jit.export_lines({"CUDA_HOME": "/x y"}, windows=False) == ["export CUDA_HOME='/x y'"]
    assert jit.export_lines({"CUDA_HOME": r"C:\x y"}, windows=True) == [r'set "CUDA_HOME=C:\x y"']


def test_toolset_is_windows_only() -> None:
    with pytest.raises(UsageError, match="only Windows has"):
        jit.main("13", ["python"], toolset="14.44", platform="linux")


def test_windows_jit_environment_and_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             data: Path, tmp_path: Path) -> None:
    """What the Windows runner hands the command: vcvars64 of the chosen toolset, the toolkit, DISTUTILS_USE_SDK."""
    from pathlib import PureWindowsPath

    from windows import environment, vcvars

    def dump(name: str) -> dict[str, str]:
        return vcvars.parse_set(vcvars.decode_set_output((data / name).read_bytes()))

    variables, prepend = vcvars.diff(dump("vcvars-before.set.utf16le"), dump("vcvars-14.44-after.set.utf16le"))
    vc = vcvars.VcvarsEnv("a1b2c3d4", "14.44.35207", "x64", variables, prepend)
    home = PureWindowsPath(r"C:\farm\tools\cuda-win-13.0-0123456789ab\nvidia\cu13")
    seen: list[tuple[str, str | None, bool]] = []

    def fake_windows_env(cell: shapes.Cell, toolset: str | None, refresh: bool) -> dict[str, str]:
        seen.append((cell.name, toolset, refresh))
        return environment.compose(os.environ, vc, home)

    monkeypatch.setattr(jit, "windows_env", fake_windows_env)
    assert jit.main("13", [], toolset="14.44", print_env=True, refresh=True, platform="win32") == 0
    lines = capsys.readouterr().out.splitlines()
    assert seen == [("cu130", "14.44", True)]
    for expected in (f'set "CUDA_HOME={home}"', 'set "DISTUTILS_USE_SDK=1"', 'set "VSCMD_ARG_TGT_ARCH=x64"',
                     'set "VCTOOLSVERSION=14.44.35207"'):
        assert expected in lines
    path_line = next(line for line in lines if line.startswith('set "PATH='))
    assert path_line.startswith(f'set "PATH={home}\\bin;{home}\\bin\\x86_64;C:\\Program Files\\Microsoft Visual '
                                r'Studio\2022\Enterprise\VC\Tools\MSVC\14.44.35207\bin\HostX64\x64;')
    # Running a command: the program is looked up on the new PATH (CreateProcess would use the farm's own).
    tool = tmp_path / "probe"
    tool.write_text("#!/bin/sh\nexit 5\n")
    tool.chmod(0o755)
    monkeypatch.setattr(jit, "windows_env", lambda cell, toolset, refresh: {"PATH": str(tmp_path)})
    assert jit.main("13", ["--", "probe"], platform="win32") == 5
