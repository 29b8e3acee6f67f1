"""vcvarsall.bat: the capture script, its UTF-16 output, [ERROR lines, the environment diff, PATH, the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ci.errors import CommandFailed, UsageError
from windows import environment, vcvars
from windows.vswhere import InstalledToolset, VsInstance

VS = r"C:\Program Files\Microsoft Visual Studio\2022\Enterprise"
TOOLS = VS + r"\VC\Tools\MSVC\14.44.35207"


def _dump(data: Path, name: str) -> dict[str, str]:
    return vcvars.parse_set(vcvars.decode_set_output((data / name).read_bytes()))


def test_script_and_command() -> None:
    args = vcvars.vcvarsall_arguments("x64", "14.44.35207")
    assert args == ["x64", "-vcvars_ver=14.44.35207"]
    script = vcvars.capture_script(args)
    assert script.endswith("\r\n") and "\n" not in script.replace("\r\n", "")
    script.encode("ascii")  # paths come through variables: cmd.exe reads the file in the console code page
    lines = script.split("\r\n")
    assert lines[0] == "@echo off"
    assert lines[1] == 'call "%FARM_VCVARSALL%" x64 -vcvars_ver=14.44.35207 > "%FARM_VCVARS_LOG%" 2>&1'
    assert lines[3] == 'set > "%FARM_VCVARS_ENV%"'
    assert lines[4] == "exit /b %FARM_VCVARS_EXIT%"
    assert vcvars.capture_variables(VS + r"\VC\Auxiliary\Build\vcvarsall.bat", r"C:\Users\Zoë\e", r"C:\l") == {
        "FARM_VCVARSALL": VS + r"\VC\Auxiliary\Build\vcvarsall.bat", "FARM_VCVARS_ENV": r"C:\Users\Zoë\e",
        "FARM_VCVARS_LOG": r"C:\l"}
    # /d: no AutoRun from the registry; /u: `set` writes UTF-16.
    assert vcvars.capture_command(r"C:\t\capture.cmd") == ["cmd.exe", "/d", "/u", "/c", r"C:\t\capture.cmd"]
    assert vcvars.vcvarsall_arguments("x64", None) == ["x64"]


def test_script_refuses_odd_arguments() -> None:
    with pytest.raises(UsageError, match=r"not a vcvarsall\.bat argument"):
        vcvars.capture_script(["x64", "& del *"])


def test_utf16_set_output_with_and_without_bom(data: Path) -> None:
    plain = _dump(data, "vcvars-14.44-after.set.utf16le")
    bom = _dump(data, "vcvars-14.44-after-bom.set.utf16le")
    assert plain == bom
    assert plain["VCTOOLSVERSION"] == "14.44.35207"
    assert plain["USERPROFILE"] == r"C:\Users\Zoë"  # outside the ANSI code page of many machines
    assert "PATH" in plain and "Path" not in plain  # names folded: Windows compares them case-insensitively
    assert vcvars.decode_set_output(b"A=1\r\nB=2\r\n") == "A=1\r\nB=2\r\n"  # a plain-text dump still parses


def test_parse_set_skips_drive_variables() -> None:
    assert vcvars.parse_set("=C:=C:\\work\r\nA=b=c\r\nnot a variable\r\n") == {"A": "b=c"}


def test_errors_are_failures_even_with_exit_status_zero(data: Path) -> None:
    ok = vcvars.decode_log((data / "vcvars-14.44-ok.log").read_bytes())
    assert vcvars.errors_in(ok) == []
    assert "Environment initialized for: 'x64'" in ok
    log = vcvars.decode_log((data / "vcvars-14.38-error.log").read_bytes())
    errors = vcvars.errors_in(log)
    assert errors[0] == "[ERROR:vcvars.bat] Toolset directory for version '14.38' was not found."
    assert len(errors) == 4
    assert "registry key" in log  # the single-byte line of a child program survives the mixed decoding
    what, fix = vcvars.explain_failure(errors, log, "14.38")
    assert what == "vcvarsall.bat does not know the MSVC toolset 14.38"
    assert "Microsoft.VisualStudio.Component.VC.14.38.17.8.x86.x64" in fix


def test_long_path_failure_is_explained(data: Path) -> None:
    log = vcvars.decode_log((data / "vcvars-long-path.log").read_bytes())
    what, fix = vcvars.explain_failure(vcvars.errors_in(log), log, "14.44")
    assert "8191" in what and "PATH" in fix


def test_diff_keeps_what_vcvarsall_changed(data: Path) -> None:
    before = _dump(data, "vcvars-before.set.utf16le")
    after = _dump(data, "vcvars-14.44-after.set.utf16le")
    variables, prepend = vcvars.diff(before, after)
    assert variables["VSCMD_ARG_TGT_ARCH"] == "x64"
    assert variables["VCTOOLSINSTALLDIR"] == TOOLS + "\\"
    assert variables["INCLUDE"].startswith(TOOLS + r"\include;")
    for kept_out in ("USERPROFILE", "PROMPT", "FARM_VCVARS_EXIT", "FARM_VCVARSALL", "FARM_VCVARS_LOG",
                     "__VSCMD_PREINIT_PATH", "__DOTNET_ADD_64BIT", "PATH"):
        assert kept_out not in variables
    assert prepend[0] == TOOLS + r"\bin\HostX64\x64"
    assert len(prepend) == 10
    assert not any("hostedtoolcache" in p for p in prepend)


def test_apply_over_another_path_dedupes(data: Path) -> None:
    after = _dump(data, "vcvars-14.44-after.set.utf16le")
    variables, prepend = vcvars.diff(_dump(data, "vcvars-before.set.utf16le"), after)
    env = vcvars.VcvarsEnv("a1b2c3d4", "14.44.35207", "x64", variables, prepend)
    # A later session: another PATH, which already holds one of vcvarsall's folders (a nested activation).
    base = {"Path": r"C:\Tools;" + TOOLS.lower() + r"\bin\hostx64\x64\;C:\Windows\system32;C:\Windows\System32\\",
            "TEMP": r"C:\t"}
    applied = env.apply(base)
    entries = applied["PATH"].split(";")
    assert entries[0] == TOOLS + r"\bin\HostX64\x64"
    assert len([e for e in entries if e.lower().rstrip("\\").endswith(r"hostx64\x64")]) == 1
    assert len([e for e in entries if e.lower().rstrip("\\") == r"c:\windows\system32"]) == 1
    assert entries[-2:] == [r"C:\Tools", r"C:\Windows\system32"]
    assert applied["TEMP"] == r"C:\t" and "Path" not in applied
    assert applied["VCTOOLSVERSION"] == "14.44.35207"


def test_start_path_and_its_limit() -> None:
    value = r"C:\a;C:\b;c:\a\;C:\gone;;C:\b"
    assert vcvars.start_path(value, lambda p: "gone" not in p) == r"C:\a;C:\b"
    vcvars.check_start_path("C:\\x;" * 1000)  # 5000 characters: fits
    with pytest.raises(UsageError, match=r"PATH is too long for vcvarsall\.bat"):
        vcvars.check_start_path("C:\\x;" * 1200)


def test_activation_is_checked() -> None:
    good = vcvars.VcvarsEnv("i", "14.44.35207", "x64", {"VCTOOLSVERSION": "14.44.35207", "VSCMD_ARG_TGT_ARCH": "x64"},
                            ())
    vcvars.check_activated(good, "14.44.35207")
    with pytest.raises(CommandFailed, match="another MSVC toolset"):
        vcvars.check_activated(good, "14.38.33130")
    x86 = vcvars.VcvarsEnv("i", "14.44.35207", "x64", {"VCTOOLSVERSION": "14.44.35207", "VSCMD_ARG_TGT_ARCH": "x86"},
                           ())
    with pytest.raises(CommandFailed, match="x64 compiler"):
        vcvars.check_activated(x86, "14.44.35207")


def test_cache_round_trip(tmp_path: Path, data: Path) -> None:
    instance = VsInstance("a1b2c3d4", VS, "17.14.36127.28", "Microsoft.VisualStudio.Product.Enterprise",
                          "Visual Studio Enterprise 2022")
    installed = InstalledToolset(instance, "14.44.35207")
    path = vcvars.cache_file(tmp_path, installed, "x64")
    assert path.parent == tmp_path / "msvc" and "a1b2c3d4-14.44.35207-x64" in path.name
    # Another Visual Studio version (an update) is another cache entry.
    updated = InstalledToolset(VsInstance("a1b2c3d4", VS, "17.14.37000.1", "", ""), "14.44.35207")
    assert vcvars.cache_file(tmp_path, updated, "x64") != path
    variables, prepend = vcvars.diff(_dump(data, "vcvars-before.set.utf16le"),
                                     _dump(data, "vcvars-14.44-after.set.utf16le"))
    env = vcvars.VcvarsEnv("a1b2c3d4", "14.44.35207", "x64", variables, prepend)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(env.to_json()))
    cl = TOOLS + r"\bin\Hostx64\x64\cl.exe"
    assert vcvars.load_cached(path, {cl}.__contains__) == env
    assert vcvars.load_cached(path, lambda p: False) is None  # the toolset was uninstalled
    path.write_text("{broken")
    assert vcvars.load_cached(path, {cl}.__contains__) is None
    path.write_text(json.dumps({**env.to_json(), "format": 0}))
    assert vcvars.load_cached(path, {cl}.__contains__) is None


def test_composed_build_environment(data: Path) -> None:
    variables, prepend = vcvars.diff(_dump(data, "vcvars-before.set.utf16le"),
                                     _dump(data, "vcvars-14.44-after.set.utf16le"))
    vc = vcvars.VcvarsEnv("a1b2c3d4", "14.44.35207", "x64", variables, prepend)
    from pathlib import PureWindowsPath

    home = PureWindowsPath(r"C:\farm\tools\cuda-win-13.0-0123456789ab\nvidia\cu13")
    base = {"PATH": r"C:\Python312;C:\Windows\system32", "CUDA_PATH": r"C:\Program Files\NVIDIA\v12.8"}
    env = environment.compose(base, vc, home, {"fusedops_cuda": "1"})
    path = env["PATH"].split(";")
    assert path[:2] == [str(home / "bin"), str(home / "bin" / "x86_64")]  # the farm's nvcc before any other
    assert path[2] == TOOLS + r"\bin\HostX64\x64"  # then cl.exe of the chosen toolset
    assert env["CUDA_HOME"] == env["CUDA_PATH"] == str(home)  # a machine-wide CUDA_PATH does not leak in
    assert env["DISTUTILS_USE_SDK"] == "1" and env["VSCMD_ARG_TGT_ARCH"] == "x64"
    assert env["FUSEDOPS_CUDA"] == "1"
    changed = environment.changed(base, env)
    assert "PATH" in changed and "VCTOOLSVERSION" in changed
    lines = environment.batch_lines({"A": "x y", "B": "1"})
    assert lines == ['set "A=x y"', 'set "B=1"']
    assert environment.powershell_lines({"A": "it's"}) == ["$env:A='it''s'"]
