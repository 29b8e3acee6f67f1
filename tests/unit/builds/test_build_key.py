"""ci/builds/build_key.py: a kept work folder is reused only under the key it was built with; otherwise its
outputs go, with one line naming what changed (names only: values may hold secrets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ci.builds import build_key

SECRET = "-DTOKEN=hunter2-secret"


def folder_with_outputs(tmp_path: Path) -> tuple[Path, Path]:
    work = tmp_path / "work"
    objects = work / "src" / "build" / "temp"
    objects.mkdir(parents=True)
    (objects / "k.o").write_bytes(b"old object")
    return work, work / "src"


def test_the_key_holds_what_reaches_compiles_through_the_environment_and_nothing_else() -> None:
    env = {"NVCC_APPEND_FLAGS": "-DFOO=1", "NVCC_PREPEND_FLAGS": "-O0", "NVCC_CCBIN": "/x/g++",
           "FARM_NVCC_ARCH_LIST": "9.0", "FARM_NVCC_ARCH_MODE": "replace", "TORCH_CUDA_ARCH_LIST": "9.0",
           "CC": "gcc", "CXX": "g++", "CFLAGS": "-O2", "CXXFLAGS": "-O2", "CPPFLAGS": "-DX", "LDFLAGS": "-L/x",
           "PATH": "/bin", "MAX_JOBS": "2", "SOURCE_DATE_EPOCH": "1", "HOME": "/root"}
    key = build_key.key_of(env, {"toolkit": "13.0.88 /cuda"})
    assert set(key) == {*env} - {"PATH", "MAX_JOBS", "SOURCE_DATE_EPOCH", "HOME"} | {"toolkit"}
    for name in [*key]:
        changed = {**env, name: env.get(name, "") + " changed"} if name != "toolkit" else env
        parts = {"toolkit": "13.0.88 /other-cuda" if name == "toolkit" else "13.0.88 /cuda"}
        assert build_key.changed_names(key, build_key.key_of(changed, parts)) == [name]
    assert build_key.key_of({**env, "MAX_JOBS": "16", "PATH": "/usr/bin"}, {"toolkit": "13.0.88 /cuda"}) == key


def test_an_unchanged_key_keeps_the_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work, source = folder_with_outputs(tmp_path)
    key = build_key.key_of({"NVCC_APPEND_FLAGS": "-DFOO=1"}, {})
    build_key.keep_or_clear(work, key, [source], "the work folder")
    assert not source.exists()  # the first time: a folder of an older farm (no key), cleared
    (source / "build" / "temp").mkdir(parents=True)
    (source / "build" / "temp" / "k.o").write_bytes(b"object")
    capsys.readouterr()
    assert build_key.keep_or_clear(work, key, [source], "the work folder") == []
    assert (source / "build" / "temp" / "k.o").read_bytes() == b"object" and capsys.readouterr().err == ""


def test_a_changed_setting_clears_the_outputs_with_one_line_of_names(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    work, source = folder_with_outputs(tmp_path)
    before = {"NVCC_APPEND_FLAGS": "-DFOO=1", "FARM_NVCC_ARCH_LIST": "9.0"}
    build_key.keep_or_clear(work, build_key.key_of(before, {"torch": "2.11.0"}), [], "the work folder")
    capsys.readouterr()
    after = build_key.key_of({"NVCC_APPEND_FLAGS": SECRET, "FARM_NVCC_ARCH_LIST": "8.0;9.0"}, {"torch": "2.11.0"})
    assert build_key.keep_or_clear(work, after, [source], "the work folder of t") == ["FARM_NVCC_ARCH_LIST",
                                                                                       "NVCC_APPEND_FLAGS"]
    assert not source.exists()
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and ("rebuilding the work folder of t from scratch: changed since its last build: "
                                      "FARM_NVCC_ARCH_LIST, NVCC_APPEND_FLAGS") in said
    assert "hunter2" not in said and "8.0" not in said
    stored = (work / build_key.KEY_FILE).read_text()
    assert "hunter2" not in stored and json.loads(stored) == after


def test_a_folder_of_an_older_farm_is_rebuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No key stored: the objects were made under settings nobody recorded."""
    work, source = folder_with_outputs(tmp_path)
    names = build_key.keep_or_clear(work, build_key.key_of({}, {"torch": "2.11.0"}), [source], "the work folder")
    assert names and not source.exists() and "rebuilding the work folder" in capsys.readouterr().err


def test_a_compiler_is_known_by_its_file(tmp_path: Path) -> None:
    compiler = tmp_path / "g++"
    compiler.write_text("#!/bin/sh\n")
    before = build_key.file_identity(compiler)
    compiler.write_text("#!/bin/sh\nexec /usr/bin/g++-12 \"$@\"\n")
    assert build_key.file_identity(compiler) != before and str(compiler) in before
