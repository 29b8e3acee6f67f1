"""Benchmarks: each fusedops op against its plain-PyTorch reference, eager and compiled.

Timing uses ``torch.utils.benchmark.Timer`` (it synchronises CUDA and picks
the number of runs); the table shows the minimum and median of the measured
runs, the speed-up of the fused op over each baseline and, for the pointwise
ops, the achieved memory bandwidth next to a plain device-to-device copy of the
same size measured in the same run. Results are printed and written as JSON.
Timings never appear in test asserts; this is the place for them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.utils.benchmark as tbench
from rich.console import Console
from rich.table import Table

import fusedops
from fusedops import reference

Fn = Callable[[], Any]


@dataclasses.dataclass(frozen=True)
class Timing:
    min_ms: float
    median_ms: float


@dataclasses.dataclass
class CaseResult:
    op: str
    case: str
    fused: Timing
    eager: Timing
    compiled: Timing | None
    bytes_moved: int | None
    copy: Timing | None

    @property
    def speedup_eager(self) -> float:
        return self.eager.median_ms / self.fused.median_ms

    @property
    def speedup_compiled(self) -> float | None:
        return None if self.compiled is None else self.compiled.median_ms / self.fused.median_ms

    def bandwidth_gbs(self, timing: Timing | None) -> float | None:
        if self.bytes_moved is None or timing is None:
            return None
        return self.bytes_moved / (timing.median_ms * 1e-3) / 1e9

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(
            speedup_vs_eager=round(self.speedup_eager, 3),
            speedup_vs_compiled=None if self.speedup_compiled is None else round(self.speedup_compiled, 3),
            fused_gbs=self.bandwidth_gbs(self.fused),
            copy_gbs=self.bandwidth_gbs(self.copy),
            fraction_of_copy=(
                None
                if self.copy is None or self.bytes_moved is None
                else round(self.copy.median_ms / self.fused.median_ms, 3)
            ),
        )
        return data


def measure(fn: Fn, device: torch.device, min_run_time: float) -> Timing:
    for _ in range(3):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    m = tbench.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time)
    return Timing(min_ms=min(m.times) * 1e3, median_ms=m.median * 1e3)


def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    compiled: Callable[..., Any] = torch.compile(fn, dynamic=False)
    return compiled


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    name: str
    fused: Fn
    eager: Fn
    compiled: Fn | None
    bytes_moved: int | None = None
    copy: Fn | None = None


def pointwise_cases(device: torch.device, exponents: list[int]) -> list[Case]:
    cases: list[Case] = []
    round_c = _compiled(reference.round_ste)
    for e in exponents:
        n = 2**e
        x = torch.randn(n, device=device)
        dst = torch.empty_like(x)
        nbytes = 2 * n * x.element_size()

        def copy(x: torch.Tensor = x, dst: torch.Tensor = dst) -> Any:
            return dst.copy_(x)

        cases.append(Case("round_ste", f"2^{e} fp32", partial(fusedops.round_ste, x),
                          partial(reference.round_ste, x), partial(round_c, x), nbytes, copy))
        if hasattr(fusedops, "bias_act"):
            c = 256
            xb = x.view(-1, c) if n % c == 0 else x
            b = torch.randn(xb.shape[1], device=device)
            ba_c = _compiled(reference.bias_act)
            cases.append(Case(
                "bias_act", f"2^{e} fp32 lrelu [N,{c}]",
                partial(fusedops.bias_act, xb, b, act="lrelu"),
                partial(reference.bias_act, xb, b, act="lrelu"),
                partial(ba_c, xb, b, act="lrelu"),
                nbytes, copy,
            ))
    return cases


def lltm_cases(device: torch.device, sizes: list[tuple[int, int, int]]) -> list[Case]:
    cases: list[Case] = []
    if not hasattr(fusedops, "lltm"):
        return cases
    ref_c = _compiled(reference.lltm)
    for batch, features, state in sizes:
        g = torch.Generator(device="cpu").manual_seed(0)

        def make(shape: tuple[int, ...], g: torch.Generator = g) -> torch.Tensor:
            return torch.randn(*shape, generator=g).to(device).requires_grad_()

        args = (make((batch, features)), make((3 * state, features + state)), make((3 * state,)),
                make((batch, state)), make((batch, state)))

        def step(fn: Callable[..., Any], args: tuple[torch.Tensor, ...] = args) -> Any:
            h, c = fn(*args)
            (h.sum() + c.sum()).backward()

        cases.append(Case(
            "lltm", f"fwd+bwd B={batch} F={features} S={state}",
            partial(step, fusedops.lltm), partial(step, reference.lltm), partial(step, ref_c),
        ))
    return cases


def upfirdn_cases(device: torch.device, shapes: list[tuple[int, int, int]]) -> list[Case]:
    cases: list[Case] = []
    if not hasattr(fusedops, "upfirdn2d"):
        return cases
    ref_c = _compiled(reference.upfirdn2d)
    f = fusedops.setup_filter([1, 3, 3, 1], device=device)
    for n, c, hw in shapes:
        x = torch.randn(n, c, hw, hw, device=device)
        variants: tuple[tuple[str, dict[str, Any]], ...] = (
            ("up=2", {"up": 2, "padding": [2, 1, 2, 1], "gain": 4}),
            ("down=2", {"down": 2, "padding": [1, 1, 1, 1]}),
        )
        for label, kw in variants:
            cases.append(Case(
                "upfirdn2d", f"N={n} C={c} {hw}x{hw} 4-tap {label}",
                partial(fusedops.upfirdn2d, x, f, **kw),
                partial(reference.upfirdn2d, x, f, **kw),
                partial(ref_c, x, f, **kw),
            ))
    return cases


def plan(device: torch.device, quick: bool) -> list[Case]:
    if device.type == "cuda":
        exps = [20, 24] if quick else [20, 24, 26, 28]
        lltm_sizes = [(16, 32, 128), (1024, 256, 1024)]
        up_shapes = [(4, 512, 64)] if not quick else [(4, 64, 64)]
    else:
        exps = [20] if quick else [20, 22]
        lltm_sizes = [(16, 32, 128)] if quick else [(16, 32, 128), (256, 128, 512)]
        up_shapes = [(4, 64, 32)] if quick else [(4, 128, 64)]
    return pointwise_cases(device, exps) + lltm_cases(device, lltm_sizes) + upfirdn_cases(device, up_shapes)


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "fusedops": fusedops.build_info(),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def run(device: torch.device, quick: bool, min_run_time: float, console: Console) -> list[CaseResult]:
    results: list[CaseResult] = []
    for case in plan(device, quick):
        console.print(f"[dim]measuring {case.op} {case.name}[/]")
        fused = measure(case.fused, device, min_run_time)
        eager = measure(case.eager, device, min_run_time)
        compiled = measure(case.compiled, device, min_run_time) if case.compiled else None
        copy = measure(case.copy, device, min_run_time) if case.copy else None
        results.append(CaseResult(case.op, case.name, fused, eager, compiled, case.bytes_moved, copy))
    return results


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def table(results: list[CaseResult], title: str) -> Table:
    t = Table(title=title)
    for col in ("op", "case", "fused min/med ms", "eager med ms", "compiled med ms", "x eager", "x compiled",
                "fused GB/s", "copy GB/s", "% of copy"):
        t.add_column(col, justify="right" if "ms" in col or col.startswith(("x", "%")) or "GB" in col else "left")
    for r in results:
        frac = r.as_dict()["fraction_of_copy"]
        t.add_row(
            r.op, r.case, f"{r.fused.min_ms:.4f}/{r.fused.median_ms:.4f}", _fmt(r.eager.median_ms, 4),
            _fmt(r.compiled.median_ms if r.compiled else None, 4), _fmt(r.speedup_eager, 2),
            _fmt(r.speedup_compiled, 2), _fmt(r.bandwidth_gbs(r.fused), 0), _fmt(r.bandwidth_gbs(r.copy), 0),
            "-" if frac is None else f"{100 * frac:.0f}%",
        )
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.bench", description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    p.add_argument("--min-run-time", type=float, default=0.5, help="seconds per measurement")
    p.add_argument("--out", default="bench-results", help="folder for the JSON results")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    console = Console() if sys.stdout.isatty() else Console(width=220)
    results = run(device, args.quick, args.min_run_time, console)
    env = environment(device)
    console.print(table(results, f"fusedops benchmarks on {env.get('gpu') or env.get('cpu')} (torch {env['torch']})"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{device.type}.json"
    path.write_text(json.dumps({"environment": env, "results": [r.as_dict() for r in results]}, indent=2) + "\n")
    console.print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
