"""Where the time of fusedops' pointwise ops goes, beside a device-to-device copy.

    python package/tests/benchmarks/profile_pointwise.py [--device cuda] [--exp 24] [--out DIR]

For the bias_act training step (forward + backward of x and b, NCHW, lrelu with
clamp, as in bench.py) of fused and eager, and for round_ste and bias_act
forward calls, it reports:

* the wall time per call (synchronised, back-to-back calls),
* the host time per call (the same calls without waiting for the GPU at each),
* the GPU kernels of one call with their durations (torch.profiler), their sum
  and the bytes the call must move at least, as a share of the copy bandwidth
  measured in the same run,
* the host overhead layers of one small call (2^10 elements): the Python
  wrapper (which launches CUDA kernels beside the dispatcher in plain eager
  calls), the dispatcher op with its autograd kernel, the op below autograd,
  the fast path's launcher alone, and a copy_ for comparison.

A call whose wall time is far above its kernels' sum is bound by the host; a
kernel far below the copy's bandwidth is bound by its instructions or latency
(``ncu`` tells which). Writes ``DIR/profile-pointwise-<device>.json``.
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

# The script's own folder is on sys.path when it runs: the LLTM profile's timing helpers.
from profile_lltm import sync, wall_per_call
from torch.profiler import ProfilerActivity, profile

import fusedops
from fusedops import reference


def kernels(fn: Callable[[], Any], device: torch.device, calls: int = 10) -> list[tuple[str, float]]:
    """The GPU kernels of one call (name, mean µs), from `calls` profiled calls."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    for _ in range(3):
        fn()
    sync(device)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        sync(device)
    out: dict[str, float] = {}
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            out[evt.name] = out.get(evt.name, 0.0) + evt.device_time / calls
    return sorted(out.items(), key=lambda kv: -kv[1])


def copy_gbs(n: int, device: torch.device) -> tuple[float, float]:
    x = torch.randn(n, device=device)
    y = torch.empty_like(x)
    us = wall_per_call(lambda: y.copy_(x), device, calls=50)
    return us, 2 * n * 4 / (us * 1e-6) / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--exp", type=int, default=24, help="elements as a power of two (default 24)")
    p.add_argument("--out", default="bench-results")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    n = 2**args.exp
    report: dict[str, Any] = {"torch": torch.__version__, "device": str(device), "elements": n}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    copy_us, copy_bw = copy_gbs(n, device)
    report["copy"] = {"us": copy_us, "gbs": copy_bw}
    print(f"{report.get('gpu', 'cpu')}  torch {torch.__version__}  n=2^{args.exp}")
    print(f"copy_ fp32: {copy_us:.1f} µs, {copy_bw:.0f} GB/s")

    x = torch.randn(n, device=device).view(-1, 64, 32, 2 ** (args.exp - 11)).requires_grad_()
    b = torch.randn(64, device=device, requires_grad=True)
    dy = torch.randn_like(x)

    def step(fn: Callable[..., torch.Tensor]) -> Callable[[], Any]:
        return lambda: torch.autograd.grad(fn(x, b, act="lrelu", clamp=256.0), (x, b), dy)

    xf = torch.randn(n, device=device)
    xr = xf.view(-1, 256)
    br = torch.randn(256, device=device)
    cases: dict[str, tuple[Callable[[], Any], int]] = {
        # forward reads x, writes y; backward reads dy and x, writes dx (db is a reduction of dx).
        "bias_act fwd+bwd NCHW fused": (step(fusedops.bias_act), 5 * n * 4),
        "bias_act fwd+bwd NCHW eager": (step(reference.bias_act), 5 * n * 4),
        "bias_act swish [N,256] fused": (lambda: fusedops.bias_act(xr, br, act="swish"), 2 * n * 4),
        "bias_act lrelu [N,256] fused": (lambda: fusedops.bias_act(xr, br, act="lrelu"), 2 * n * 4),
        "round_ste fused": (lambda: fusedops.round_ste(xf), 2 * n * 4),
    }
    report["cases"] = {}
    for name, (fn, nbytes) in cases.items():
        wall = wall_per_call(fn, device, calls=20)
        t = time.perf_counter()
        for _ in range(20):
            fn()
        host = (time.perf_counter() - t) / 20 * 1e6
        sync(device)
        ks = kernels(fn, device)
        busy = sum(us for _, us in ks)
        floor = nbytes / (copy_bw * 1e9) * 1e6
        print(f"\n{name}: wall {wall:.1f} µs, host {host:.1f} µs, kernels {busy:.1f} µs, "
              f"bytes-at-copy-speed floor {floor:.1f} µs ({floor / wall:.0%} of wall)")
        for kname, us in ks:
            print(f"  {us:8.1f} µs  {kname[:110]}")
        report["cases"][name] = {"wall_us": wall, "host_us": host, "kernels": ks, "floor_us": floor}

    # Host layers of one tiny call: where a launch-bound call spends its time.
    small = torch.randn(1024, device=device)
    out = torch.empty_like(small)
    below = torch._C._AutoDispatchBelowAutograd
    op = torch.ops.fusedops.round_ste.default

    def below_autograd() -> Any:
        with below():
            return op(small)

    small_rows = small.view(-1, 256)
    bias = torch.randn(256, device=device)
    layers = {
        "fusedops.round_ste": lambda: fusedops.round_ste(small),
        "torch.ops.fusedops.round_ste": lambda: op(small),
        "op below autograd": below_autograd,
        "fusedops.bias_act swish [N,256]": lambda: fusedops.bias_act(small_rows, bias, act="swish"),
        "copy_": lambda: out.copy_(small),
        "empty_like": lambda: torch.empty_like(small),
    }
    launchers = fusedops._state.launchers
    if launchers is not None:  # the fast path's C call alone (csrc/cuda/fast_launch.cpp): reads, empty_like, launch
        layers["_C_cuda.round_ste"] = lambda: launchers.round_ste(small)
        layers["_C_cuda.bias_act lrelu [N,256]"] = lambda: launchers.bias_act(
            small_rows, bias, 1, "lrelu", None, None, None, "cuda")
    # What the fast path's C call does besides the launch, each piece alone.
    from fusedops import _fast

    checks = _fast.NOT_PLAIN
    layers.update({
        "torch.empty((1024,), dtype, device)": lambda: torch.empty((1024,), dtype=torch.float32, device=device),
        "x.new_empty(shape)": lambda: small.new_empty((1024,)),
        "x.is_cuda": lambda: small.is_cuda,
        "x.is_contiguous()": lambda: small.is_contiguous(),
        "x.dtype": lambda: small.dtype,
        "x.get_device()": lambda: small.get_device(),
        "x.requires_grad": lambda: small.requires_grad,
        "x.shape": lambda: small.shape,
        "x.data_ptr()": lambda: small.data_ptr(),
        "the not-plain checks": lambda: [f() for f in checks],
        "an empty lambda": lambda: None,
    })
    print("\nhost layers, 2^10 elements (µs per call, not synchronised per call):")
    report["layers_us"] = {}
    for name, fn in layers.items():
        for _ in range(50):
            fn()
        sync(device)
        samples = []
        for _ in range(7):
            t = time.perf_counter()
            for _ in range(200):
                fn()
            samples.append((time.perf_counter() - t) / 200 * 1e6)
            sync(device)
        us = statistics.median(samples)
        report["layers_us"][name] = us
        print(f"  {us:7.2f}  {name}")
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"profile-pointwise-{device.type}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
