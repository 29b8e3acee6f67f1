"""``cuda-ext-farm adopt-torch``: the torch table read from PyPI, replayed from a recorded snapshot (no network)."""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ci.errors import CommandFailed
from ci.universe import adoption, matrix, pypi_torch, shapes
from ci.universe.lockcheck import pages

SNAPSHOT = Path(__file__).resolve().parents[2] / "fixtures" / "pypi_torch"


@pytest.fixture
def snapshot() -> pypi_torch.Recorded:
    return pypi_torch.Recorded(SNAPSHOT)


def test_every_recorded_entry_renders_byte_for_byte() -> None:
    text = adoption.MATRIX_FILE.read_text()
    names = adoption.vocabulary(text)
    written = adoption.entries(text)
    assert list(written) == [r.version for r in matrix.TORCH_RELEASES]
    for release in matrix.TORCH_RELEASES:
        assert adoption.render(release, names) == written[release.version]


def test_replay_adopts_the_newest_release_byte_for_byte(tmp_path: Path, snapshot: pypi_torch.Recorded) -> None:
    """Drop the newest recorded release from a copy of the table; the adoption from the snapshot writes it back."""
    original = adoption.MATRIX_FILE.read_text()
    newest = matrix.TORCH_RELEASES[-1]
    entry = adoption.entries(original)[newest.version]
    copy = tmp_path / "matrix.py"
    copy.write_text(original.replace(entry, "", 1))
    said: list[str] = []
    code = adoption.adopt(False, source=snapshot, matrix_file=copy, table=matrix.TORCH_RELEASES[:-1],
                          regenerate_after=False, say=said.append)
    assert code == 0
    assert said[0] == f"torch {newest.version} is on PyPI, not in TORCH_RELEASES"
    assert said[1] + "\n" == entry
    assert adoption.entries(copy.read_text())[newest.version] == entry
    assert copy.read_text() == original


def test_check_is_current_against_the_snapshot(snapshot: pypi_torch.Recorded) -> None:
    said: list[str] = []
    assert adoption.adopt(True, source=snapshot, say=said.append) == 0
    assert said == [f"TORCH_RELEASES is current: {len(matrix.TORCH_RELEASES)} releases match PyPI"]


def test_check_lists_what_differs_and_what_is_new(tmp_path: Path, snapshot: pypi_torch.Recorded) -> None:
    stale = list(matrix.TORCH_RELEASES[:-1])
    stale[-1] = dataclasses.replace(stale[-1], sass=("9.0",), cxx=17)
    stale[0] = dataclasses.replace(stale[0], version="2.8.1")
    copy = tmp_path / "matrix.py"
    copy.write_text(adoption.MATRIX_FILE.read_text())
    said: list[str] = []
    assert adoption.adopt(True, source=snapshot, table=stale, matrix_file=copy, say=said.append) == 1
    assert said[0] == "torch 2.8.0 replaces 2.8.1 (a newer patch on PyPI)"
    assert said[2].startswith(f"torch {stale[-1].version}: sass ('9.0',) in the table, ")
    assert "cxx 17 in the table, 20 on PyPI" in said[2]
    assert said[3] == f"torch {matrix.TORCH_RELEASES[-1].version} is on PyPI, not in TORCH_RELEASES"
    assert copy.read_text() == adoption.MATRIX_FILE.read_text()  # --check writes nothing


def test_each_field_comes_from_pypi(snapshot: pypi_torch.Recorded) -> None:
    old = pypi_torch.observe("2.8.0", snapshot)
    assert (old.cuda, old.aarch64, old.sass_aarch64, old.cxx) == ("12.8", False, (), 17)
    assert old.pythons == ("3.9", "3.10", "3.11", "3.12", "3.13")
    new = pypi_torch.observe("2.12.1", snapshot)
    assert (new.cuda, new.aarch64, new.cxx) == ("13.0", True, 20)
    assert new.sass_aarch64 == ("8.0", "9.0", "10.0", "11.0", "12.0")


