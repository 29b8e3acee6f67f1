"""Issue 46's done-when on the container route: under a 6 GiB container limit (``FARM_CONTAINER_MEMORY=6g``:
docker's ``--memory``, enforced by the kernel's memory cgroup), the heavy fixture's shape fails with the naive
settings, named as memory, and builds with the farm's defaults, with the bytes of a build without a limit.

On this project's 2-core machine the naive settings run two compiles at once, each with two architectures at
once (``--threads 0`` is the machine's CPU count): four ptxas processes. tests/fixtures/heavy_templates as it is
peaks at 3.3-3.5 GiB that way (its files' ptxas hold 0.6-0.9 GiB each), which 6 GiB never kills; the copy here
instantiates seven groups of its tile shapes per file instead of one (ptxas holds the whole module: measured
1.61 GiB for six groups with one architecture, 155 s), in two files of two architectures: the naive build's four
processes need about 7 GiB, the farm's plan (one compile at a time, ``--threads 0``) 3.4 GiB. On a 4-core runner
the fixture itself does the same at 6 GiB (16 processes of up to 0.9 GiB naive, four for the farm). Measured
(stop 51): naive killed after 6m43s (h1 at 2.9 GiB), the farm's two compiles one after the other in 7m09s (3.4 GiB
each), the unlimited build's two at once in 7m09s; the two wheels' bytes equal.

docker, extended and slow (three container builds of several minutes: ``nox -s tests-extended``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration import engine
from tests.integration.test_containers import (  # noqa: F401 - base, image: the fixtures
    base,
    image,
    run_ci,
)

pytestmark = [*engine.marks(base=engine.BOOKWORM), pytest.mark.extended, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
LIMIT = "6g"
GROUPS = (18, 21, 24, 27, 30, 33, 36)  # first rows of each group (rows B and B+2): no shape twice in a file


def heavier(folder: Path) -> Path:
    """The heavy fixture with two heavy files of seven shape groups each (the other two light), under a name of its
    own (its records are not the fixture's: a record of the lighter files would make the farm expect too little)."""
    project = folder / "heavy_6g"
    shutil.copytree(ROOT / "tests" / "fixtures" / "heavy_templates", project,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    for number in (2, 3):  # module.cpp links all four: the last two are light
        (project / "csrc" / f"h{number}.cu").write_text(f'extern "C" int heavy_file_{number}() {{ return 1; }}\n')
    header = project / "csrc" / "heavy.cuh"
    text = header.read_text()
    # The two files compile the same code, told apart by a template argument of the file's number (no symbol twice
    # in the wheel). Not by one more unrolled step: nvcc 13.0 compiled that file (HEAVY_UNROLL 97) to objects of
    # different bytes from run to run, the same command twice at once (96 gives the same bytes).
    for old, new in (("template <int ROWS, int COLS, int STEPS>", "template <int ROWS, int COLS, int STEPS, int FILE>"),
                     ("tile_kernel<R, C, HEAVY_UNROLL>", "tile_kernel<R, C, HEAVY_UNROLL, HEAVY_FILE>"),
                     ("HEAVY_SHAPES(18 + 2 * HEAVY_FILE)", " ".join(f"HEAVY_SHAPES({b})" for b in GROUPS))):
        assert text.count(old) == 1, f"the fixture changed ({old}): update this test"
        text = text.replace(old, new)
    header.write_text(text)
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text().replace('name = "heavy-templates"', 'name = "heavy-templates-6g"')
    own = '[tool.cuda-ext-farm]\nimport-name = "heavy_templates"\n'  # the module keeps its name
    # cibuildwheel's smoke test: torch first (it loads the CUDA runtime the module links)
    smoke = '\n[tool.cuda-ext-farm.commands]\nsmoke = "python -c \'import torch, heavy_templates\'"\n'
    pyproject.write_text(text.replace("[tool.cuda-ext-farm]\n", own) + smoke)
    return project


def container_build(project: Path, tmp_path: Path, wheelhouse: str, **env: str) -> tuple[int, str]:
    result = run_ci("build-cuda", "13.0", "--project", str(project), "--arch-list", "8.0;9.0", "--wheelhouse",
                    str(tmp_path / wheelhouse), "--build-dir", str(tmp_path / "build"),
                    env={"FARM_BASE_IMAGE": "cuda-ext-farm/base", "FARM_COMPILE_CACHE": "off", **env})
    print("\n".join(line[:300] for line in result.stdout.splitlines()
                    if "jobs x --threads" in line or line.startswith(("compiled ", "error:"))))
    return result.returncode, result.stdout


def test_naive_settings_die_in_a_6g_container_and_the_farm_builds_the_bytes_of_an_unlimited_build(
        image: str, tmp_path: Path) -> None:  # noqa: F811
    project = heavier(tmp_path)
    code, said = container_build(project, tmp_path, "naive", FARM_CONTAINER_MEMORY=LIMIT,
                                 FARM_COMPILE_ADMISSION="off")
    assert code != 0, said[-4000:]
    last = said.strip().splitlines()[-1]
    assert "ran out of memory" in last and "FARM_COMPILE_ADMISSION" in last, said[-4000:]
    assert not list((tmp_path / "naive").glob("*/*.whl"))

    code, said = container_build(project, tmp_path, "farm", FARM_CONTAINER_MEMORY=LIMIT)
    assert code == 0, said[-4000:]
    assert any("(the container memory limit)" in line and "6.0 GiB available" in line for line in said.splitlines())

    code, said = container_build(project, tmp_path, "unlimited")
    assert code == 0, said[-4000:]
    (limited,) = (tmp_path / "farm").glob("*/*.whl")
    (unlimited,) = (tmp_path / "unlimited").glob("*/*.whl")
    assert limited.read_bytes() == unlimited.read_bytes()
