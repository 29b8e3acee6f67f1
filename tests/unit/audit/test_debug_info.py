"""The ``fatbin`` report: the fatbinary entries' compression flags, from crafted sections and real libraries."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from ci.audit import debug_info


def entry(flags: int, payload: bytes) -> bytes:
    padded = payload + b"\0" * (-len(payload) % 8)
    head = struct.pack("<HHIQIIIIIIQ", 2, 0x0101, 64, len(padded), len(payload), 0, 0, 90, 0, 0, flags)
    return head + b"\0" * (64 - len(head)) + padded


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", debug_info.FATBIN_MAGIC, 1, 16, len(body)) + body


def test_parse_counts_compressed_entries_of_every_container() -> None:
    data = container(entry(0, b"plain"), entry(debug_info.COMPRESSED_LZ4, b"lz4 data")) + container(
        entry(debug_info.COMPRESSED_ZSTD, b"zstd data!"))
    fatbin = debug_info.parse_fatbin(data)
    assert (fatbin.entries, fatbin.lz4, fatbin.zstd) == (3, 1, 1)
    assert fatbin.describe().startswith("partly compressed (1 Zstandard, 1 LZ4 of 3 entries")
    assert debug_info.parse_fatbin(container(entry(0, b"x"))).describe().startswith("not compressed (1 entries")
    assert debug_info.parse_fatbin(b"").describe() == "no fatbin entries"


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("objcopy")), reason="needs gcc, binutils")
def test_the_check_reads_the_section_of_a_real_elf_file(tmp_path: Path) -> None:
    (tmp_path / "x.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "x.c", "-o", "plain.so"], cwd=tmp_path, check=True)
    assert debug_info.check_fatbin([tmp_path / "plain.so"], tmp_path).detail == "no library holds a fatbin"
    (tmp_path / "fatbin.bin").write_bytes(container(entry(0, b"sass"), entry(0, b"more sass")))
    subprocess.run(["objcopy", "--add-section", ".nv_fatbin=fatbin.bin", "plain.so", "cuda.so"], cwd=tmp_path,
                   check=True)
    check = debug_info.check_fatbin([tmp_path / "cuda.so"], tmp_path)
    assert check.ok and check.warn and check.detail.startswith("cuda.so: not compressed (2 entries")
    assert "--compress-mode=size" in check.detail


def test_zstandard_in_a_cuda_12_library_is_a_warning(tmp_path: Path) -> None:
    """A CUDA 12 wheel runs on drivers from r525; a Zstandard fatbin only from r550: said, never a failure."""
    if not (shutil.which("gcc") and shutil.which("objcopy")):
        pytest.skip("needs gcc, binutils")
    (tmp_path / "x.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "x.c", "-o", "plain.so"], cwd=tmp_path, check=True)
    (tmp_path / "fatbin.bin").write_bytes(container(entry(debug_info.COMPRESSED_ZSTD, b"sass")))
    (tmp_path / "pkg" / "_cuda12").mkdir(parents=True)
    (tmp_path / "pkg" / "_cuda13").mkdir()
    for place in ("pkg/_cuda12/_C.so", "pkg/_cuda13/_C.so", "cuda.so"):
        subprocess.run(["objcopy", "--add-section", ".nv_fatbin=fatbin.bin", "plain.so", place], cwd=tmp_path,
                       check=True)
    assert not debug_info.check_fatbin([tmp_path / "cuda.so"], tmp_path, 13).warn
    twelve = debug_info.check_fatbin([tmp_path / "cuda.so"], tmp_path, 12)
    assert twelve.ok and twelve.warn
    assert "cuda.so: Zstandard fatbins of CUDA 12 need a CUDA 12.4 driver (r550)" in twelve.detail
    # In a wheel across majors each library is its folder's major, whatever the build's.
    merged = debug_info.check_fatbin([tmp_path / "pkg/_cuda12/_C.so", tmp_path / "pkg/_cuda13/_C.so"], tmp_path, 13)
    assert merged.warn and "pkg/_cuda12/_C.so: Zstandard" in merged.detail
    assert "_cuda13/_C.so: Zstandard" not in merged.detail


def test_fusedops_fatbin_is_compressed_with_zstandard(tmp_path: Path, built_wheel: Path) -> None:
    """fusedops passes --compress-mode=size: every entry (cuobjdump --list-elf counts the same) is Zstandard."""
    if not built_wheel.is_file():
        pytest.skip(f"no wheel at {built_wheel}")
    with zipfile.ZipFile(built_wheel) as zf:
        zf.extractall(tmp_path)
    libraries = sorted(tmp_path.rglob("*.so"))
    check = debug_info.check_fatbin(libraries, tmp_path)
    assert check.ok and not check.warn, check.detail
    fatbins = [f for f in map(debug_info.fatbin_of, libraries) if f is not None]
    assert fatbins and all(f.entries and f.zstd == f.entries for f in fatbins)
    assert debug_info.check_debug_info(libraries, tmp_path, None).ok
