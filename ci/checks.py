"""One audit check's result: what the Linux audit (ci/audit.py), the glibc-floor check (ci/glibc_floor.py) and the
Windows audit report. A module of its own so that the checks' modules need not import each other."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    #: A passing check that still has something to say (shown as WARN; never fails a build).
    warn: bool = False
