"""The hash-pinned locks follow their sources: a pin changed without `nox -s lock` fails here."""

from __future__ import annotations

import re

import pytest

from ci.linux import images
from ci.universe import pins


def test_every_generated_lock_pins_exactly_its_matrix_requirements() -> None:
    for name, requirements in pins.generated_inputs().items():
        lock = pins.lock_path(name)
        assert lock.is_file(), f"{lock} is missing: run nox -s lock"
        source = (pins.REQUIREMENTS / f"{name}.in").read_text()
        assert [line for line in source.splitlines() if line and not line.startswith("#")] == requirements, \
            f"{name}.in differs from ci/universe/matrix.py: run nox -s lock"
        locked = pins.pinned_in(lock)
        wanted = {re.sub(r"[-_.]+", "-", r.split("==")[0]).lower(): r.split("==")[1] for r in requirements}
        assert locked == wanted, f"{lock.name} pins {locked}, the matrix {wanted}: run nox -s lock"


@pytest.mark.parametrize("name", [*pins.HAND_WRITTEN, *pins.generated_inputs()])
def test_every_lock_has_hashes_for_everything(name: str) -> None:
    lock = pins.lock_path(name)
    assert pins.unhashed(lock) == []
    assert len(pins.pinned_in(lock)) >= 1


@pytest.mark.parametrize("name", pins.HAND_WRITTEN)
def test_hand_written_requirements_are_in_their_lock(name: str) -> None:
    locked = pins.pinned_in(pins.lock_path(name))
    for line in (pins.REQUIREMENTS / f"{name}.in").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-r"):
            continue
        req_name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0]).lower()
        assert req_name in locked, f"{req_name} of {name}.in is not in {name}.txt: run nox -s lock"
        if "==" in line:
            assert locked[req_name] == line.split("==")[1].strip(), f"{name}.txt pins another {req_name}"


def test_images_are_keyed_by_their_locks(tmp_path: object) -> None:
    from ci.universe import matrix

    spec = images.spec_for(matrix.get_cell("13.0"), f"{images.BASE_REPO}:bookworm")
    files = spec.context_files()
    assert files["toolkit.txt"] == pins.lock_path("toolkit-cu130")
    assert files["image.txt"] == pins.lock_path("image")
