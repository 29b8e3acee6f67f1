"""fusedops benchmarks: every op against its plain-PyTorch reference, eager and torch.compile'd.

    python package/tests/benchmarks/bench.py [--device cpu|cuda] [--quick] [--out DIR]

Prints a table and writes ``DIR/bench-<device>.json`` and ``DIR/bench-<device>.png``
(fused vs eager vs compiled per op and size; the picture needs matplotlib, which
is a dependency of this script only, never of the wheel).

How it measures, so that numbers taken on a busy machine still compare:

* the three implementations of a case are measured side by side, interleaved:
  ``--rounds`` rounds, each timing fused, eager and compiled once (in an order
  that rotates), each timing a ``torch.utils.benchmark`` blocked autorange (it
  synchronises CUDA and picks the number of calls);
* the table shows the median over rounds of each round's median, and the JSON
  keeps every round, so a round disturbed by other work shows up as an outlier
  instead of moving the result;
* CPU runs use torch's intra-op threads (``torch.get_num_threads()``, or
  ``--threads``), the same for all three (torch.utils.benchmark's Timer would
  otherwise run everything on one thread).

Each pointwise size has a ``copy_`` row: a copy of the same bytes, measured in
the same run, the ceiling of a memory-bound op. The "of copy" column is the share
of that copy's bandwidth a fused case reaches (copy time / fused time). LLTM
rows come with the step's three GEMMs timed alone, the floor no fusion of the
element-wise part can go below.

Timings never appear in test asserts; this is the place for them. The script
imports only torch, fusedops, rich, numpy and (for the picture) matplotlib, and
uses only fusedops calls that every release has, so the same script measures an
older build for a before/after comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
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
IMPLS = ("fused", "eager", "compiled")


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    name: str
    size: str  # the x-axis label of the picture
    fns: dict[str, Fn]
    bytes_moved: int | None = None  # for pointwise ops: bytes read + written once
    copy_case: str | None = None  # the name of the copy_ case of the same size, measured in the same run


@dataclasses.dataclass
class Result:
    op: str
    name: str
    size: str
    rounds: dict[str, list[float]]  # impl -> per-round median, ms
    bytes_moved: int | None
    copy_case: str | None = None
    copy_ms: float | None = None  # the median of copy_case, filled in once every case is measured

    def median(self, impl: str) -> float | None:
        values = self.rounds.get(impl)
        return statistics.median(values) if values else None

    def minimum(self, impl: str) -> float | None:
        values = self.rounds.get(impl)
        return min(values) if values else None

    def speedup(self, baseline: str) -> float | None:
        fused, other = self.median("fused"), self.median(baseline)
        return None if fused is None or other is None else other / fused

    def gbs(self, impl: str) -> float | None:
        t = self.median(impl)
        return None if t is None or self.bytes_moved is None else self.bytes_moved / (t * 1e-3) / 1e9

    def copy_share(self) -> float | None:
        """The copy's bandwidth reached: copy time of the same bytes / fused time (1.0 = at the copy's speed)."""
        fused = self.median("fused")
        if fused is None or self.copy_ms is None or self.bytes_moved is None:
            return None
        return self.copy_ms / fused

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "case": self.name,
            "size": self.size,
            "median_ms": {impl: self.median(impl) for impl in self.rounds},
            "min_ms": {impl: self.minimum(impl) for impl in self.rounds},
            "rounds_ms": self.rounds,
            "speedup_vs_eager": _round(self.speedup("eager")),
            "speedup_vs_compiled": _round(self.speedup("compiled")),
            "bytes_moved": self.bytes_moved,
            "fused_gbs": _round(self.gbs("fused")),
            "copy_case": self.copy_case,
            "copy_ms": self.copy_ms,
            "share_of_copy": _round(self.copy_share()),
        }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    # One compiled graph per case (shapes and keyword arguments differ), more
    # than dynamo's default limit per function allows before falling back to eager.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    compiled: Callable[..., Any] = torch.compile(fn, dynamic=False)
    return compiled


# --- cases -------------------------------------------------------------------------------------


def pointwise_cases(device: torch.device, exponents: list[int]) -> list[Case]:
    cases: list[Case] = []
    round_c = _compile(reference.round_ste)
    bias_act_c = _compile(reference.bias_act)
    for e in exponents:
        n = 2**e
        x = torch.randn(n, device=device)
        nbytes = 2 * n * x.element_size()
        # The ceiling of every pointwise case of this size: a device-to-device (or memory) copy of the same bytes.
        copy = _copy_case(x, f"2^{e}")
        cases.append(copy)
        cases.append(Case("round_ste", f"2^{e} fp32", f"2^{e}", {
            "fused": partial(fusedops.round_ste, x),
            "eager": partial(reference.round_ste, x),
            "compiled": partial(round_c, x),
        }, nbytes, copy.name))
        # [N, 256] with the bias along the last dimension (a fully connected layer).
        xr = x.view(-1, 256)
        b = torch.randn(256, device=device)
        cases.append(Case("bias_act", f"2^{e} fp32 lrelu [N,256]", f"2^{e} [N,256]", {
            "fused": partial(fusedops.bias_act, xr, b, act="lrelu"),
            "eager": partial(reference.bias_act, xr, b, act="lrelu"),
            "compiled": partial(bias_act_c, xr, b, act="lrelu"),
        }, nbytes, copy.name))
        # NCHW with the bias along the channels (a convolution layer), clamped as in StyleGAN2.
        xc = x.view(-1, 64, 2 ** ((e - 6 - 4) // 2), 2 ** ((e - 6 - 4 + 1) // 2))
        bc = torch.randn(64, device=device)
        cases.append(Case("bias_act", f"2^{e} fp32 lrelu clamp NCHW {list(xc.shape)}", f"2^{e} NCHW", {
            "fused": partial(fusedops.bias_act, xc, bc, act="lrelu", clamp=256.0),
            "eager": partial(reference.bias_act, xc, bc, act="lrelu", clamp=256.0),
            "compiled": partial(bias_act_c, xc, bc, act="lrelu", clamp=256.0),
        }, nbytes, copy.name))
        cases.append(Case("bias_act", f"2^{e} fp32 swish [N,256]", f"2^{e} swish", {
            "fused": partial(fusedops.bias_act, xr, b, act="swish"),
            "eager": partial(reference.bias_act, xr, b, act="swish"),
            "compiled": partial(bias_act_c, xr, b, act="swish"),
        }, nbytes, copy.name))
    return cases


def _copy_case(x: torch.Tensor, size: str) -> Case:
    out = torch.empty_like(x)
    return Case("copy", f"{size} fp32 copy_", size, {"fused": partial(out.copy_, x)}, 2 * x.numel() * x.element_size())


def bias_act_backward_cases(device: torch.device, exponents: list[int]) -> list[Case]:
    cases: list[Case] = []
    for e in exponents:
        x = torch.randn(2**e, device=device).view(-1, 64, 32, 2 ** (e - 6 - 5)).requires_grad_()
        b = torch.randn(64, device=device, requires_grad=True)
        dy = torch.randn_like(x)

        def step(fn: Callable[..., torch.Tensor], x: torch.Tensor = x, b: torch.Tensor = b,
                 dy: torch.Tensor = dy) -> Any:
            return torch.autograd.grad(fn(x, b, act="lrelu", clamp=256.0), (x, b), dy)

        compiled = _compile(partial(step, reference.bias_act))
        copy = _copy_case(x.detach(), f"2^{e} bwd")
        # At least: the forward reads x and writes y, the backward reads dy and x and writes dx (db is a reduction).
        cases.append(copy)
        cases.append(Case("bias_act", f"2^{e} fp32 lrelu clamp fwd+bwd NCHW", f"2^{e} fwd+bwd", {
            "fused": partial(step, fusedops.bias_act),
            "eager": partial(step, reference.bias_act),
            "compiled": compiled,
        }, 5 * x.numel() * x.element_size(), copy.name))
    return cases


def lltm_cases(device: torch.device, sizes: list[tuple[int, int, int]]) -> list[Case]:
    cases: list[Case] = []
    ref_c = _compile(reference.lltm)
    for batch, features, state in sizes:
        g = torch.Generator(device="cpu").manual_seed(0)

        def make(shape: tuple[int, ...], g: torch.Generator = g) -> torch.Tensor:
            return torch.randn(*shape, generator=g).to(device).requires_grad_()

        # bias as (3*state,): the form every fusedops release accepts.
        args = (make((batch, features)), make((3 * state, features + state)), make((3 * state,)),
                make((batch, state)), make((batch, state)))

        def step(fn: Callable[..., Any], args: tuple[torch.Tensor, ...] = args) -> Any:
            h, c = fn(*args)
            (h.sum() + c.sum()).backward()

        cases.append(Case("lltm", f"fwd+bwd B={batch} F={features} S={state}", f"B={batch} S={state}", {
            "fused": partial(step, fusedops.lltm),
            "eager": partial(step, reference.lltm),
            "compiled": partial(step, ref_c),
        }))
        cases.append(_gemm_case(device, batch, features, state))
    return cases


def _gemm_case(device: torch.device, batch: int, features: int, state: int) -> Case:
    """The floor of an LLTM step: its three GEMMs alone (addmm forward, two mm backward), no autograd."""
    X = torch.randn(batch, features + state, device=device)
    W = torch.randn(3 * state, features + state, device=device)
    bias = torch.randn(3 * state, device=device)
    d_gates = torch.randn(batch, 3 * state, device=device)

    def gemms() -> Any:
        torch.addmm(bias, X, W.t())
        d_gates.mm(W)
        return d_gates.t().mm(X)

    return Case("lltm", f"its 3 GEMMs alone B={batch} F={features} S={state}", f"B={batch} GEMMs", {"fused": gemms})


def upfirdn_cases(device: torch.device, shapes: list[tuple[int, int, int]]) -> list[Case]:
    cases: list[Case] = []
    ref_c = _compile(reference.upfirdn2d)
    f = fusedops.setup_filter([1, 3, 3, 1], device=device)
    for n, c, hw in shapes:
        x = torch.randn(n, c, hw, hw, device=device)
        variants: tuple[tuple[str, dict[str, Any]], ...] = (
            ("up=2", {"up": 2, "padding": [2, 1, 2, 1], "gain": 4}),
            ("down=2", {"down": 2, "padding": [1, 1, 1, 1]}),
        )
        for label, kw in variants:
            cases.append(Case("upfirdn2d", f"N={n} C={c} {hw}x{hw} 4-tap {label}", f"{hw}x{hw} {label}", {
                "fused": partial(fusedops.upfirdn2d, x, f, **kw),
                "eager": partial(reference.upfirdn2d, x, f, **kw),
                "compiled": partial(ref_c, x, f, **kw),
            }))
    return cases


def plan(device: torch.device, quick: bool) -> list[Case]:
    if device.type == "cuda":
        exps = [24] if quick else [20, 24, 26]
        lltm_sizes = [(16, 32, 128), (1024, 256, 1024)]  # the tutorial's size and a large one
        up_shapes = [(4, 64, 64)] if quick else [(4, 64, 64), (4, 512, 64)]
        bwd_exps = [24]
    else:
        exps = [20] if quick else [20, 22]
        lltm_sizes = [(16, 32, 128)] if quick else [(16, 32, 128), (256, 128, 512)]
        up_shapes = [(4, 64, 32)] if quick else [(4, 128, 64)]
        bwd_exps = [] if quick else [20]
    return (pointwise_cases(device, exps) + bias_act_backward_cases(device, bwd_exps)
            + lltm_cases(device, lltm_sizes) + upfirdn_cases(device, up_shapes))


# --- measuring ---------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_case(case: Case, device: torch.device, rounds: int, min_run_time: float) -> Result:
    for fn in case.fns.values():  # warm up (and compile) before any timing
        for _ in range(3):
            fn()
    _sync(device)
    samples: dict[str, list[float]] = {impl: [] for impl in case.fns}
    order = list(case.fns)
    for r in range(rounds):
        for impl in order[r % len(order):] + order[: r % len(order)]:
            # Timer defaults to one thread; measure with torch's intra-op threads, as they are set.
            timer = tbench.Timer(stmt="fn()", globals={"fn": case.fns[impl]}, num_threads=torch.get_num_threads())
            m = timer.blocked_autorange(min_run_time=min_run_time)
            samples[impl].append(m.median * 1e3)
    return Result(case.op, case.name, case.size, samples, case.bytes_moved, case.copy_case)


def environment(device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "fusedops": fusedops.build_info() if hasattr(fusedops, "build_info") else {},
        "fusedops_file": str(Path(fusedops.__file__).parent),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "fusedops_cpu_isa": os.environ.get("FUSEDOPS_CPU_ISA", "auto"),
        "rounds": args.rounds,
        "min_run_time_s": args.min_run_time,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "label": args.label,
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    else:
        env["cpu"] = _cpu_name()
        env["cores"] = os.cpu_count()
    return env


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# --- output ------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def table(results: list[Result], title: str) -> Table:
    t = Table(title=title)
    for col in ("op", "case", "fused ms", "eager ms", "compiled ms", "x eager", "x compiled", "fused GB/s",
                "of copy"):
        t.add_column(col, justify="left" if col in ("op", "case") else "right")
    for r in results:
        share = r.copy_share()
        t.add_row(r.op, r.name, _fmt(r.median("fused"), 4), _fmt(r.median("eager"), 4),
                  _fmt(r.median("compiled"), 4), _fmt(r.speedup("eager"), 2), _fmt(r.speedup("compiled"), 2),
                  _fmt(r.gbs("fused"), 1), "-" if share is None else f"{share:.0%}")
    return t


def link_copies(results: list[Result]) -> None:
    """Give each case the median time of its size's copy_, measured in the same run."""
    copies = {r.name: r.median("fused") for r in results if r.op == "copy"}
    for r in results:
        if r.copy_case is not None:
            r.copy_ms = copies.get(r.copy_case)


