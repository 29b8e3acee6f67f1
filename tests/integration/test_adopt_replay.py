"""A torch release the farm did not know, adopted from a recorded PyPI snapshot, and a classic project's missing
wheels for it built by ``build-all --missing`` in containers: coverage goes from missing to 100 %.

The farm runs from a copy of this checkout whose ``TORCH_RELEASES`` lacks the newest release (the state of a farm
the day before that torch shipped). The classic fixture covers ``torch >= 2.14`` for one Python and one
architecture, so the whole test is two small container builds. Needs a Docker engine (``nox -s tests-extended``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ci.linux import images
from ci.universe import adoption, matrix
from tests.integration import engine

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "tests" / "fixtures" / "classic_ext"
SNAPSHOT = ROOT / "tests" / "fixtures" / "pypi_torch"


pytestmark = engine.marks(base=engine.BOOKWORM)

NEWEST = matrix.TORCH_RELEASES[-1]
BEFORE = matrix.TORCH_RELEASES[-2]


def farm_copy(dest: Path) -> Path:
    """This checkout's files (tracked and new, as git sees them), without the newest torch release."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, stdout=subprocess.PIPE).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    table = dest / "ci" / "universe" / "matrix.py"
    text = table.read_text()
    table.write_text(text.replace(adoption.entries(text)[NEWEST.version], "", 1))
    return dest


def classic_project(dest: Path) -> Path:
    shutil.copytree(CLASSIC, dest, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "wheelhouse"))
    config = dest / "pyproject.toml"
    text = config.read_text()
    covered = 'torch = ["2.11", "2.13"]\npython = ["3.11", "3.12"]\n'
    assert covered in text
    config.write_text(text.replace(covered, f'torch = ">={BEFORE.minor}"\npython = ["3.11"]\ncuda-archs = "9.0"\n'
                                            'archs = ["x86_64"]\nos = ["linux"]\n'))
    return dest


def run(farm: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": str(farm), "FARM_BASE_IMAGE": images.BASE_REPO}
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert "Traceback" not in result.stdout, result.stdout[-4000:]
    return result


def coverage(farm: Path, project: Path) -> dict[str, object]:
    result = run(farm, project, "-m", "ci", "coverage", "wheelhouse", "--json")
    assert result.returncode == 0, result.stdout[-3000:]
    found: dict[str, object] = json.loads(result.stdout[result.stdout.index("{"):])
    return found


def test_a_replayed_release_goes_from_missing_to_covered_through_build_all_missing(tmp_path: Path) -> None:
    farm = farm_copy(tmp_path / "farm")
    project = classic_project(tmp_path / "classic_ext")
    base = run(farm, farm, "-m", "ci", "base-image")
    assert base.returncode == 0, base.stdout[-3000:]

    # The day before: the farm knows BEFORE as the newest torch; the project's wheelhouse is complete.
    first = run(farm, project, "-m", "ci", "build-all", "--missing")
    assert first.returncode == 0, first.stdout[-4000:]
    before = coverage(farm, project)
    assert before["percent"] == 100.0 and before["missing"] == [], before
    (old_target,) = before["present"]  # type: ignore[misc]
    assert f"torch{BEFORE.minor}-" in old_target

    # PyPI has NEWEST: the adoption (replayed from the recorded snapshot) writes its entry, byte for byte.
    adopt = run(farm, farm, "-c", "import sys; from pathlib import Path; "
                "from ci.universe import adoption, pypi_torch; "
                f"sys.exit(adoption.adopt(False, source=pypi_torch.Recorded(Path({str(SNAPSHOT)!r})), "
                "regenerate_after=False))")
    assert adopt.returncode == 0, adopt.stdout[-3000:]
    assert f"torch {NEWEST.version} is on PyPI, not in TORCH_RELEASES" in adopt.stdout
    assert (farm / "ci" / "universe" / "matrix.py").read_text() == (ROOT / "ci" / "universe" / "matrix.py").read_text()

    after_adoption = coverage(farm, project)
    assert after_adoption["percent"] == 50.0, after_adoption
    (missing,) = after_adoption["missing"]  # type: ignore[misc]
    assert f"torch{NEWEST.minor}-" in missing

    # Exactly the missing target is built, in its container, audited; the old wheel is not touched.
    old_wheel = next((project / "wheelhouse" / old_target).glob("*.whl"))
    stamp = old_wheel.stat().st_mtime_ns
    second = run(farm, project, "-m", "ci", "build-all", "--missing")
    assert second.returncode == 0, second.stdout[-4000:]
    assert missing in second.stdout and old_target not in second.stdout, second.stdout[-4000:]
    assert old_wheel.stat().st_mtime_ns == stamp
    report = json.loads((project / "wheelhouse" / missing / "report.json").read_text())
    assert report["mode"] == "container", report.get("mode")
    failed = [c for c in report["checks"] if not c["ok"]]
    assert report["checks"] and not failed, failed
    assert report["sass"] == ["sm_90"], report["sass"]
    done = coverage(farm, project)
    assert done["percent"] == 100.0 and done["missing"] == [], done
    assert (wheel := done["present"][missing]).startswith(f"classic_ext-0.3.0+pt{NEWEST.minor}")  # type: ignore[index]
    assert "cp311-cp311-manylinux" in wheel
