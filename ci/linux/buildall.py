"""Every target of a project in its container (a cross-built one on the host), one after the other or
``--jobs N`` at once.

Each target builds in a child ``python -m ci build-cuda --target ID`` whose
output goes to ``<build>/logs/<target>.log``; the terminal shows one progress
line per target and, at the end, a table read from the targets' reports (wheel,
size, SHA-256, time, ccache hits). Every wheel stays in its own
``<wheelhouse>/<target-id>/`` folder, so no two targets ever overwrite each other.
"""

from __future__ import annotations

import concurrent.futures
import re
import sys
import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ci import proc
from ci.builds import preflight, report, tail
from ci.errors import CommandFailed
from ci.log import log
from ci.universe.targets import Target

_CCACHE_HITS = re.compile(r"farm-ccache-stats: hits=(\d+) misses=(\d+)")


def _build_one(target: Target, outputs: tail.Outputs, base_image: str | None, max_jobs: int | None,
               log_path: Path, grouped: bool) -> tuple[int, float]:
    # A cross-built target (aarch64) builds on the host (ci/linux/cross.py); every other one in its container.
    cmd = [sys.executable, "-m", "ci", "build" if target.cross else "build-cuda", "--project",
           str(target.project.root), "--config", str(target.project.source), "--target", target.id,
           "--wheelhouse", str(outputs.wheelhouse), "--build-dir", str(outputs.build_root),
           *(["--base-image", base_image] if base_image and not target.cross else []),
           *(["--max-jobs", str(max_jobs)] if max_jobs else []),
           "--arch-list", target.cell.arch_list]
    # Printed when a worker takes the target, not when it is queued: with --jobs 1 one line at a time.
    # One at a time, a target is a fold group of its own; several at once share the terminal, so they get lines
    # (and each its row of the step summary) but no group.
    if grouped:
        log.target_start(target.id, "build")
    log.note("started", target.id, style="cyan")
    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as fh:

        def write(line: str) -> None:
            fh.write(line)

        try:
            proc.stream(cmd, write, echo=False)
            code = 0
        except CommandFailed:
            code = 1
    seconds = time.monotonic() - started
    detail = "" if code == 0 else f"log: {log_path}"
    if grouped:
        log.target_end(code == 0, detail)
    else:
        log.note("done" if code == 0 else "FAILED", f"{target.id} in {seconds:.0f} s" + (f" ({detail})" if detail
                                                                                          else ""),
                 style="green" if code == 0 else "red")
        log.summary_row(target.id, "ok" if code == 0 else "FAILED", f"{seconds:.0f} s", detail)
    return code, seconds


def local_equivalents(chosen: tuple[Target, ...]) -> tuple[Target, ...]:
    """``chosen`` with each target whose toolkit source this machine cannot reach (cu128: NVIDIA's repository)
    replaced by its cell's local stand-in (cu124), said in one line; the release on GitHub builds the real one.
   """
    from ci.linux import images
    from ci.universe import matrix, targets

    reasons: dict[str, str] = {}
    local: dict[str, Target] = {}
    for target in chosen:
        cell = target.cell
        if cell.toolkit.kind == "nvidia-repo" and not target.cross:
            if cell.name not in reasons:
                reasons[cell.name] = images.probe_url(matrix.nvidia_repo_file(target.arch), images.host_ca_bundle())
            substitute = targets.stand_in(target) if reasons[cell.name] else None
            if substitute is not None:
                log.note(f"{target.id}:", f"{matrix.unreachable_toolkit(cell)[0]} "
                         f"({reasons[cell.name]}): its stand-in {substitute.id} takes its place here")
                target = substitute
        local.setdefault(target.id, target)
    return tuple(local.values())


def build_all(chosen: tuple[Target, ...], outputs: tail.Outputs, *, jobs: int, base_image: str | None,
              max_jobs: int | None) -> int:
    """Build ``chosen``."""
    for target in chosen:  # before any image or compile: what the source alone refuses
        preflight.preflight(target)
    outputs.check_writable()
    logs = outputs.build_root / "logs"
    results: dict[str, tuple[int, float]] = {}
    log.info(f"building {len(chosen)} targets, {jobs} at a time; logs in {logs}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for target in chosen:
            futures[pool.submit(_build_one, target, outputs, base_image, max_jobs, logs / f"{target.id}.log",
                                jobs == 1)] = target
        for future in concurrent.futures.as_completed(futures):
            results[futures[future].id] = future.result()
    table = Table(title=f"build-all: {len(chosen)} targets")
    for col in ("target", "wheel", "size", "sha256", "time", "ccache"):
        table.add_column(col)
    for target in chosen:
        code, seconds = results[target.id]
        rep = report.read_report(outputs.target_dir(target)) if code == 0 else None
        log_text = (logs / f"{target.id}.log").read_text(errors="replace") if (logs / f"{target.id}.log").exists() \
            else ""
        hits = _CCACHE_HITS.findall(log_text)
        cache = f"{hits[-1][0]} hits / {hits[-1][1]} misses" if hits else "-"
        if rep is None:
            table.add_row(target.id, "[red]failed[/]", "-", "-", f"{seconds:.0f} s", cache)
        else:
            table.add_row(target.id, escape(str(outputs.target_dir(target) / rep["wheel"])),
                          f"{rep['size_bytes'] / 2**20:.1f} MiB", rep["sha256"][:16], f"{seconds:.0f} s", cache)
    log.result(table)
    failed = [t for t, (code, _) in results.items() if code != 0]
    if failed:
        raise CommandFailed(f"{len(failed)} of {len(chosen)} targets failed to build", ", ".join(failed),
                            "their logs are listed above")
    return 0
