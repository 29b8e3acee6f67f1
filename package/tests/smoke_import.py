"""fusedops' import test (the farm's configured smoke command): runs in a clean environment with the wheel."""

import torch

import fusedops

x = torch.tensor([0.5, 1.5, 2.5, -1.7])
assert fusedops.round_ste(x).tolist() == [0.0, 2.0, 2.0, -2.0]
info = fusedops.build_info()
if torch.cuda.is_available():
    assert info["cuda_kernels_loaded"], f"CUDA kernels did not load: {info['cuda_kernels_reason']}"
    y = fusedops.round_ste(x.cuda())
    assert y.tolist() == [0.0, 2.0, 2.0, -2.0]
print("import test ok:", info)
