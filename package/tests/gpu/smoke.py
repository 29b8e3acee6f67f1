"""A short CUDA workload for compute-sanitizer: every op, dtype and layout once.

Run as ``compute-sanitizer --tool memcheck python package/tests/gpu/smoke.py``; it
exits non-zero on a wrong result, the sanitizer on a memory error.
"""

from __future__ import annotations

import sys

import torch

import fusedops


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA GPU visible", file=sys.stderr)
        return 2
    dev = "cuda"
    failures = 0
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        base = torch.randn(4, 6, 9, 11, device=dev, dtype=torch.float32).mul(8).to(dtype)
        cases = {
            "contiguous": base,
            "channels_last": base.contiguous(memory_format=torch.channels_last),
            "sliced": base[:, 1::2, 2:, ::3],
            "unaligned": base.flatten()[1:],
            "empty": base[:0],
            "odd": torch.randn(1023, device=dev).to(dtype),
        }
        for name, x in cases.items():
            got = fusedops.round_ste(x)
            if not torch.equal(got, torch.round(x)):
                print(f"round_ste {dtype} {name}: mismatch")
                failures += 1
    failures += other_ops(dev)
    torch.cuda.synchronize()
    print("smoke:", "OK" if failures == 0 else f"{failures} failures")
    return 1 if failures else 0


def other_ops(dev: str) -> int:
    """bias_act, upfirdn2d and LLTM forward and backward, small sizes, every dtype."""
    from fusedops import reference

    failures = 0
    f = fusedops.setup_filter([1, 3, 3, 1], device=dev)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4
        x = torch.randn(2, 8, 13, 17, device=dev, dtype=dtype)
        b = torch.randn(8, device=dev, dtype=dtype)
        for layout in (x, x.contiguous(memory_format=torch.channels_last), x[:, :, 1:, ::2]):
            xg = layout.detach().clone().requires_grad_()
            y = fusedops.bias_act(xg, b, act="swish", clamp=2.0)
            (g,) = torch.autograd.grad(y.float().square().sum(), xg, create_graph=True)
            g.float().sum().backward()
            ref = reference.bias_act(layout.double(), b.double(), act="swish", clamp=2.0)
            failures += not torch.allclose(y.double(), ref, rtol=tol * 4, atol=tol * 4)
            for kw in ({"up": 2, "padding": [2, 1, 2, 1], "gain": 4}, {"down": 2, "padding": 1}):
                u = fusedops.upfirdn2d(layout, f, **kw)
                uref = reference.upfirdn2d(layout.double(), f, **kw)
                failures += not torch.allclose(u.double(), uref, rtol=tol * 8, atol=tol * 8)
        inp = [torch.randn(*s, device=dev, dtype=dtype, requires_grad=True)
               for s in ((4, 6), (30, 16), (30,), (4, 10), (4, 10))]
        h, c = fusedops.lltm(*inp)
        (h.float().sum() + c.float().sum()).backward()
        rh, _ = reference.lltm(*[t.detach().double() for t in inp])
        failures += not torch.allclose(h.double(), rh, rtol=tol * 4, atol=tol * 4)
    if failures:
        print(f"other ops: {failures} mismatches")
    return failures


if __name__ == "__main__":
    sys.exit(main())