def test_cuda_of_reads_each_way_torch_pins_cuda() -> None:
    cu12 = ('Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and '
            'platform_machine == "x86_64"\n')
    assert pypi_torch.cuda_of(cu12, "x86_64") == "12.8"
    assert pypi_torch.cuda_of(cu12, "aarch64") is None  # 2.8-2.10's aarch64 wheels: CPU builds
    toolkit = 'Requires-Dist: cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"\n'
    assert pypi_torch.cuda_of(toolkit, "aarch64") == "13.2"
    assert pypi_torch.cuda_of("Requires-Dist: nvidia-cuda-runtime==13.0.96\n", "x86_64") == "13.0"
    assert pypi_torch.cuda_of("Requires-Dist: filelock\n", "x86_64") is None


def test_cxx_is_the_flag_cpp_extension_passes_most() -> None:
    source = ("    ``-std=c++17``\n    extra_compile_args={'cxx': ['-g', '-std=c++20', '-fPIC']}\n"
              "common_cflags += ['-std=c++17', '-fPIC']\ncflags = ['/std:c++17']\n")
    assert pypi_torch.cxx_of(source) == 17
    assert pypi_torch.cxx_of(source.replace("c++17", "c++20")) == 20
    with pytest.raises(CommandFailed, match="names no -std=c\\+\\+ flag"):
        pypi_torch.cxx_of("")


class _Toolkits:
    """A source with NVIDIA's toolkit wheels of one CUDA version."""

    def __init__(self, versions: dict[str, str]) -> None:
        self.versions = versions

    def files(self, project: str) -> list[pages.IndexFile]:
        version = self.versions.get(project)
        if version is None:
            return []
        return [pages.IndexFile(f"{project.replace('-', '_')}-{version}-py3-none-manylinux2014_x86_64.whl",
                                    None, None)]

    def metadata(self, wheel: pages.IndexFile) -> str:
        raise AssertionError(wheel)

    def wheel_facts(self, wheel: pages.IndexFile) -> pypi_torch.WheelFacts:
        raise AssertionError(wheel)


def test_a_new_cuda_version_gets_a_cell_of_pypi_pins() -> None:
    text = adoption.MATRIX_FILE.read_text()
    source = _Toolkits({"nvidia-cuda-nvcc": "13.7.20", "nvidia-cuda-runtime": "13.7.21", "nvidia-cuda-cccl": "13.7.3"})
    cell, line = adoption.cell_for("13.7", source, text)
    assert line == "new toolkit cell cu137: nvcc 13.7.20, runtime 13.7.21, cccl 13.7.3 (laid out as cu135)"
    assert cell is not None and 'cuda="13.7"' in cell and 'nvcc="13.7.20", runtime="13.7.21", cccl="13.7.3"' in cell
    written = adoption.with_cell(text, cell, "13.7", "13.5")
    ast.parse(written)
    assert written.count("    Cell(\n") == text.count("    Cell(\n") + 1
    assert written.index('cuda="13.7"') < written.index('cuda="12.8"')
    assert f'"13.5": {matrix.MAX_GCC["13.5"]}, "13.7": {matrix.MAX_GCC["13.5"]}' in written


def test_a_cuda_version_not_on_pypi_is_one_line() -> None:
    cell, line = adoption.cell_for("13.7", _Toolkits({"nvidia-cuda-nvcc": "13.7.20"}), adoption.MATRIX_FILE.read_text())
    assert cell is None
    assert line == ("CUDA 13.7 has no toolkit cell, and PyPI has no nvidia-cuda-runtime, nvidia-cuda-cccl 13.7.*: "
                    "the toolkit is not on PyPI yet; run `cuda-ext-farm adopt-torch` again when it is")


def test_the_snapshot_is_trimmed() -> None:
    page = json.loads((SNAPSHOT / "simple" / "torch.json").read_text())
    assert all(f["filename"].endswith(tuple(f"{tag}.whl" for tag in pypi_torch.PLATFORM_TAGS.values()))
               for f in page["files"])
    assert {shapes.minor_of(r.version) for r in matrix.TORCH_RELEASES} <= {
        shapes.minor_of(v) for v in pypi_torch.torch_versions(pypi_torch.Recorded(SNAPSHOT))}


