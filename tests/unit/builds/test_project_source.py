"""The files a build copies (ci/builds/project_source.py) from real git repositories: an initialised submodule's files
(nested ones too, and their untracked files) replace its gitlink entry; a submodule whose folder is empty stops the
listing with one line naming the folder."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ci.builds import project_source
from ci.errors import UsageError

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
                          cwd=cwd, env=GIT_ENV, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def repo(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    git(folder, "init", "-q")
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "first")
    return folder


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """project -> third_party/lib (a submodule) -> vendor/inner (a submodule of the submodule)."""
    inner = repo(tmp_path / "inner", {"inner.h": "#pragma once\n"})
    lib = repo(tmp_path / "lib", {"include/lib/lib.h": "#pragma once\n", ".gitignore": "*.o\n"})
    git(lib, "submodule", "add", "-q", str(inner), "vendor/inner")
    git(lib, "commit", "-qm", "inner")
    project = repo(tmp_path / "project", {"setup.py": "", "csrc/a.cpp": "", ".gitignore": "build/\n"})
    git(project, "submodule", "add", "-q", str(lib), "third_party/lib")
    git(project, "commit", "-qm", "lib")
    git(project, "submodule", "update", "--init", "--recursive", "-q")
    return project


def test_initialised_submodules_reach_the_listing_nested_ones_and_untracked_files_too(nested: Path) -> None:
    (nested / "third_party" / "lib" / "local.h").write_text("")  # untracked, not ignored: copied
    (nested / "third_party" / "lib" / "x.o").write_text("")  # ignored by the submodule's .gitignore
    (nested / "build").mkdir()
    (nested / "build" / "junk.txt").write_text("")
    assert project_source.project_files(nested) == [
        ".gitignore", ".gitmodules", "csrc/a.cpp", "setup.py",
        "third_party/lib/.gitignore", "third_party/lib/.gitmodules", "third_party/lib/include/lib/lib.h",
        "third_party/lib/local.h", "third_party/lib/vendor/inner/inner.h",
    ]


def test_sync_source_copies_the_submodule_headers(nested: Path, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    project_source.sync_source(nested, dest)
    assert (dest / "third_party/lib/include/lib/lib.h").is_file()
    assert (dest / "third_party/lib/vendor/inner/inner.h").is_file()


def test_a_clone_without_recursive_is_refused_naming_the_folder(nested: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(nested), str(clone))
    assert (clone / "third_party" / "lib").is_dir() and not any((clone / "third_party" / "lib").iterdir())
    with pytest.raises(UsageError) as err:
        project_source.project_files(clone)
    assert err.value.line() == (
        "error: a git submodule of the project is not checked out (its folder is empty) (third_party/lib): run "
        "`git submodule update --init --recursive` in the project's folder, then build again")


def test_a_nested_submodule_not_initialised_is_named_with_its_full_path(nested: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(nested), str(clone))
    git(clone, "submodule", "update", "--init", "-q")  # not --recursive
    with pytest.raises(UsageError) as err:
        project_source.project_files(clone)
    assert err.value.value == "third_party/lib/vendor/inner"


def test_outside_git_an_empty_gitmodules_folder_is_refused_too(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "third_party" / "glm").mkdir(parents=True)
    (project / "setup.py").write_text("")
    (project / ".gitmodules").write_text('[submodule "glm"]\n\tpath = third_party/glm\n\turl = https://x/glm\n')
    with pytest.raises(UsageError, match="third_party/glm"):
        project_source.project_files(project)
    (project / "third_party" / "glm" / "glm.hpp").write_text("")
    assert project_source.project_files(project) == [".gitmodules", "setup.py", "third_party/glm/glm.hpp"]


def test_the_sdist_check_asks_for_a_submodule_header_the_sources_include(nested: Path) -> None:
    """ci/release/sdist.py judges an sdist against the project's files: a header of a submodule is one of them."""
    from ci.release import sdist

    (nested / "csrc" / "a.cpp").write_text('#include "lib/lib.h"\n')
    files = project_source.project_files(nested)
    members = [f for f in files if not f.startswith("third_party/")]
    needed = sdist.needed_files(members, files, lambda name: (nested / name).read_text())
    assert [n.path for n in needed] == ["third_party/lib/include/lib/lib.h"]


def test_a_failed_build_leaves_no_empty_wheelhouse_it_created(tmp_path: Path) -> None:
    from ci.builds import tail

    outputs = tail.Outputs(wheelhouse=tmp_path / "wheelhouse", build_root=tmp_path / "build")
    with pytest.raises(UsageError), tail.no_empty_wheelhouse(outputs):
        outputs.check_writable()
        raise UsageError("the build failed", "x", "y")
    assert not outputs.wheelhouse.exists()
    (outputs.wheelhouse / "other-target").mkdir(parents=True)  # one that was there (with a build in it) stays
    with pytest.raises(UsageError), tail.no_empty_wheelhouse(outputs):
        raise UsageError("the build failed", "x", "y")
    assert outputs.wheelhouse.is_dir()


def test_the_built_target_is_found_among_those_selected(tmp_path: Path) -> None:
    from ci.builds import tail
    from ci.universe import project, targets

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "setup.py").write_text("")
    (tmp_path / "p" / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n[tool.cuda-ext-farm]\n'
                                                   'torch = ["2.11"]\npython = ["3.11", "3.12"]\n')
    chosen = [t for t in targets.targets_for(project.load(tmp_path / "p")) if t.arch == "x86_64"]
    cp311, cp312 = chosen
    outputs = tail.Outputs(wheelhouse=tmp_path / "wh", build_root=tmp_path / "build")
    assert tail.find_built(outputs, chosen) == (cp311, None)
    wheel = outputs.target_dir(cp312) / "p-1-cp312-cp312-manylinux_2_28_x86_64.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"")
    assert tail.find_built(outputs, chosen) == (cp312, wheel)
def _git_out(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_git_commit_clean_dirty_and_outside_git(tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    assert project_source.git_commit(outside) is None
    repo = tmp_path / "repo"
    repo.mkdir()
    _git_out(repo, "init", "-q")
    (repo / "setup.py").write_text("pass\n")
    _git_out(repo, "add", "setup.py")
    _git_out(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    sha = _git_out(repo, "rev-parse", "HEAD")
    assert project_source.git_commit(repo) == sha
    (repo / "untracked.txt").write_text("not part of the commit's files\n")
    assert project_source.git_commit(repo) == sha
    (repo / "setup.py").write_text("pass  # changed\n")
    assert project_source.git_commit(repo) == f"{sha}-dirty"
