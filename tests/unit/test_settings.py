"""ci/settings.py: every setting declared once, resolved once (flag, else environment, else default), the generated
reference (docs/settings.md), and every FARM_* name the code reads declared and documented."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ci import cli, settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "settings.md"


def test_the_reference_is_generated_from_the_declaration() -> None:
    text = settings.markdown()
    if os.environ.get("FARM_WRITE_DOCS") == "1":
        DOC.write_text(text, encoding="utf-8")
    assert DOC.read_text(encoding="utf-8") == text, "run FARM_WRITE_DOCS=1 pytest tests/unit/test_settings.py"


def names_the_code_reads() -> set[str]:
    """Every ``FARM_*`` name in a string of the farm's code (an environment variable it reads or sets; a family
    such as ``f"FARM_PYTHON_{...}"`` by its prefix)."""
    found: set[str] = set()
    files = [*(ROOT / "ci").rglob("*.py"), *(ROOT / "windows").rglob("*.py"), ROOT / "noxfile.py"]
    for path in files:
        found |= set(re.findall(r"[\"'%](FARM_[A-Z0-9_]*)", path.read_text(encoding="utf-8")))
    return found


def test_every_farm_variable_the_code_reads_is_declared_and_documented() -> None:
    names = names_the_code_reads()
    assert len(names) > 40  # the scan finds them
    undeclared = sorted(n for n in names if settings.declared(n) is None)
    assert not undeclared, f"declare these in ci/settings.py: {undeclared}"
    doc = DOC.read_text(encoding="utf-8")
    undocumented = sorted(s.env for s in settings.DECLARED if f"`{s.env}" not in doc)
    assert not undocumented


def test_each_variable_is_declared_once() -> None:
    names = [s.env for s in settings.DECLARED]
    assert len(names) == len(set(names))
    assert all(s.help and s.group in settings.GROUPS for s in settings.DECLARED)


def test_flag_then_environment_then_default() -> None:
    resolved = settings.resolve({"FARM_WHEELHOUSE": "/env/wh", "MAX_JOBS": "3"},
                                {"FARM_WHEELHOUSE": "/flag/wh", "MAX_JOBS": None})
    assert (resolved.get("FARM_WHEELHOUSE"), resolved.source("FARM_WHEELHOUSE")) == ("/flag/wh", "flag")
    assert (resolved.get("MAX_JOBS"), resolved.source("MAX_JOBS")) == ("3", "env")
    assert (resolved.get("FARM_BUILD_DIR"), resolved.source("FARM_BUILD_DIR")) == (None, "default")
    assert resolved.get("FARM_PYTHON_3_12") is None  # a family's member: read from the same environment
    assert settings.resolve({"FARM_PYTHON_3_12": "/py"}).get("FARM_PYTHON_3_12") == "/py"
    with pytest.raises(KeyError):
        resolved.get("FARM_NOT_DECLARED")


def test_the_arch_list_is_resolved_once_flag_over_environment() -> None:
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "8.0"}
    opts = cli.parse(["build", "--project", str(ROOT), "--arch-list", "9.0+PTX"], environ=env)
    assert opts.selection.arch_list == "9.0+PTX" and opts.settings.source("TORCH_CUDA_ARCH_LIST") == "flag"
    opts = cli.parse(["build", "--project", str(ROOT)], environ=env)
    assert opts.selection.arch_list == "8.0" and opts.settings.source("TORCH_CUDA_ARCH_LIST") == "env"


def test_max_jobs_comes_from_the_flag_or_the_environment() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MAX_JOBS"}
    assert cli.parse(["build", "--project", str(ROOT)], environ={**env, "MAX_JOBS": "5"}).max_jobs == 5
    given = cli.parse(["build", "--project", str(ROOT), "--max-jobs", "2"], environ={**env, "MAX_JOBS": "5"})
    assert given.max_jobs == 2
    assert cli.parse(["build", "--project", str(ROOT)], environ=env).max_jobs is None


@pytest.mark.parametrize(("environ", "expected"), [
    ({"FARM_PROG": "cuda-ext-farm"}, "cuda-ext-farm build --cpu"),
    ({"FARM_STATUS_FILE": "/tmp/status"}, "nox -s build -- --cpu"),
    ({}, "python -m ci build --cpu"),
])
def test_hints_name_the_command_the_way_the_user_ran_the_farm(environ: dict[str, str], expected: str) -> None:
    settings.install(settings.resolve(environ))
    try:
        assert settings.entry("build", "--cpu") == expected
        assert settings.entry("test") == expected.removesuffix(" --cpu").removesuffix(" --").replace(" build", " test")
    finally:
        settings.install(None)



@pytest.mark.parametrize(("given", "expected"), [
    ("6g", 6 << 30), ("6G", 6 << 30), ("6144m", 6 << 30), ("1.5g", 3 << 29), ("512mb", 512 << 20), ("4096", 4096),
    (" 8g ", 8 << 30), ("lots", None), ("6 g", None), ("-1g", None), ("6gg", None), ("", None), ("g", None)])
def test_an_amount_of_memory_in_dockers_form(given: str, expected: int | None) -> None:
    """What the entry checks FARM_CONTAINER_MEMORY with (ci/cli.py) and the container route reads its --memory
    with (ci/linux/container_compiles.py): one rule."""
    assert settings.memory_amount(given) == expected
