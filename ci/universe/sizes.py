"""Sizes written by people ("95 MiB", "90MB", or a number of bytes), for project keys such as max-wheel-size.
Standard library only: ci/universe/project/ reads the configuration before any virtual environment exists."""

from __future__ import annotations

import re

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse(value: object) -> int | None:
    """Bytes from a positive integer or a positive number with a unit; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]i?b|b)\s*", value, re.IGNORECASE) if isinstance(value, str) \
        else None
    if match is None or float(match.group(1)) <= 0:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
