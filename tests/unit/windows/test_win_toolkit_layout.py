"""The Windows CUDA toolkit, on Linux: the real win_amd64 wheels' layout (recorded), the install into the farm's
cache, NVIDIA's installer for CUDA 12 (its download, checksum and command line) and the dispatch of
``python -m ci toolkit`` to the Windows code on Windows.

The recorded listings in tests/fixtures/windows_toolkit/ are the file names of the pinned wheels (their header says
how they were made); a layout is built from them with empty files: nothing here reads a file's contents. Only
``nvcc.exe --version`` and NVIDIA's installer are left out (the ``probe`` and ``run_installer`` parameters).
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from ci import proc
from ci.__main__ import main
from ci.errors import CommandFailed, MissingRequirement, UsageError
from ci.toolchain import toolkit as linux_toolkit
from ci.universe import matrix, pins, shapes
from windows import toolkit
from windows.toolkit import installer, layout, wheels
from windows.toolkit.found import find_toolkit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "windows_toolkit"
TOOLKIT_LISTING = "cu130-win_amd64.txt"
HEADERS_LISTING = "cu130-headers-win_amd64.txt"
CU130 = matrix.get_cell("13.0")
CU124 = matrix.get_cell("12.4")


def listing(name: str) -> list[str]:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def materialize(root: Path, paths: Sequence[str]) -> Path:
    """The recorded layout under ``root``: every file empty (the finding code reads names only)."""
    for rel in paths:
        path = root.joinpath(*rel.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return root


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.startswith("error: ")
    return text


# --- the recorded layout of the real wheels -----------------------------------------------------------------


def test_the_recording_is_the_pinned_wheels() -> None:
    files = listing(TOOLKIT_LISTING)
    pinned = pins.pinned_in(pins.lock_path(pins.toolkit_lock(CU130)))
    recorded = {p.split("/")[0].removesuffix(".dist-info") for p in files if ".dist-info/" in p}
    assert recorded == {f"{name.replace('-', '_')}-{version}" for name, version in pinned.items()}
    assert len(files) < 300  # trimmed (CCCL's headers), so the fixture stays a few KB


def test_the_recorded_wheels_are_found(tmp_path: Path) -> None:
    root = materialize(tmp_path / "cuda-win-13.0", listing(TOOLKIT_LISTING) + listing(HEADERS_LISTING))
    home = wheels.wheel_home(root, CU130)
    found = find_toolkit(home, CU130, source="pypi")
    assert home == root / "nvidia" / "cu13"
    assert found.nvcc == home / "bin" / "nvcc.exe"
    assert (home / "bin" / "nvcc.profile").is_file()  # nvcc.exe reads it beside itself: CICC_PATH, -I, /LIBPATH
    assert found.include == home / "include"
    assert (found.include / "crt" / "host_config.h").is_file()
    assert (found.include / "cccl" / "cuda" / "version").is_file()
    assert found.lib_dir == home / "lib" / "x64"
    assert found.cudart == home / "lib" / "x64" / "cudart.lib"
    assert found.dll_dirs == (home / "bin", home / "bin" / "x86_64")
    assert (home / "bin" / "x86_64" / "nvvm64_40_0.dll").is_file()  # cicc.exe's DLL: why bin\x86_64 is on PATH
    assert wheels.wheel_version(root, "nvidia-cuda-nvcc") == "13.0.88"
    # What `python -m ci toolkit` ran on Windows before: the Linux code finds no nvcc in this layout.
    assert linux_toolkit.nvcc_version(home) is None


def test_a_layout_without_nvcc_exe_fails_with_one_line(tmp_path: Path) -> None:
    files = [p for p in listing(TOOLKIT_LISTING) + listing(HEADERS_LISTING) if not p.endswith("/bin/nvcc.exe")]
    root = materialize(tmp_path / "cuda-win-13.0", files)
    with pytest.raises(MissingRequirement) as exc:
        find_toolkit(wheels.wheel_home(root, CU130), CU130, source="pypi", remove=root)
    line = one_line(exc)
    assert "the CUDA 13.0 toolkit (pypi) has no nvcc.exe" in line
    assert str(root / "nvidia" / "cu13" / "bin" / "nvcc.exe") in line
    assert f"remove {root} and run `python -m ci toolkit --cuda 13.0` again" in line


def test_a_classic_cell_needs_the_library_headers(tmp_path: Path) -> None:
    root = materialize(tmp_path / "cuda-win-13.0", listing(TOOLKIT_LISTING))
    with pytest.raises(MissingRequirement) as exc:
        find_toolkit(wheels.wheel_home(root, CU130), CU130, source="pypi")
    assert "include/cublas_v2.h, include/cusparse.h, include/cusolverDn.h" in one_line(exc)


# --- installing the wheels into the farm's cache ------------------------------------------------------------


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """pip install --target, answered with the recorded wheels of the lock it is given."""
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[list[str]] = []
    recorded = {pins.toolkit_lock(CU130): TOOLKIT_LISTING, pins.headers_lock(CU130): HEADERS_LISTING}

    def run(cmd: Sequence[str | Path], **_: object) -> object:
        argv = [str(c) for c in cmd]
        calls.append(argv)
        lock = Path(argv[argv.index("-r") + 1]).stem
        materialize(Path(argv[argv.index("--target") + 1]), listing(recorded[lock]))
        return None

    monkeypatch.setattr(proc, "run", run)
    return calls


def test_the_wheels_are_installed_into_the_folder_the_workflow_caches(tmp_path: Path,
                                                                      fake_pip: list[list[str]]) -> None:
    windows = ("--platform", "win_amd64", "--python-version", "3.12")
    tk = wheels.ensure_pypi(CU130, probe=None, pip_platform=windows)
    folder = tmp_path / "cache" / "tools" / wheels.install_name(CU130)
    assert wheels.install_name(CU130).startswith("cuda-win-13.0-")
    assert tk == layout.WindowsToolkit(folder / "nvidia" / "cu13", "13.0.88", "pypi")
    assert (folder / ".complete").is_file() and not (folder / "library-wheels").exists()
    assert [Path(c[c.index("-r") + 1]).name for c in fake_pip] == ["toolkit-cu130.txt", "headers-cu130.txt"]
    for call in fake_pip:
        assert "--require-hashes" in call and "--no-deps" in call and call[call.index("--platform") + 1] == "win_amd64"
    # Reused: nothing is installed again.
    assert wheels.ensure_pypi(CU130, probe=None) == tk and len(fake_pip) == 2


def test_a_cached_toolkit_that_lost_nvcc_is_installed_again(tmp_path: Path, fake_pip: list[list[str]]) -> None:
    tk = wheels.ensure_pypi(CU130, probe=None)
    Path(tk.cuda_home, "bin", "nvcc.exe").unlink()
    assert wheels.ensure_pypi(CU130, probe=None) == tk and len(fake_pip) == 4


def test_nvcc_of_another_release_is_refused(fake_pip: list[list[str]]) -> None:
    with pytest.raises(UsageError) as exc:
        wheels.ensure_pypi(CU130, probe=lambda home: "13.2.86")
    assert "the toolkit (pypi) is not CUDA 13.0" in one_line(exc)


# --- CUDA 12: NVIDIA's installer ----------------------------------------------------------------------------

#: What NVIDIA's installer leaves for the cell's sub-packages (a made-up minimum, not a recording).
INSTALLER_FILES = ("bin/nvcc.exe", "nvvm/bin/cicc.exe", "lib/x64/cudart.lib", "include/cuda_runtime.h",
                   "include/crt/host_config.h", "include/cublas_v2.h", "include/cusparse.h", "include/cusolverDn.h")


def installer_cell(tmp_path: Path, content: bytes = b"MZ not really NVIDIA's installer") -> shapes.Cell:
    """The 12.4 cell with its installer served from a local file (urllib reads file: URLs like https: ones)."""
    served = tmp_path / "served" / "cuda_12.4.1_windows_network.exe"
    served.parent.mkdir(parents=True, exist_ok=True)
    served.write_bytes(content)
    assert CU124.windows is not None
    facts = dataclasses.replace(CU124.windows, installer=served.as_uri(),
                                installer_hash="sha256:" + hashlib.sha256(content).hexdigest())
    return dataclasses.replace(CU124, windows=facts)


def test_the_installer_is_checked_then_run_with_the_cells_sub_packages(tmp_path: Path) -> None:
    cell = installer_cell(tmp_path)
    home = tmp_path / "v12.4"
    ran: list[list[str]] = []

    def run_installer(cmd: list[str]) -> int:
        ran.append(cmd)
        materialize(home, INSTALLER_FILES)
        return 0

    env = {"CUDA_PATH_V12_4": str(home)}
    tools = tmp_path / "tools"
    tk = toolkit.ensure_installer(cell, env=env, tools=tools, install=True, probe=lambda h: "12.4.131",
                                  run_installer=run_installer)
    assert tk == layout.WindowsToolkit(home, "12.4.131", "nvidia-installer")
    installer = tools / "installers" / "cuda_12.4.1_windows_network.exe"
    assert ran == [[str(installer), "-s", "nvcc_12.4", "cudart_12.4", "thrust_12.4", "cublas_dev_12.4",
                    "cusparse_dev_12.4", "cusolver_dev_12.4", "-n"]]
    assert sorted(p.name for p in installer.parent.iterdir()) == [installer.name]  # no temporary file left
    # Installed (or restored from a cache): found, not installed again.
    again = toolkit.ensure_installer(cell, env=env, tools=tools, install=True, probe=lambda h: "12.4.131",
                                     run_installer=run_installer)
    assert again == tk and len(ran) == 1


def test_an_installer_that_does_not_match_its_pin_never_runs(tmp_path: Path) -> None:
    cell = installer_cell(tmp_path)
    assert cell.windows is not None
    cell = dataclasses.replace(cell, windows=dataclasses.replace(cell.windows, installer_hash="sha256:" + "0" * 64))
    ran: list[list[str]] = []

    def run_installer(cmd: list[str]) -> int:
        ran.append(cmd)
        return 0

    with pytest.raises(CommandFailed) as exc:
        toolkit.ensure_installer(cell, env={"CUDA_PATH_V12_4": str(tmp_path / "v12.4")}, tools=tmp_path / "tools",
                                 install=True, probe=lambda h: "12.4.131", run_installer=run_installer)
    assert "does not match the checksum the matrix pins" in one_line(exc) and ran == []
    assert list((tmp_path / "tools" / "installers").iterdir()) == []


def test_a_failed_installer_and_a_missing_toolkit_say_what_to_run(tmp_path: Path) -> None:
    cell = installer_cell(tmp_path)
    env = {"CUDA_PATH_V12_4": str(tmp_path / "v12.4")}
    with pytest.raises(CommandFailed) as exc:
        toolkit.ensure_installer(cell, env=env, tools=tmp_path / "tools", install=True, probe=lambda h: None,
                                 run_installer=lambda c: 1)
    assert "installer failed (exit status 1)" in one_line(exc)
    # A build never installs: it names the command that does.
    with pytest.raises(MissingRequirement) as missing:
        toolkit.ensure_installer(cell, env=env, tools=tmp_path / "tools", install=False, probe=lambda h: None)
    line = one_line(missing)
    assert "CUDA 12.4 is not installed" in line and "python -m ci toolkit --cuda 12.4" in line


def test_installer_cells_pin_a_checksum() -> None:
    for cell in matrix.CELLS:
        if cell.windows is not None and cell.windows.toolkit == "nvidia-installer":
            algorithm, digest = installer.parse_hash(cell.windows.installer_hash)
            assert algorithm in installer.HASH_ALGORITHMS and digest
    with pytest.raises(UsageError):
        installer.parse_hash("sha256:abc")


# --- `python -m ci toolkit` on Windows ------------------------------------------------------------------------


def test_the_toolkit_command_runs_the_windows_code_on_windows(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, bool]] = []
    home = Path("C:/farm/tools/cuda-win-13.0-0123456789ab/nvidia/cu13")

    def ensure(cell: shapes.Cell, *, install: bool = False) -> layout.WindowsToolkit:
        calls.append((cell.cuda, install))
        return layout.WindowsToolkit(home, "13.0.88", "pypi")

    def linux(cell: shapes.Cell) -> linux_toolkit.InstalledToolkit:
        raise AssertionError("the Linux toolkit code ran on Windows")

    monkeypatch.setattr(toolkit, "ensure", ensure)
    monkeypatch.setattr(linux_toolkit, "ensure_toolkit", linux)
    monkeypatch.setattr(sys, "platform", "win32")
    assert main(["toolkit", "--cuda", "13.0"]) == 0
    assert main(["toolkit", "--cuda", "13.0", "--print-env"]) == 0
    monkeypatch.setattr(sys, "platform", "linux")
    out = capsys.readouterr().out
    assert calls == [("13.0", True), ("13.0", True)]
    assert "nvcc 13.0.88 (pypi)" in out
    assert f'set "CUDA_HOME={home}"' in out and f'set "PATH={home / "bin"};{home / "bin" / "x86_64"};%PATH%"' in out


def test_the_cached_folder_is_the_one_the_toolkit_is_found_in(tmp_path: Path, fake_pip: list[list[str]]) -> None:
    name = wheels.install_name(CU130)
    assert str(wheels.cached_folder(CU130, "C:\\farm")) == f"C:\\farm\\tools\\{name}"
    tk = wheels.ensure_pypi(CU130, probe=None)  # FARM_CACHE_DIR is tmp_path/cache here
    assert Path(tk.cuda_home).parent.parent == tmp_path / "cache" / "tools" / name
    assert str(wheels.cached_folder(CU124, "C:\\farm")) == \
        "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4"