def test_a_torch_newer_than_the_table_says_how_to_get_it() -> None:
    from ci.errors import MatrixError

    with pytest.raises(MatrixError) as caught:
        matrix.get_torch("9.1")
    assert "update the farm (its daily adopt-torch pull request" in caught.value.line()
    assert "run `cuda-ext-farm adopt-torch` in the farm's checkout" in caught.value.line()
    with pytest.raises(MatrixError, match=r"unknown torch release \(1.0\): pick one of 2.8"):
        matrix.get_torch("1.0")


# --- a release read while PyTorch uploads it -----------------------------------------------------------------------

IN_PROGRESS = SNAPSHOT / "upload_in_progress"


class _Without:
    """A snapshot less the wheels ``gone`` names (those not uploaded yet)."""

    def __init__(self, source: pypi_torch.Recorded, gone: Callable[[str], bool]) -> None:
        self.source, self.gone = source, gone

    def files(self, project: str) -> list[pages.IndexFile]:
        return [f for f in self.source.files(project) if not self.gone(f.filename)]

    def metadata(self, wheel: pages.IndexFile) -> str:
        return self.source.metadata(wheel)

    def wheel_facts(self, wheel: pages.IndexFile) -> pypi_torch.WheelFacts:
        return self.source.wheel_facts(wheel)