def plot(results: list[Result], title: str, path: Path) -> bool:
    """One panel per op: median time of fused / eager / compiled per case (log scale)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ops = list(dict.fromkeys(r.op for r in results))
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops) + 1, 4.6), squeeze=False)
    colors = {"fused": "#1f77b4", "eager": "#ff7f0e", "compiled": "#2ca02c"}
    width = 0.27
    for ax, op in zip(axes[0], ops, strict=True):
        rows = [r for r in results if r.op == op]
        for k, impl in enumerate(IMPLS):
            xs = [i + (k - 1) * width for i in range(len(rows))]
            ys = [r.median(impl) or float("nan") for r in rows]
            ax.bar(xs, ys, width, label=impl, color=colors[impl])
        for i, r in enumerate(rows):
            se, sc = r.speedup("eager"), r.speedup("compiled")
            if se is not None and r.median("fused") is not None:
                label = f"{se:.2f}x" + (f"\n{sc:.2f}x" if sc is not None else "")
                ax.annotate(label, (i - width, r.median("fused") or 0), ha="center", va="bottom", fontsize=7)
        ax.set_yscale("log")
        values = [v for r in rows for impl in IMPLS if (v := r.median(impl)) is not None]
        if values:  # bars start well below the smallest, so their heights compare on the log scale
            ax.set_ylim(bottom=min(values) / 4, top=max(values) * 2)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r.size for r in rows], rotation=30, ha="right", fontsize=8)
        ax.set_title(op)
        ax.set_ylabel("median ms (log)")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title + "  (labels: speed-up of fused over eager, over compiled)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def replot(path: Path) -> int:
    data = json.loads(path.read_text())
    env = data["environment"]
    results = [Result(r["op"], r["case"], r["size"], r["rounds_ms"], r.get("bytes_moved"), r.get("copy_case"))
               for r in data["results"]]
    link_copies(results)
    where = env.get("gpu") or env.get("cpu")
    title = f"fusedops on {where} (torch {env['torch']}, {env['threads']} threads)"
    if env.get("label"):
        title += f" {env['label']}"
    png = path.with_suffix(".png")
    if not plot(results, title, png):
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return 1
    print(f"plot written to {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--quick", action="store_true", help="fewer and smaller cases, shorter measurements")
    p.add_argument("--out", default="bench-results", help="folder for bench-<device>.json and .png")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per case (default 5, quick 3)")
    p.add_argument("--min-run-time", type=float, default=None,
                   help="seconds per timing of one implementation in one round (default 0.2, quick 0.1)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads() for CPU runs")
    p.add_argument("--ops", default=None, help="comma-separated ops to run (default: all)")
    p.add_argument("--label", default="", help="free text stored in the JSON (e.g. 'before')")
    p.add_argument("--impls", default=",".join(IMPLS),
                   help="comma-separated implementations to measure (default: fused,eager,compiled)")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="only redraw the picture of an earlier run's bench-<device>.json (next to it)")
    args = p.parse_args(argv)
    if args.replot:
        return replot(Path(args.replot))
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.min_run_time = args.min_run_time or (0.1 if args.quick else 0.2)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA GPU visible", file=sys.stderr)
        return 2
    console = Console() if sys.stdout.isatty() else Console(width=200)
    cases = plan(device, args.quick)
    if args.ops:
        wanted = set(args.ops.split(",")) | {"copy"}
        cases = [c for c in cases if c.op in wanted]
    impls = [i for i in args.impls.split(",") if i]
    if unknown := set(impls) - set(IMPLS):
        p.error(f"--impls: unknown {sorted(unknown)}; choose from {', '.join(IMPLS)}")
    cases = [dataclasses.replace(c, fns={k: v for k, v in c.fns.items() if k in impls}) for c in cases]
    # Every case runs (and torch.compile compiles) once before any is timed: compiling starts Inductor's pool of
    # compile workers, whose start-up took the host from the first cases timed after it (round_ste at 2^20 measured
    # 11 us in four rounds of five and 7.9 in the fifth, on the H200 machine).
    for case in cases:
        for fn in case.fns.values():
            fn()
    _sync(device)
    results = []
    for case in cases:
        console.print(f"[dim]measuring {case.op} {case.name}[/]")
        results.append(measure_case(case, device, args.rounds, args.min_run_time))
    link_copies(results)
    env = environment(device, args)
    where = env.get("gpu") or env.get("cpu")
    title = f"fusedops on {where} (torch {env['torch']}, {env['threads']} threads)"
    if args.label:
        title += f" {args.label}"
    console.print(table(results, title))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{device.type}.json"
    path.write_text(json.dumps({"environment": env, "results": [r.as_dict() for r in results]}, indent=2) + "\n")
    console.print(f"results written to {path}")
    png = out / f"bench-{device.type}.png"
    if plot(results, title, png):
        console.print(f"plot written to {png}")
    else:
        console.print("[yellow]matplotlib is not installed: no plot[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
