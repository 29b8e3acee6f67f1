"""Small by construction (issue 33, item 1): a wheel's libraries lose their debug sections, kept beside it by
build-id; real ELF files from this machine's gcc, real objcopy; and the ``strip-debug`` key."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import platform
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci.audit import debug_info
from ci.builds import debug_split
from ci.errors import MissingRequirement, UsageError
from ci.universe.project import reading

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("objcopy")), reason="needs gcc, binutils")

SOURCE = "struct point { int x, y; };\nint norm1(struct point p) { return p.x + p.y; }\n"


def library(folder: Path, *, debug: bool = True, name: str = "_C.abi3.so") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "x.c").write_text(SOURCE)
    out = folder / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-g" if debug else "-g0", "-Wl,--build-id=sha1",
                    f"-ffile-prefix-map={folder}=.", "x.c", "-o", name], cwd=folder, check=True)
    return out


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_of(folder: Path, lib: Path) -> Path:
    info = "demo-0.1.0.dist-info"
    files = {"demo/__init__.py": b"", f"demo/{lib.name}": lib.read_bytes(),
             f"{info}/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 0.1.0\n",
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: false\n"
                              b"Tag: cp311-cp311-linux_x86_64\n"}
    files[f"{info}/RECORD"] = ("".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in files.items())
                               + f"{info}/RECORD,,\n").encode()
    path = folder / "demo-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def test_the_debug_sections_go_to_a_file_named_by_build_id(tmp_path: Path) -> None:
    lib = library(tmp_path / "lib")
    sections = debug_info.debug_sections(lib)
    assert ".debug_info" in sections and sum(sections.values()) > 0
    ident = debug_info.build_id(lib)
    assert ident and len(ident) == 40
    wheel = wheel_of(tmp_path, lib)
    result = debug_split.split_wheel(wheel, tmp_path / "out", tmp_path / "debug", platform.machine())
    [split] = result.splits
    assert (split.member, split.build_id, split.debug_file) == (f"demo/{lib.name}", ident, f"{ident}.debug")
    assert split.after < split.before == lib.stat().st_size
    with zipfile.ZipFile(result.wheel) as zf:
        stripped = zf.read(f"demo/{lib.name}")
        record = {row[0]: row[1:] for row in csv.reader(io.StringIO(zf.read("demo-0.1.0.dist-info/RECORD").decode()))}
    assert len(stripped) == split.after and record[f"demo/{lib.name}"] == [record_hash(stripped), str(len(stripped))]
    unpacked = tmp_path / "stripped.so"
    unpacked.write_bytes(stripped)
    assert debug_info.debug_sections(unpacked) == {}
    debug = tmp_path / "debug" / split.debug_file
    assert debug_info.build_id(unpacked) == debug_info.build_id(debug) == ident  # gdb/eu-unstrip pair them so
    assert ".debug_info" in debug_info.debug_sections(debug)
    link = subprocess.run(["objcopy", "--dump-section", f".gnu_debuglink={tmp_path / 'link'}", unpacked,
                           tmp_path / "scratch.so"], check=True)
    assert link.returncode == 0 and (tmp_path / "link").read_bytes().startswith(f"{ident}.debug\0".encode())
    # The symbol table stays: a backtrace keeps its function names.
    assert "norm1" in subprocess.run(["nm", unpacked], capture_output=True, text=True, check=True).stdout
    assert "debug/" in result.summary() and f"{split.before} -> {split.after} bytes" in result.summary()


def test_the_split_is_deterministic(tmp_path: Path) -> None:
    lib = library(tmp_path / "lib")
    wheel = wheel_of(tmp_path, lib)
    first = debug_split.split_wheel(wheel, tmp_path / "a", tmp_path / "a-debug", platform.machine())
    second = debug_split.split_wheel(wheel, tmp_path / "b", tmp_path / "b-debug", platform.machine())
    assert first.wheel.read_bytes() == second.wheel.read_bytes()
    name = first.splits[0].debug_file
    assert (tmp_path / "a-debug" / name).read_bytes() == (tmp_path / "b-debug" / name).read_bytes()


def test_a_wheel_without_debug_sections_is_kept(tmp_path: Path) -> None:
    wheel = wheel_of(tmp_path, library(tmp_path / "lib", debug=False))
    result = debug_split.split_wheel(wheel, tmp_path / "out", tmp_path / "debug", platform.machine())
    assert result.wheel == wheel and result.splits == () and not (tmp_path / "debug").exists()
    assert result.summary() == "no library carried debug sections"


def test_another_architecture_needs_its_objcopy(monkeypatch: pytest.MonkeyPatch) -> None:
    other = "aarch64" if platform.machine() != "aarch64" else "x86_64"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(debug_split.proc, "which", lambda name: None)
    with pytest.raises(MissingRequirement, match=f"needs {other}-linux-gnu-objcopy.*strip-debug = false"):
        debug_split.objcopy_for(other)


def test_the_debug_info_check_names_the_library_and_its_bytes(tmp_path: Path) -> None:
    root = tmp_path / "wheel"
    lib = library(root / "demo")
    check = debug_info.check_debug_info([lib], root, None)
    assert not check.ok and check.name == "debug-info"
    total = sum(debug_info.debug_sections(lib).values())
    assert f"demo/{lib.name}: " in check.detail and f"({total} of {lib.stat().st_size} bytes)" in check.detail
    stripped = library(root / "clean", debug=False)
    assert debug_info.check_debug_info([stripped], root, None).ok


def test_strip_debug_false_keeps_them_as_a_warning(tmp_path: Path) -> None:
    from ci.universe import targets

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "1.0"\n'
                                             "[tool.cuda-ext-farm]\nstrip-debug = false\n")
    config = reading.load(tmp_path)
    assert config.strip_debug is False and reading.load(tmp_path.parent / tmp_path.name).strip_debug is False
    target = targets.platform_targets(config)[0]
    check = debug_info.check_debug_info([library(tmp_path / "w" / "demo")], tmp_path / "w", target)
    assert check.ok and check.warn and "strip-debug = false" in check.detail
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "1.0"\n'
                                             '[tool.cuda-ext-farm]\nstrip-debug = "no"\n')
    with pytest.raises(UsageError, match=r"strip-debug must be true or false \('no'\)"):
        reading.load(tmp_path)


@pytest.mark.skipif(not shutil.which("aarch64-linux-gnu-gcc") or platform.machine() == "aarch64",
                    reason="needs the aarch64 cross compiler")
def test_a_cross_built_library_is_split_with_the_cross_objcopy(tmp_path: Path) -> None:
    (tmp_path / "x.c").write_text(SOURCE)
    subprocess.run(["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-g", "-Wl,--build-id=sha1", "x.c", "-o",
                    "_C.abi3.so"], cwd=tmp_path, check=True)
    wheel = wheel_of(tmp_path, tmp_path / "_C.abi3.so")
    result = debug_split.split_wheel(wheel, tmp_path / "out", tmp_path / "debug", "aarch64")
    [split] = result.splits
    assert split.after < split.before and (tmp_path / "debug" / f"{split.build_id}.debug").is_file()
