"""The download advice works when followed, on ``gencode_family`` (the shape of a popular family of CUDA projects:
its own nine -gencode pairs, a prebuilt wheel fetched by a custom bdist_wheel unless GENCODE_FAMILY_FORCE_BUILD ==
"TRUE", switches that skip CUDA), built by the installed command (tests/conftest.py) with its release server aimed
at a port nothing listens on.

The build fails before any compile, naming the download and ``build-env = { GENCODE_FAMILY_FORCE_BUILD = "TRUE" }``
(the literal the script compares with; never GENCODE_FAMILY_SKIP_CUDA_BUILD); with that line in the project's table
the next build does not try the download. What it then does with the project's own -gencode flags is the
architecture check's (``project-arch-flags``), not this test's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_fixture_projects import copy_fixture

pytestmark = [pytest.mark.slow, pytest.mark.extended]


def test_the_download_advice_of_the_gencode_family_works_when_followed(farm_command: list[str],
                                                                         tmp_path: Path) -> None:
    folder = copy_fixture("gencode_family", tmp_path)
    args = ["build", "--torch", "2.11", "--python", "3.11", "--arch-list", "9.0", "--wheelhouse",
            str(tmp_path / "wheelhouse"), "--build-dir", str(tmp_path / "build")]
    env = {**os.environ, "COLUMNS": "250", "GENCODE_FAMILY_WHEEL_URL": "http://127.0.0.1:9/wheels/"}
    failed = subprocess.run([*farm_command, *args], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert failed.returncode == 1, failed.stdout[-3000:]
    last = failed.stdout.strip().splitlines()[-1]
    assert last.startswith("error: the wheel build of gencode_family-torch2.11-cu"), last
    assert last.endswith(
        "failed: the build tried to reach the network (a download during the build) (http://127.0.0.1:9/wheels/"
        "gencode_family-0.1.0+cu13torch2.11-cp311-cp311-linux_x86_64.whl: error: <urlopen error [Errno 111] "
        'Connection refused>): the build script forces a local build with GENCODE_FAMILY_FORCE_BUILD (it compares it '
        'with "TRUE"): set build-env = { GENCODE_FAMILY_FORCE_BUILD = "TRUE" } in [tool.cuda-ext-farm], so the farm '
        "compiles the project instead; nothing was written to the wheelhouse"), last
    assert "SKIP_CUDA_BUILD" not in last and "building 'gencode_family._C'" not in failed.stdout

    config = folder / "pyproject.toml"
    config.write_text(config.read_text().replace("[tool.cuda-ext-farm]\n", "[tool.cuda-ext-farm]\n"
                                                 'build-env = { GENCODE_FAMILY_FORCE_BUILD = "TRUE" }\n', 1))
    followed = subprocess.run([*farm_command, *args], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    assert "Guessing wheel URL" not in followed.stdout, followed.stdout[-3000:]
    assert "building 'gencode_family._C' extension" in followed.stdout  # the local build started
    assert "reach the network" not in followed.stdout.strip().splitlines()[-1]
