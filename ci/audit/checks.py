"""The audit's records: one check's result (:class:`Check`), what a library links (:class:`LibraryInfo`) and a
wheel's whole audit (:class:`AuditResult`). The Linux audit (ci/audit/wheel_audit.py), the glibc-floor check
(ci/audit/glibc_floor.py) and the Windows audit (windows/audit.py) report in these; a module of its own so that the
checks' modules, and the build tail that prints them, need not import each other."""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    #: A passing check that still has something to say (shown as WARN; never fails a build).
    warn: bool = False


@dataclasses.dataclass(frozen=True)
class LibraryInfo:
    path: str
    needed: tuple[str, ...]
    rpaths: tuple[str, ...]
    has_cuda_code: bool = False


@dataclasses.dataclass(frozen=True)
class AuditResult:
    wheel: Path
    tags: tuple[str, ...]
    size_bytes: int
    libraries: tuple[LibraryInfo, ...]
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    checks: tuple[Check, ...]
    #: Bytes of CUDA code per architecture (``sm_90``, ``sm_120 PTX``), when cuobjdump was given.
    arch_bytes: tuple[tuple[str, int], ...] = ()

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]
