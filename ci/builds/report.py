"""Build reports: a table on stdout (a result, through :data:`ci.log.log`) and ``report.json`` beside the wheel; both
with every secret masked (``ci/log.py``: a check's detail or an image name can quote a URL)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ci import fsutil
from ci.audit.checks import AuditResult
from ci.log import log, mask_data
from ci.nvcc.admission import need


@dataclasses.dataclass(frozen=True)
class BuildReport:
    target: str
    project: str
    mode: str  # "host", "container" or "windows"
    wheel: str
    sha256: str
    size_bytes: int
    tags: tuple[str, ...]
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    nvcc: str | None
    torch: str
    python: str
    build_seconds: float
    checks: tuple[dict[str, Any], ...]
    image: str | None = None
    #: Bytes of CUDA code per architecture (SASS cubins, PTX), uncompressed, as cuobjdump extracts them.
    arch_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    #: What splitting the debug info off saved (ci/builds/debug_split.py): ``wheel_before``/``wheel_after`` bytes,
    #: and per library its bytes before and after and its debug file; None: not split (``strip-debug = false``).
    debug_split: dict[str, Any] | None = None
    #: abi3 wheels: the oldest CPython the wheel installs on, read from its tag (``3.9``; ci/builds/abi3.py).
    abi3_floor: str | None = None
    #: Whose architecture list the CUDA code was built for and audited against (``project-arch-flags``).
    archs_from: str | None = None
    #: Every compile of the build that finished (ci/nvcc/admission's record): source, architectures, nvcc's
    #: --threads, seconds, the peak memory of its process tree in bytes, and whether it ran the compiler (a
    #: compile-cache hit did not); a resumed build's are those of its last run.
    compiles: tuple[dict[str, Any], ...] = ()

    @property
    def size_mib(self) -> float:
        return self.size_bytes / 2**20

    def to_json(self) -> str:
        return json.dumps(mask_data(dataclasses.asdict(self)), indent=2)


def make_report(
    target_id: str,
    project: str,
    audit: AuditResult,
    *,
    sha256: str,
    mode: str,
    nvcc: str | None,
    torch: str,
    python: str,
    seconds: float,
    image: str | None = None,
    debug_split: dict[str, Any] | None = None,
    abi3_floor: str | None = None,
    archs_from: str | None = None,
) -> BuildReport:
    return BuildReport(
        target=target_id, project=project, mode=mode, wheel=audit.wheel.name, sha256=sha256,
        size_bytes=audit.size_bytes, tags=audit.tags, sass=audit.sass, ptx=audit.ptx, nvcc=nvcc, torch=torch,
        python=python, build_seconds=round(seconds, 1),
        checks=tuple(dataclasses.asdict(c) for c in audit.checks), image=image, arch_bytes=dict(audit.arch_bytes),
        debug_split=debug_split, abi3_floor=abi3_floor, archs_from=archs_from,
    )


def print_report(report: BuildReport) -> None:
    """The report as a table on stdout."""
    table = Table(title=f"{report.target} ({report.mode} build)", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("wheel", escape(report.wheel))
    table.add_row("size", f"{report.size_mib:.2f} MiB")
    table.add_row("sha256", report.sha256)
    table.add_row("tag", ", ".join(report.tags) + (f" (abi3 floor {report.abi3_floor})" if report.abi3_floor else ""))
    table.add_row("SASS", " ".join(report.sass) or "-")
    table.add_row("PTX", " ".join(report.ptx) or "-")
    if report.archs_from:
        table.add_row("architectures", f"{report.archs_from} list")
    if report.arch_bytes:
        total = sum(report.arch_bytes.values())
        table.add_row("CUDA code per arch", ", ".join(
            f"{arch} {n / 2**10:.0f} KiB ({n / total:.0%})" for arch, n in report.arch_bytes.items()))
    if report.debug_split is not None:
        table.add_row("debug info split off", debug_split_text(report.debug_split))
    table.add_row("nvcc", report.nvcc or "-")
    table.add_row("torch (built against)", report.torch)
    table.add_row("python (build)", report.python)
    if report.image:
        table.add_row("image", escape(report.image))
    table.add_row("build time", f"{report.build_seconds:.1f} s")
    for check in report.checks:
        if check["name"] == "torch-range" and check["ok"]:
            table.add_row("torch range", escape(str(check["detail"])))
        elif check.get("warn"):
            table.add_row(f"[yellow]warning[/] {escape(check['name'])}", escape(str(check["detail"])))
    failed = [c for c in report.checks if not c["ok"]]
    verdict = f"[green]{len(report.checks)} checks passed[/]" if not failed else f"[red]{len(failed)} failed[/]"
    table.add_row("audit", verdict)
    log.result(table)


def debug_split_text(split: dict[str, Any]) -> str:
    """``tiny_ext/_C.so 10,974,000 -> 196,816 bytes (debug/<id>.debug); wheel 3.4 MiB -> 80 KiB``."""
    libraries = split.get("libraries", [])
    if not libraries:
        return "no library carried debug sections"
    parts = [f"{lib['member']} {lib['before']:,} -> {lib['after']:,} bytes ({lib['debug_file']})" for lib in libraries]
    return "; ".join(parts) + f"; wheel {split['wheel_before']:,} -> {split['wheel_after']:,} bytes"


#: What report.json keeps of each line of the wrapper's record.
COMPILE_FIELDS = ("source", "kind", "archs", "threads", "seconds", "peak", "compiled")


def with_compiles(rep: BuildReport, record: Path, folder: Path) -> BuildReport:
    """``rep`` with the compiles of ``record`` (JSON lines; the finished ones, by source), written again to
    ``folder``'s report.json."""
    lines: dict[str, dict[str, Any]] = {}
    try:
        text = record.read_text()
    except OSError:
        return rep
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line cut by a killed compile
        if isinstance(line, dict) and line.get("rc") == 0 and "source" in line:
            lines[str(line["source"])] = {k: line.get(k) for k in COMPILE_FIELDS} | {"kind": need.kind_of(line)}
    rep = dataclasses.replace(rep, compiles=tuple(lines[k] for k in sorted(lines)))
    write_report(rep, folder)
    return rep


def write_report(report: BuildReport, folder: Path) -> Path:
    return fsutil.atomic_write_text(folder / "report.json", report.to_json() + "\n")


def read_report(folder: Path) -> dict[str, Any] | None:
    path = folder / "report.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data
