"""The sdist (ci/release/sdist.py): written without the CUDA torch, complete (every header its sources include, every
source next to them), and proven by a wheel built from it alone.

Fixture: ``tests/fixtures/sdist_header``, a classic extension whose .cpp and .cu share a header, whose setup.py
imports torch at the top and lists its .cu only when CUDA is wanted, and which has no MANIFEST.in. Each test works
on a copy in pytest's tmp_path; fusedops' sdist is built from a copy of what git lists, so nothing is written into
the checkout.

The CPU torch a setup.py that imports torch gets here is ``torch==2.13.0+cpu`` (the one pip finds on this machine);
the wheel from the sdist uses the farm's cached build environment of torch 2.11 (CUDA 13) and the pinned toolkit.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ci.errors import UsageError
from ci.release import sdist
from ci.universe.project import reading

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "sdist_header"
#: The CPU-only torch pip can install here (a setup.py that imports torch writes its sdist with it).
CPU_TORCH = "2.13.0"
FIX = "recursive-include sdist_header/csrc *.h *.cpp *.cu\n"


def copy_fixture(tmp_path: Path, manifest: str | None = None) -> Path:
    folder = tmp_path / "sdist_header"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    if manifest is not None:
        (folder / "MANIFEST.in").write_text(manifest)
    return folder


def copy_checkout(dest: Path) -> Path:
    """The files git lists (tracked, and untracked but not ignored: what the farm's builds copy), copied out of the
    checkout."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True)
    for name in filter(None, listing.stdout.split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


# --- the check, on lists (no build) ------------------------------------------------------------------------------


SOURCES = {
    "csrc/ops.cpp": '#include "common.h"\n#include <torch/library.h>\n#include "torch/csrc/stable/library.h"\n',
    "csrc/common.h": "#pragma once\n",
    "csrc/cpu/lltm.cpp": '#include "lltm_kernels.h"\n  #  include "../common.h"\n// #include "gone.h"\n',
    "csrc/cpu/lltm_kernels.h": '#include "vec.h"\n',  # next to it, and not included by a shipped file itself
    "csrc/cpu/vec.h": "",
    "csrc/cuda/lltm.cu": '#include "cuda_common.cuh"\n#include "mylib/api.h"\n',
    "csrc/cuda/cuda_common.cuh": '#include "common.h"\n',  # csrc/common.h through -Icsrc (a parent folder)
    "third_party/mylib/include/mylib/api.h": "",
    "tests/fixtures/other/x.cpp": "",
    "setup.py": "",
}


def needed(members: list[str]) -> dict[str, str]:
    return {n.path: n.why for n in sdist.needed_files(members, list(SOURCES), SOURCES.__getitem__)}


def test_check_names_every_header_a_shipped_source_includes() -> None:
    shipped = ["setup.py", "csrc/ops.cpp", "csrc/cpu/lltm.cpp", "csrc/cuda/lltm.cu"]
    missing = needed(shipped)
    # Headers, each with the include that needs it; transitively (vec.h through lltm_kernels.h); through a parent
    # folder (-Icsrc) and an include/ folder; never a torch or system header, never a commented-out include.
    assert set(missing) == {"csrc/common.h", "csrc/cpu/lltm_kernels.h", "csrc/cpu/vec.h", "csrc/cuda/cuda_common.cuh",
                            "third_party/mylib/include/mylib/api.h"}
    assert missing["csrc/cpu/vec.h"] == '#include "vec.h" in csrc/cpu/lltm_kernels.h'
    assert not needed([*shipped, *(k for k in SOURCES if k.startswith(("csrc/", "third_party/")))])


def test_check_names_a_source_left_out_next_to_the_shipped_ones() -> None:
    # What an sdist written without CUDA holds when setup.py lists the .cu only where it finds CUDA.
    shipped = ["setup.py", "csrc/ops.cpp", "csrc/common.h", "csrc/cpu/lltm.cpp", "csrc/cpu/lltm_kernels.h",
               "csrc/cpu/vec.h"]
    missing = needed(shipped)
    # ... and what the left-out source includes, so that one MANIFEST.in change fixes everything.
    assert set(missing) == {"csrc/cuda/lltm.cu", "csrc/cuda/cuda_common.cuh", "third_party/mylib/include/mylib/api.h"}
    assert "under csrc/" in missing["csrc/cuda/lltm.cu"]
    assert missing["csrc/cuda/cuda_common.cuh"] == '#include "cuda_common.cuh" in csrc/cuda/lltm.cu'
    assert "tests/fixtures/other/x.cpp" not in missing  # not under the sdist's source folder


def test_check_names_the_sources_when_the_sdist_holds_none() -> None:
    # A setup.py that lists its extensions only where torch is installed, written without torch, no MANIFEST.in.
    missing = needed(["setup.py"])
    assert "csrc/ops.cpp" in missing and "third_party/mylib/include/mylib/api.h" in missing
    assert "tests/fixtures/other/x.cpp" not in missing


# --- the fixture: no MANIFEST.in, then with one -----------------------------------------------------------------


def test_sdist_without_manifest_fails_naming_the_header(tmp_path: Path) -> None:
    config = reading.load(copy_fixture(tmp_path))
    with pytest.raises(UsageError) as caught:
        sdist.build_sdist(config, tmp_path / "dist", cpu_torch=CPU_TORCH)
    line = caught.value.line()
    assert "\n" not in line
    assert "sdist_header/csrc/scaled_add.h" in line and "scaled_add.cpp" in line, line
    assert "add it to MANIFEST.in" in line and "recursive-include sdist_header" in line, line
    # Written without CUDA (a CPU torch, no FORCE_CUDA): setup.py left the .cu out as well.
    assert "sdist_header/csrc/cuda/scaled_add.cu" in caught.value.details


def test_sdist_with_manifest_passes(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, FIX)
    config = reading.load(folder)
    built = sdist.build_sdist(config, tmp_path / "dist", cpu_torch=CPU_TORCH)
    members = sdist.sdist_members(built)
    assert {"sdist_header/csrc/scaled_add.h", "sdist_header/csrc/cuda/scaled_add.cu", "MANIFEST.in"} <= set(members)
    assert not list(folder.glob("*.egg-info")), "the sdist was written in a copy, not in the project's folder"


# --- fusedops' own sdist ---------------------------------------------------------------------------------------


def test_fusedops_sdist_holds_every_csrc_file(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path / "fusedops")
    config = reading.load(checkout)
    built = sdist.build_sdist(config, tmp_path / "dist", cpu_torch=CPU_TORCH, check=False)
    members = set(sdist.sdist_members(built))
    csrc = sorted(str(p.relative_to(checkout)) for p in (checkout / "csrc").rglob("*") if p.is_file())
    assert [f for f in csrc if f not in members] == []
    assert any(f.endswith(".h") for f in csrc) and any(f.endswith(".cuh") for f in csrc)
    sdist.check_sdist(config, built)


# --- a wheel from the sdist ------------------------------------------------------------------------------------


def test_a_refused_sdist_is_not_left_behind(tmp_path: Path) -> None:
    """The cuda_if_available shape (setup.py lists its .cu only where torch sees a GPU): written without CUDA,
    the sdist lacks the .cu; the farm refuses it and writes nothing to the destination."""
    source = Path(__file__).resolve().parents[2] / "fixtures" / "cuda_if_available"
    copy = tmp_path / "proj"
    shutil.copytree(source, copy)
    dest = tmp_path / "dist"
    with pytest.raises(UsageError, match=r"lacks a file its build needs \(csrc/twice_cuda\.cu"):
        sdist.build_sdist(reading.load(copy), dest, cpu_torch="2.13.0")
    assert not dest.exists()


def test_the_copy_the_sdist_is_written_from_keeps_the_projects_links(tmp_path: Path) -> None:
    """csrc/include -> ../third_party/x/include: the copy holds the link (a folder of headers), as a build's does."""
    root = tmp_path / "proj"
    (root / "third_party" / "x" / "include").mkdir(parents=True)
    (root / "third_party" / "x" / "include" / "x.h").write_text("#pragma once\n")
    (root / "csrc").mkdir()
    (root / "csrc" / "include").symlink_to("../third_party/x/include", target_is_directory=True)
    (root / "setup.py").write_text("")
    count = sdist.copy_project(root, tmp_path / "copy")
    copied = tmp_path / "copy" / "csrc" / "include"
    assert copied.is_symlink() and str(copied.readlink()) == "../third_party/x/include"
    assert (copied / "x.h").read_text() == "#pragma once\n" and count == 3
