"""A short CUDA workload for compute-sanitizer: every op, dtype and layout once.

Run as ``compute-sanitizer --tool memcheck python tests/gpu/smoke.py``; it
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
    torch.cuda.synchronize()
    print("smoke:", "OK" if failures == 0 else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
