"""The files a build copies (ci/builds/project_source.py) from real git repositories: an initialised submodule's files
(nested ones too, and their untracked files) replace its gitlink entry; a submodule whose folder is empty is listed
as such (whether it stops the build is ci/builds/preflight.py's decision: tests/unit/builds/test_preflight.py);
symbolic links, tracked or not, to files and folders, are made again in the copy, and one out of the project is
refused in one line naming it."""

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


def test_a_clone_without_recursive_lists_the_empty_submodule_and_copies_the_rest(nested: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(nested), str(clone))
    assert (clone / "third_party" / "lib").is_dir() and not any((clone / "third_party" / "lib").iterdir())
    tree = project_source.read_tree(clone)
    assert tree.empty_submodules == ("third_party/lib",)
    assert tree.files == (".gitignore", ".gitmodules", "csrc/a.cpp", "setup.py") and tree.links == {}
    dest = tmp_path / "copy"
    assert project_source.sync_source(clone, dest) == 4
    assert not (dest / "third_party").exists()


def test_a_nested_submodule_not_initialised_is_named_with_its_full_path(nested: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(nested), str(clone))
    git(clone, "submodule", "update", "--init", "-q")  # not --recursive
    tree = project_source.read_tree(clone)
    assert tree.empty_submodules == ("third_party/lib/vendor/inner",)
    assert "third_party/lib/include/lib/lib.h" in tree.files


def test_outside_git_an_empty_gitmodules_folder_is_listed_too(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "third_party" / "glm").mkdir(parents=True)
    (project / "setup.py").write_text("")
    (project / ".gitmodules").write_text('[submodule "glm"]\n\tpath = third_party/glm\n\turl = https://x/glm\n')
    assert project_source.read_tree(project).empty_submodules == ("third_party/glm",)
    (project / "third_party" / "glm" / "glm.hpp").write_text("")
    assert project_source.read_tree(project).empty_submodules == ()
    assert project_source.project_files(project) == [".gitmodules", "setup.py", "third_party/glm/glm.hpp"]


# --- symbolic links -----------------------------------------------------------------------------------------------


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """csrc/include -> ../third_party/x/include (a folder, tracked), csrc/version.h -> ../VERSION.h (a file, tracked),
    csrc/extra -> ../third_party/x/extra (a folder, untracked)."""
    project = repo(tmp_path / "linked", {"setup.py": "", "VERSION.h": "#define V 1\n",
                                          "third_party/x/include/x/x.h": "#pragma once\n",
                                          "third_party/x/extra/e.h": "#pragma once\n", "csrc/a.cpp": ""})
    os.symlink("../third_party/x/include", project / "csrc" / "include")
    os.symlink("../VERSION.h", project / "csrc" / "version.h")
    git(project, "add", "csrc/include", "csrc/version.h")
    git(project, "commit", "-qm", "links")
    os.symlink("../third_party/x/extra", project / "csrc" / "extra")  # untracked, not ignored
    return project


def test_links_to_folders_and_files_are_listed_and_made_again_in_the_copy(linked: Path, tmp_path: Path) -> None:
    tree = project_source.read_tree(linked)
    assert tree.links == {"csrc/extra": "../third_party/x/extra", "csrc/include": "../third_party/x/include",
                          "csrc/version.h": "../VERSION.h"}
    dest = tmp_path / "copy"
    project_source.sync_source(linked, dest)
    assert os.readlink(dest / "csrc" / "include") == "../third_party/x/include"
    assert (dest / "csrc" / "include" / "x" / "x.h").read_text() == "#pragma once\n"  # through the copy's own link
    assert (dest / "csrc" / "include").resolve() == (dest / "third_party" / "x" / "include").resolve()
    assert (dest / "csrc" / "extra" / "e.h").is_file() and (dest / "csrc" / "version.h").is_symlink()
    # A file link counts as its file for the other readers (the sdist check, develop's state); a folder link not.
    assert "csrc/version.h" in project_source.project_files(linked)
    assert "csrc/include" not in project_source.project_files(linked)


def test_a_link_outside_git_is_made_again_too(tmp_path: Path) -> None:
    project = tmp_path / "plain"
    (project / "include").mkdir(parents=True)
    (project / "include" / "a.h").write_text("")
    (project / "setup.py").write_text("")
    (project / "csrc").mkdir()
    os.symlink("../include", project / "csrc" / "include")
    tree = project_source.read_tree(project)
    assert tree.links == {"csrc/include": "../include"} and "include/a.h" in tree.files
    project_source.sync_source(project, tmp_path / "copy")
    assert (tmp_path / "copy" / "csrc" / "include" / "a.h").is_file()