def _adopt_into_copy(tmp_path: Path, source: pypi_torch.Source, check: bool) -> tuple[int, list[str], Path]:
    """``adopt`` against ``source`` into a copy of matrix.py whose table lacks the newest release."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    copy = tmp_path / "matrix.py"
    original = adoption.MATRIX_FILE.read_text()
    copy.write_text(original.replace(adoption.entries(original)[matrix.TORCH_RELEASES[-1].version], "", 1))
    said: list[str] = []
    code = adoption.adopt(check, source=source, matrix_file=copy, table=matrix.TORCH_RELEASES[:-1],
                          regenerate_after=False, say=said.append)
    return code, said, copy


@pytest.mark.parametrize("check", [False, True])
def test_a_partial_upload_writes_nothing_and_is_no_change(tmp_path: Path, check: bool) -> None:
    """The recorded state of torch 2.15.0 mid-upload (tests/fixtures/pypi_torch/upload_in_progress: its Linux wheels
    up, Windows only for CPython 3.11): without the refusal it would be written with pythons=("3.11",)."""
    newest = matrix.TORCH_RELEASES[-1]
    code, said, copy = _adopt_into_copy(tmp_path, pypi_torch.Recorded(IN_PROGRESS), check)
    before = copy.read_text()
    assert code == 0  # no change: the scheduled check answers new=false
    assert said == [f"upload incomplete, try later: torch {newest.version} is on PyPI with no win_amd64 CPython 3.12 "
                    f"3.13 3.14 wheel yet (torch {matrix.TORCH_RELEASES[-2].version} has them), its platforms' "
                    "CPythons differ (manylinux_2_28_x86_64 3.11 3.12 3.13 3.14 3.15; manylinux_2_28_aarch64 3.11 "
                    f"3.12 3.13 3.14 3.15; win_amd64 3.11) ({newest.version}): nothing was written; run `cuda-ext-farm "
                    "adopt-torch` again when PyTorch's upload has finished (the scheduled run does each day)"]
    assert copy.read_text() == before and newest.version not in copy.read_text().split("TORCH_RELEASES")[1]


@pytest.mark.parametrize(("gone", "reason"), [
    ("win_amd64", "no win_amd64 wheel yet (torch {before} has them), no CPython with both a manylinux_2_28_x86_64 and "
                  "a win_amd64 wheel"),
    ("manylinux_2_28_aarch64", "no manylinux_2_28_aarch64 wheel yet (torch {before} has them)"),
    ("x86_64", "no manylinux_2_28_x86_64 wheel yet (torch {before} has them), no CPython with both a "
               "manylinux_2_28_x86_64 and a win_amd64 wheel"),
])
def test_fewer_platforms_than_the_previous_minor_is_an_upload_in_progress(tmp_path: Path, gone: str,
                                                                        reason: str) -> None:
    newest, before = matrix.TORCH_RELEASES[-1], matrix.TORCH_RELEASES[-2]
    partial = _Without(pypi_torch.Recorded(SNAPSHOT),
                       lambda name: name.startswith(f"torch-{newest.version}-") and gone in name)
    code, said, copy = _adopt_into_copy(tmp_path, partial, False)
    assert code == 0 and len(said) == 1
    assert said[0].startswith(f"upload incomplete, try later: torch {newest.version} is on PyPI with "
                              + reason.format(before=before.version))
    assert newest.version not in copy.read_text().split("TORCH_RELEASES")[1]
    assert pypi_torch.upload_incomplete(pypi_torch.Recorded(SNAPSHOT), newest.version, before.version) is None


def test_the_scheduled_check_reads_an_incomplete_upload_as_no_change(tmp_path: Path) -> None:
    """adopt-torch.yml's check step (adopt_jobs.CHECK_SCRIPT) with the command's own line and exit code: new=false,
    a notice, the step passes; a new release: new=true."""
    import shutil
    import subprocess

    from ci.gha import adopt_jobs

    bash = shutil.which("bash")
    assert bash is not None, "bash runs the workflow's step"
    code, said, _ = _adopt_into_copy(tmp_path / "partial", pypi_torch.Recorded(IN_PROGRESS), True)
    new_code, new_said, _ = _adopt_into_copy(tmp_path / "complete", pypi_torch.Recorded(SNAPSHOT), True)
    for answer, lines, expected in ((code, said, "new=false"), (new_code, new_said, "new=true")):
        output = tmp_path / f"output-{answer}"
        fake = tmp_path / f"bin-{answer}"
        fake.mkdir()
        (fake / "python").write_text("#!/bin/sh\ncat \"$SAID\"\nexit \"$CODE\"\n")
        (fake / "python").chmod(0o755)
        (tmp_path / f"said-{answer}").write_text("\n".join(lines) + "\n")
        done = subprocess.run([bash, "-c", adopt_jobs.CHECK_SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                              env={"PATH": f"{fake}:/usr/bin:/bin", "GITHUB_OUTPUT": str(output), "CODE": str(answer),
                                   "SAID": str(tmp_path / f"said-{answer}")}, check=False)
        assert done.returncode == 0, done.stderr
        assert output.read_text() == f"{expected}\n"
        assert ("::notice title=adopt-torch::upload incomplete, try later" in done.stdout) == (expected == "new=false")


@pytest.mark.parametrize(("platforms", "reason"), [
    # cp312 not up anywhere yet: every platform agrees, each has the new cp315 beside what it kept.
    (("x86_64", "aarch64", "win_amd64"), "no manylinux_2_28_x86_64 CPython 3.12, manylinux_2_28_aarch64 CPython 3.12, "
                                         "win_amd64 CPython 3.12 wheel yet (torch {before} has them)"),
    (("aarch64",), "no manylinux_2_28_aarch64 CPython 3.12 wheel yet (torch {before} has them)"),
])
def test_a_cpython_the_previous_minor_has_is_missing_from_the_upload(tmp_path: Path, platforms: tuple[str, ...],
                                                                     reason: str) -> None:
    """The previous minor's CPythons, platform by platform, as sets: 2.15 without its cp312 wheels still has five
    CPythons where 2.14 had five (3.15 new, 3.10 dropped), yet 3.12 is missing."""
    newest, before = matrix.TORCH_RELEASES[-1], matrix.TORCH_RELEASES[-2]
    assert "3.12" in before.pythons and "3.15" in newest.pythons and "3.10" not in newest.pythons
    partial = _Without(pypi_torch.Recorded(SNAPSHOT), lambda name: name.startswith(f"torch-{newest.version}-cp312-")
                       and any(p in name for p in platforms))
    code, said, copy = _adopt_into_copy(tmp_path, partial, False)
    assert code == 0 and len(said) == 1
    assert reason.format(before=before.version) in said[0], said[0]
    assert said[0].startswith(f"upload incomplete, try later: torch {newest.version} is on PyPI with no ")
    assert newest.version not in copy.read_text().split("TORCH_RELEASES")[1]
