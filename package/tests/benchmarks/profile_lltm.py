"""Where the time of one LLTM training step goes: fused vs eager vs torch.compile.

    python package/tests/benchmarks/profile_lltm.py [--device cuda] [--batch 16 --features 32 --state 128] [--out DIR]

For each implementation it measures the wall time of a step (forward, loss,
backward; synchronised), then profiles a few steps with torch.profiler and
reports, per step: the host (CPU) time, the GPU busy time (the sum of the
kernels' durations), the number of kernel launches and of autograd nodes run,
and the most expensive operators. Two floors are measured alongside: the cost
of launching one tiny kernel from Python and of the smallest autograd
backward. A step whose GPU busy time is a small part of its wall time is
bound by the host: launches, the dispatcher, the autograd engine.

Writes ``DIR/profile-lltm-<device>.json`` and ``DIR/profile-lltm-<device>.txt``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import fusedops
from fusedops import reference


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_per_call(fn: Callable[[], Any], device: torch.device, calls: int, repeats: int = 7) -> float:
    """Median over repeats of the mean wall time of `calls` back-to-back calls, in microseconds."""
    for _ in range(10):
        fn()
    sync(device)
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync(device)
        samples.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(samples)


def profile_steps(fn: Callable[[], Any], device: torch.device, steps: int) -> dict[str, Any]:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    for _ in range(5):
        fn()
    sync(device)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        sync(device)
    events = prof.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.device_time for e in kernels) / steps if kernels else 0.0
    per_kernel: dict[str, list[float]] = {}
    for e in kernels:
        entry = per_kernel.setdefault(e.name, [0.0, 0.0])
        entry[0] += 1 / steps
        entry[1] += e.device_time / steps
    autograd_nodes = [e for e in events if e.name.startswith(("autograd::engine::evaluate_function",))]
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=18, max_name_column_width=60)
    top = sorted(prof.key_averages(), key=lambda a: a.cpu_time_total, reverse=True)[:12]
    return {
        "gpu_busy_us_per_step": gpu_us,
        "kernel_launches_per_step": len(kernels) / steps,
        "kernels": sorted({e.name for e in kernels}),
        # name -> [launches per step, GPU µs per step], most expensive first
        "kernel_breakdown": dict(sorted(per_kernel.items(), key=lambda kv: -kv[1][1])),
        "autograd_nodes_per_step": len(autograd_nodes) / steps,
        "top_ops": [
            {"name": a.key, "cpu_total_us_per_step": a.cpu_time_total / steps, "calls_per_step": a.count / steps}
            for a in top
        ],
        "table": table,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--state", type=int, default=128)
    p.add_argument("--steps", type=int, default=20, help="profiled steps")
    p.add_argument("--calls", type=int, default=200, help="steps per wall-time sample")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    B, F, S = args.batch, args.features, args.state
    g = torch.Generator(device="cpu").manual_seed(0)

    def make(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device).requires_grad_()

    inputs = (make(B, F), make(3 * S, F + S), make(1, 3 * S), make(B, S), make(B, S))

    def step(fn: Callable[..., Any]) -> None:
        h, c = fn(*inputs)
        (h.sum() + c.sum()).backward()

    impls: dict[str, Callable[[], None]] = {
        "fused": lambda: step(fusedops.lltm),
        "eager": lambda: step(reference.lltm),
    }
    if not args.no_compile:
        compiled = torch.compile(reference.lltm, dynamic=False)
        impls["compiled"] = lambda: step(compiled)

    # Floors: one tiny kernel launched from Python; the smallest autograd backward.
    tiny = torch.zeros(1, device=device)
    leaf = torch.zeros(1, device=device, requires_grad=True)
    floors = {
        "launch_one_kernel_us": wall_per_call(lambda: tiny.add_(1), device, args.calls * 5),
        "smallest_backward_us": wall_per_call(lambda: (leaf * 2).sum().backward(), device, args.calls),
    }
    results: dict[str, Any] = {}
    for name, fn in impls.items():
        wall = wall_per_call(fn, device, args.calls)
        prof = profile_steps(fn, device, args.steps)
        results[name] = {"wall_us_per_step": wall, **prof}
        for leaf_t in inputs:
            leaf_t.grad = None

    lines = [f"LLTM step (forward + sum loss + backward), B={B} F={F} S={S}, device {device}"
             + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
             f"torch {torch.__version__}, fusedops from {Path(fusedops.__file__).parent}",
             f"floors: one kernel launch {floors['launch_one_kernel_us']:.1f} us, smallest backward "
             f"{floors['smallest_backward_us']:.1f} us", ""]
    lines.append(f"{'impl':9} {'wall us':>9} {'GPU busy us':>12} {'GPU/wall':>9} {'launches':>9} "
                 f"{'autograd nodes':>15}")
    for name, r in results.items():
        busy = r["gpu_busy_us_per_step"]
        lines.append(f"{name:9} {r['wall_us_per_step']:9.1f} {busy:12.1f} {busy / r['wall_us_per_step']:9.2f} "
                     f"{r['kernel_launches_per_step']:9.1f} {r['autograd_nodes_per_step']:15.1f}")
    for name, r in results.items():
        lines += ["", f"--- {name}: GPU time per step by kernel (launches, µs)"]
        lines += [f"  {n:4.1f} x {us:9.1f} µs  {k[:100]}" for k, (n, us) in r["kernel_breakdown"].items()]
        lines += [r["table"]]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"profile-lltm-{device.type}.txt").write_text(text + "\n")
    summary = {"config": {"batch": B, "features": F, "state": S, "device": str(device), "torch": torch.__version__},
               "floors_us": floors,
               "results": {k: {kk: vv for kk, vv in v.items() if kk != "table"} for k, v in results.items()}}
    (out / f"profile-lltm-{device.type}.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
