"""The free-threaded CPython the farm builds from Debian's source package (ci/toolchain/free_threaded.py): its cache
key, the source pin, the patch series, and (extended: a first run builds it, about 12 minutes on 2 cores) the real
interpreter: free-threaded, the GIL off, pip usable in a venv, and pip's tags picking torch's cp313t wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from ci.errors import CommandFailed, UsageError
from ci.toolchain import free_threaded

SNAPSHOT = Path(__file__).resolve().parents[2] / "fixtures" / "pypi_torch"


def test_the_folder_is_keyed_by_what_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = free_threaded.install_root("3.13t", tmp_path)
    assert root.parent == tmp_path / "tools" and root.name.startswith("cpython-3.13.5t-")
    assert free_threaded.interpreter_in(root, "3.13") == root / "bin" / "python3.13t"
    monkeypatch.setattr(free_threaded, "CONFIGURE_FLAGS", (*free_threaded.CONFIGURE_FLAGS, "--enable-optimizations"))
    optimized = free_threaded.install_root("3.13", tmp_path)
    monkeypatch.setattr(free_threaded, "SKIPPED_PATCHES", ())
    assert len({root, optimized, free_threaded.install_root("3.13", tmp_path)}) == 3


def test_only_a_complete_build_is_reused(tmp_path: Path) -> None:
    root = free_threaded.install_root("3.13", tmp_path)
    python = free_threaded.interpreter_in(root)
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert free_threaded.cached("3.13", tmp_path) is None  # killed half-way: no marker
    (root / free_threaded.COMPLETE).write_text("python3.13 3.13.5-2\n")
    assert free_threaded.cached("3.13", tmp_path) == python


def test_a_version_without_a_source_is_one_line() -> None:
    with pytest.raises(UsageError) as caught:
        free_threaded.source_for("3.12t")
    assert caught.value.line() == ("error: the farm builds no free-threaded CPython of this version (3.12t): use "
                                   "3.13t, or add its Debian source package to SOURCES in "
                                   "ci/toolchain/free_threaded.py")


def test_the_suite_must_still_have_the_pinned_upstream_version() -> None:
    source = free_threaded.source_for("3.13")
    assert free_threaded.upstream_check("python3.13_3.13.5-2+deb13u5.dsc", source) == "3.13.5-2+deb13u5"
    with pytest.raises(CommandFailed, match=r"Debian's trixie now has CPython 3.13.9, not the pinned 3.13.5 "
                                            r"\(python3.13 3.13.9-1\): update SOURCES"):
        free_threaded.upstream_check("python3.13_3.13.9-1.dsc", source)


def test_the_series_leaves_out_the_patches_of_debians_own_layout(tmp_path: Path) -> None:
    series = tmp_path / "series"
    series.write_text("#git-updates.diff\ndeb-locations.diff\ndistutils-install-layout.diff\n"
                      "sysconfig-debian-schemes.diff\nmultiarch.diff\nensurepip-disabled.diff\n\nCVE-2025-8194.patch\n")
    assert free_threaded.series(series) == ["deb-locations.diff", "multiarch.diff", "CVE-2025-8194.patch"]


def test_a_gil_build_says_so() -> None:
    assert free_threaded.gil_state(sys.executable) == (False, True)


@pytest.mark.extended
def test_the_interpreter_runs_without_the_gil_and_pip_picks_torchs_cp313t_wheel(tmp_path: Path) -> None:
    python = free_threaded.ensure("3.13")
    assert free_threaded.gil_state(python) == (True, False)
    assert free_threaded.gil_state(python, {"PYTHON_GIL": "1"}) == (True, True)  # forced back on
    subprocess.run([str(python), "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    venv = tmp_path / "venv" / "bin" / "python"
    code = ("import json, sys; from pip._internal.utils.compatibility_tags import get_supported; "
            "print(json.dumps([str(t) for t in get_supported()]))")
    done = subprocess.run([str(venv), "-c", code], capture_output=True, text=True, check=True, timeout=120,
                          env={**os.environ, "PYTHONNOUSERSITE": "1"})
    supported = json.loads(done.stdout)
    files = [f["filename"] for f in json.loads((SNAPSHOT / "simple" / "torch.json").read_text())["files"]]
    rank = {tag: i for i, tag in enumerate(supported)}
    fitting = sorted((rank[str(t)], f) for f in files if f.startswith("torch-2.11.0-")
                     for t in parse_wheel_filename(f)[3] if str(t) in rank)
    assert fitting and fitting[0][1] == "torch-2.11.0-cp313-cp313t-manylinux_2_28_x86_64.whl"
    assert not any("-cp313-cp313-" in f or "abi3" in f for _, f in fitting)
