"""Whether this machine can run the container tests: one answer for every test module that needs Docker.

No image can be pulled here, so a test that builds in a container first bootstraps a Debian base with debootstrap
(``python -m ci base-image``), unless the base is already there."""

from __future__ import annotations

import shutil

import pytest

from ci.linux import images

#: The base the container tests build on (``python -m ci base-image`` bootstraps it).
BOOKWORM = f"{images.BASE_REPO}:bookworm"


def missing(*, base: str | None = None) -> str | None:
    """Why the container tests cannot run here, or None. ``base``: the Debian base the test builds on; without it
    on the engine, debootstrap has to make it."""
    try:
        images.require_engine()
    except images.ImageError as exc:
        return str(exc)
    if base is not None and shutil.which("debootstrap") is None and not images.image_exists(base):
        return f"no {base} and no debootstrap to make it (apt-get install debootstrap)"
    return None


def marks(*, base: str | None = None) -> list[pytest.MarkDecorator]:
    """A module's ``pytestmark``: docker, and skipped with the reason when :func:`missing` has one. Asked at
    collection, so only for modules that run in the extended suite or with an engine anyway."""
    reason = missing(base=base)
    return [pytest.mark.docker, pytest.mark.skipif(reason is not None, reason=f"no Docker engine: {reason}")]


def skip_without(*, base: str | None = None) -> None:
    """Inside a test that the default suite collects: skip it (asking only when it runs) when :func:`missing` says
    why."""
    reason = missing(base=base)
    if reason is not None:
        pytest.skip(f"no Docker engine: {reason}")
