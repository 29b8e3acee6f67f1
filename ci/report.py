"""Build reports: a rich table on the terminal and a JSON file next to the wheels."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ci import matrix
from ci.audit import AuditResult


@dataclasses.dataclass(frozen=True)
class BuildReport:
    cell: str
    mode: str  # "host" or "container"
    wheel: str
    size_bytes: int
    tags: tuple[str, ...]
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    nvcc: str | None
    torch: str
    build_seconds: float
    checks: tuple[dict[str, Any], ...]
    image: str | None = None

    @property
    def size_mib(self) -> float:
        return self.size_bytes / 2**20

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)


def make_report(
    cell: matrix.Cell | None,
    audit: AuditResult,
    *,
    mode: str,
    nvcc: str | None,
    torch: str,
    seconds: float,
    image: str | None = None,
) -> BuildReport:
    return BuildReport(
        cell=cell.name if cell else "cpu",
        mode=mode,
        wheel=audit.wheel.name,
        size_bytes=audit.size_bytes,
        tags=audit.tags,
        sass=audit.sass,
        ptx=audit.ptx,
        nvcc=nvcc,
        torch=torch,
        build_seconds=round(seconds, 1),
        checks=tuple(dataclasses.asdict(c) for c in audit.checks),
        image=image,
    )


def print_report(report: BuildReport, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"fusedops wheel ({report.cell}, {report.mode} build)", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("wheel", report.wheel)
    table.add_row("size", f"{report.size_mib:.2f} MiB")
    table.add_row("tag", ", ".join(report.tags))
    table.add_row("SASS", " ".join(report.sass) or "-")
    table.add_row("PTX", " ".join(report.ptx) or "-")
    table.add_row("nvcc", report.nvcc or "-")
    table.add_row("torch (built against)", report.torch)
    if report.image:
        table.add_row("image", report.image)
    table.add_row("build time", f"{report.build_seconds:.1f} s")
    failed = [c for c in report.checks if not c["ok"]]
    verdict = f"[green]{len(report.checks)} checks passed[/]" if not failed else f"[red]{len(failed)} failed[/]"
    table.add_row("audit", verdict)
    console.print(table)


def write_report(report: BuildReport, folder: Path) -> Path:
    path = folder / f"report-{report.cell}-{report.mode}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(report.to_json() + "\n")
    tmp.replace(path)
    return path
