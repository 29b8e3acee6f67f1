"""The dev shell (ci/linux/shell.py) in the real builder image: the compile cache's settings reach the container by
name, their values in the docker client's environment, so no command line holds a storage's password (the
process list shows docker's arguments; the farm's replayable line masks the value). A recording ``docker`` in front
of the real one (``FARM_DOCKER``) keeps the arguments it was given."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from ci.linux import images, shell
from ci.universe import matrix
from tests.integration import engine

pytestmark = engine.marks()


def test_the_shell_hands_the_cache_storage_in_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str],
                                                      request: pytest.FixtureRequest) -> None:
    spec = images.spec_for(matrix.get_cell("13.0"), f"{images.BASE_REPO}:bookworm")
    if not images.image_exists(spec.tag):
        pytest.skip(f"the builder image {spec.tag} is not built (nox -s images builds it)")
    password = "Sh" + uuid.uuid4().hex[:14]
    real = shutil.which("docker")
    assert real is not None
    recorder = tmp_path / "bin" / "docker"
    recorder.parent.mkdir()
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {tmp_path}/argv\nexec {real} "$@"\n')
    recorder.chmod(0o755)
    monkeypatch.setenv("FARM_DOCKER", str(recorder))
    images.docker_cli.cache_clear()  # it keeps the client it found first
    request.addfinalizer(images.docker_cli.cache_clear)
    monkeypatch.setenv("FARM_COMPILE_CACHE", "ccache")
    monkeypatch.setenv("FARM_CCACHE_REMOTE", f"redis://:{password}@cache.internal:6379")
    project = tmp_path / "project"
    project.mkdir()
    os.chmod(project, 0o777)  # the container's user writes its answer here
    rc = shell.run_shell(spec, project, ["sh", "-c", 'printf %s "$CCACHE_REMOTE_STORAGE" > /project/seen'])
    assert rc == 0
    assert (project / "seen").read_text() == f"redis://{password}@cache.internal:6379"  # ccache's form
    argv = (tmp_path / "argv").read_text().splitlines()
    assert "CCACHE_REMOTE_STORAGE" in argv and password not in "\n".join(argv)
    err = capsys.readouterr().err
    assert "CCACHE_REMOTE_STORAGE=redis://***@cache.internal:6379" in err and password not in err
