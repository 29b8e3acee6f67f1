"""The GPU test lanes by name, and the ``--lanes`` value read into them (standard library only: the command line
checks ``--lanes`` before any environment exists; ci/testing/gpu_lanes.py runs them)."""

from __future__ import annotations

from ci.errors import UsageError

LANES = ("default", "sanitizer", "ptx-jit", "multi-gpu", "bench")


def parse_lanes(value: str) -> list[str]:
    lanes = [lane.strip() for lane in value.split(",") if lane.strip()]
    unknown = sorted(set(lanes) - set(LANES))
    if unknown or not lanes:
        raise UsageError("unknown GPU test lane", ", ".join(unknown) or "none given",
                         f"choose from {', '.join(LANES)}")
    return lanes