def test_a_folder_that_becomes_a_link_and_back_never_writes_through_the_link(linked: Path, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    (linked / "csrc" / "include").unlink()
    (linked / "csrc" / "include").mkdir()
    (linked / "csrc" / "include" / "own.h").write_text("own\n")
    project_source.sync_source(linked, dest)
    assert not (dest / "csrc" / "include").is_symlink() and (dest / "csrc" / "include" / "own.h").is_file()
    (linked / "csrc" / "include" / "own.h").unlink()
    (linked / "csrc" / "include").rmdir()
    os.symlink("../third_party/x/include", linked / "csrc" / "include")
    project_source.sync_source(linked, dest)  # the folder goes, the link comes; the link's target is untouched
    assert (dest / "csrc" / "include").is_symlink() and (dest / "third_party/x/include/x/x.h").is_file()
    (linked / "csrc" / "include").unlink()
    (linked / "csrc" / "include").mkdir()
    (linked / "csrc" / "include" / "x.h").write_text("mine\n")
    project_source.sync_source(linked, dest)  # the link goes before a file is written where it pointed
    assert (dest / "csrc" / "include" / "x.h").read_text() == "mine\n"
    assert (dest / "third_party/x/include/x/x.h").read_text() == "#pragma once\n"


@pytest.mark.parametrize(("target", "what"), [
    ("/usr/include", "a symbolic link of the project points to an absolute path"),
    ("../../outside", "a symbolic link of the project points out of the project"),
])
def test_a_link_out_of_the_project_is_refused_naming_it(linked: Path, target: str, what: str) -> None:
    os.symlink(target, linked / "csrc" / "vendor")
    with pytest.raises(UsageError) as err:
        project_source.read_tree(linked)
    line = err.value.line()
    assert line.startswith(f"error: {what}") and f"(csrc/vendor -> {target})" in line and "\n" not in line


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
    from ci.universe import targets
    from ci.universe.project import reading

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "setup.py").write_text("")
    (tmp_path / "p" / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n[tool.cuda-ext-farm]\n'
                                                   'torch = ["2.11"]\npython = ["3.11", "3.12"]\n')
    chosen = [t for t in targets.targets_for(reading.load(tmp_path / "p")) if t.arch == "x86_64"]
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


def test_where_links_cannot_be_made_the_copy_holds_what_they_point_to(linked: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows without the symlink privilege: os.symlink raises (stood in for here), the copy gets the content."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(1314, "A required privilege is not held by the client")

    monkeypatch.setattr(os, "symlink", refuse)
    dest = tmp_path / "copy"
    project_source.sync_source(linked, dest)
    assert not (dest / "csrc" / "include").is_symlink()
    assert (dest / "csrc" / "include" / "x" / "x.h").read_text() == "#pragma once\n"
    assert (dest / "csrc" / "version.h").read_text() == "#define V 1\n"


def test_a_clean_copy_has_the_commits_time_and_a_change_the_current_one(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """nvcc -lineinfo writes the .cu file's modification time into the device code: a clean build's copy takes the
    commit's time (SOURCE_DATE_EPOCH), so two clean builds match; a file changed later is newer than the objects
    built from the copy (ninja must rebuild it)."""
    project = tmp_path / "proj"
    (project / "csrc").mkdir(parents=True)
    (project / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    dest = tmp_path / "copy"
    project_source.sync_source(project, dest)
    assert (dest / "csrc" / "k.cu").stat().st_mtime == 1700000000
    (dest / "build").mkdir()  # the first build's objects
    (project / "csrc" / "k.cu").write_text("__global__ void k() { }\n")
    project_source.sync_source(project, dest)
    assert (dest / "csrc" / "k.cu").stat().st_mtime > 1700000000


def test_outside_git_a_clean_copy_keeps_its_sources_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "k.cu").write_text("__global__ void k() {}\n")
    os.utime(project / "k.cu", (1600000000, 1600000000))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    project_source.sync_source(project, tmp_path / "copy")
    assert (tmp_path / "copy" / "k.cu").stat().st_mtime == 1600000000
